"""Automatic dynamic dims (capture/autodims.py): without ``dynamic=``, a dim whose size
alone changes is traced symbolic; compiled against eager on values and gradients, the
graphs it keeps, and where it gives up (static graphs, no warning)."""
from __future__ import annotations

import warnings

import numpy as np

import dualgraph as dg
import dualgraph.nn.functional as F


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_a_changing_length_is_one_symbolic_graph():
    w = dg.randn(3, 4)

    def f(x):
        return (x @ w).relu().sum(0)

    compiled = dg.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (2, 5, 7, 5, 2, 9, 1):
            x = dg.randn(n, 3)
            close(compiled(x).numpy(), f(x).numpy())
    # (2, 3) static, (s0, 3) for the rest; 1 stays a number: its own static graph
    assert len(compiled.cache) == 3
    text = compiled.explain()
    assert "x.shape[0] changed from 2 to 5: traced again with that dim symbolic" in text
    assert "('s0', 3)" in text


def test_equal_sizes_share_a_symbol_and_differing_ones_retrace():
    def f(a, b):
        return a + b.flip(0) * 2

    compiled = dg.compile(f)
    for n, m in ((3, 3), (4, 4), (6, 6), (5, 7), (5, 5)):
        a, b = dg.randn(n, 2), dg.randn(m, 2) if m == n else dg.randn(1, 2)
        close(compiled(a, b).numpy(), f(a, b).numpy())
    assert not compiled.eager_only


def test_an_op_that_needs_the_size_keeps_static_graphs_without_a_warning():
    def f(x):
        return x[1:] * 2          # (a slice of the dim: not a symbolic form)

    compiled = dg.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (3, 4, 5, 4):
            x = dg.randn(n, 2)
            close(compiled(x).numpy(), f(x).numpy())
    assert len(compiled.cache) == 3
    assert "automatic dynamic dims given up" in compiled.explain()


def test_dynamic_false_never_marks_a_dim():
    compiled = dg.compile(lambda x: x * 2, dynamic=False)
    for n in (2, 3, 4):
        compiled(dg.ones(n))
    assert len(compiled.cache) == 3 and "symbolic" not in compiled.explain()


def test_a_training_step_over_batches_of_varying_size_matches_eager():
    """A shorter last batch, a different one each epoch: parameters, optimiser state and
    losses equal eager's, with one symbolic graph for the sizes after the first."""
    runs = []
    for compiled in (False, True):
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.Tanh(), dg.nn.Linear(8, 3))
        opt = dg.optim.Adam(model.parameters(), lr=0.01)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        fn = dg.compile(step) if compiled else step
        rng = np.random.default_rng(0)
        losses = []
        for n in (16, 16, 16, 5, 16, 16, 7, 16, 3):
            x = dg.tensor(rng.normal(size=(n, 4)).astype(np.float32))
            y = dg.tensor(rng.integers(0, 3, n))
            losses.append(fn(x, y).item())
        runs.append((losses, [p.detach().numpy().copy() for p in model.parameters()], fn))
    (want, want_p, _), (got, got_p, fn) = runs
    close(got, want)
    for a, b in zip(got_p, want_p):
        close(a, b)
    assert not fn.eager_only and len(fn.cache) <= 4, fn.explain()


def test_backward_through_the_outputs_with_a_changing_size_matches_eager():
    """A compiled model called in an eager loop (backward outside): a backward graph that
    would need a symbolic size none of its inputs has goes back to static graphs."""
    lin = dg.nn.Linear(3, 2)
    compiled = dg.compile(lambda x: lin(x).mean(0) * x.sum())
    for n in (2, 4, 6, 4):
        x = dg.randn(n, 3, requires_grad=True)
        lin.zero_grad()
        (lin(x).mean(0) * x.sum()).sum().backward()
        want = [x.grad.numpy().copy(), lin.weight.grad.numpy().copy()]
        x.grad = None
        lin.zero_grad()
        compiled(x).sum().backward()
        close(x.grad.numpy(), want[0])
        close(lin.weight.grad.numpy(), want[1])
