"""NumPy's floating-point warnings from dualgraph's own kernels are silenced, as PyTorch
is silent: ``x / 0`` is inf and ``log(0)`` is -inf without a word, in eager and compiled
code alike. The filter matches only warnings raised in dualgraph's modules (and its
generated code, named under ``dualgraph.``); the user's own NumPy calls still warn.
A filter costs nothing per op, where ``np.errstate`` around each kernel would cost ~1 us.

>>> import warnings, dualgraph as dg
>>> with warnings.catch_warnings():
...     warnings.simplefilter("error")
...     install()
...     dg.tensor([1.0]) / dg.tensor([0.0])
tensor([inf])
"""
from __future__ import annotations

import warnings

_MESSAGE = r"(divide by zero|invalid value|overflow|underflow) encountered"


def install() -> None:
    """Put the filter first among the warning filters (again: ``catch_warnings`` blocks and
    test runners reset them)."""
    warnings.filterwarnings("ignore", message=_MESSAGE, category=RuntimeWarning,
                            module=r"dualgraph(\.|$)")
