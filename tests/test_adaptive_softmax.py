"""nn.AdaptiveLogSoftmaxWithLoss against torch's: the same state-dict keys and printed
form; output, loss, log_prob and predict, and the gradients of the input and of every
parameter, batched and for one row, with and without the head's bias; a compiled call one
graph (every cluster scores every row, masked) with eager's numbers; torch's errors for
bad cutoffs and targets out of range."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)
X = RNG.normal(size=(7, 12)).astype(np.float32)
TARGETS = np.array([0, 3, 4, 8, 9, 14, 19])   # (the shortlist, every cluster, both ends)


def build(lib, head_bias):
    m = lib.nn.AdaptiveLogSoftmaxWithLoss(12, 20, [4, 9, 15], div_value=2.0,
                                          head_bias=head_bias)
    rng = np.random.default_rng(1)
    m.load_state_dict({k: lib.tensor(rng.normal(0, 0.5, tuple(v.shape)).astype(np.float32))
                       for k, v in m.state_dict().items()})
    return m


def run(lib, m):
    x = lib.tensor(X, requires_grad=True)
    t = lib.tensor(TARGETS)
    out = m(x, t)
    log_prob = m.log_prob(x)
    weights = lib.tensor(np.arange(140, dtype=np.float32).reshape(7, 20) / 100)
    (out.loss + (log_prob * weights).sum()).backward()
    one = m(x[2].detach(), t[2])
    return [out.output.detach().numpy(), out.loss.detach().numpy(), log_prob.detach().numpy(),
            m.predict(x).numpy(), x.grad.numpy(), one.output.detach().numpy(),
            one.loss.detach().numpy()] + [p.grad.numpy() for p in m.parameters()]


@pytest.mark.parametrize("head_bias", [False, True])
def test_matches_torch(head_bias):
    ours, theirs = build(dg, head_bias), build(torch, head_bias)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    got, want = run(dg, ours), run(torch, theirs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        # (float32 sums of terms up to ~40: an absolute tolerance to the scale)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(w).max()))
    assert type(ours(dg.tensor(X), dg.tensor(TARGETS))).__name__ == "_ASMoutput"


def test_compiled_is_one_graph_with_eagers_numbers():
    m = build(dg, True)
    compiled = dg.compile(lambda x, t: m(x, t))
    got = compiled(dg.tensor(X), dg.tensor(TARGETS))
    want = m(dg.tensor(X), dg.tensor(TARGETS))
    np.testing.assert_allclose(got.output.detach().numpy(), want.output.detach().numpy(),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.loss.item(), want.loss.item(), rtol=1e-6)
    assert compiled.explain().splitlines()[0].endswith("1 graph(s), 0 graph break(s)")


def test_errors_as_torchs():
    for cutoffs in ([], [5, 3], [0, 4], [4, 20], [4, 4]):
        with pytest.raises(ValueError, match="cutoffs should be"):
            dg.nn.AdaptiveLogSoftmaxWithLoss(8, 20, cutoffs)
    m = build(dg, False)
    with pytest.raises(RuntimeError, match=r"Target values should be in \[0, 19\]"):
        m(dg.tensor(X), dg.tensor(TARGETS + 1))
    with pytest.raises(RuntimeError, match="same size in the batch"):
        m(dg.tensor(X), dg.tensor(TARGETS[:3]))
