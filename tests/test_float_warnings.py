"""dualgraph is silent where PyTorch is on floating-point specials (x / 0, log(0), 0 / 0),
in eager and compiled code, while the user's own NumPy calls still warn."""
import warnings

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph import _warnings


def _specials(m):
    a, b = m.tensor([1.0, 0.0, -1.0]), m.tensor([0.0, 0.0, 0.0])
    return m.log(a / b + 1), m.exp(m.tensor([1000.0]))


def test_eager_and_compiled_specials_are_silent_and_match_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (pytest resets the filters for each test)
        _warnings.install()
        eager = _specials(dg)
        compiled = dg.compile(lambda: _specials(dg))()
        with pytest.raises(RuntimeWarning, match="divide by zero"):
            np.log(np.zeros(1))          # (the user's own NumPy is untouched)
    want = _specials(torch)
    for got in (eager, compiled):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
