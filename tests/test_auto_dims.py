"""Automatic dynamic dims (capture/autodims.py): without ``dynamic=``, a dim whose size
alone changes is traced symbolic; compiled against eager on values and gradients, the
graphs it keeps, and where it gives up (static graphs, no warning)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn.functional as F
from dualgraph.shapes import ShapeError


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


@pytest.mark.parametrize("program", [
    lambda x: x * 2 if x.shape[0] == 4 else x * 3,
    lambda x: x * (x.shape[0] != 4),
    lambda x: x * (0.5 if x.size(0) % 2 else 2.0),
    lambda x: x + (x.shape == (4, 2)),
], ids=["eq", "ne", "mod", "shape-eq"])
def test_a_program_that_reads_a_symbolic_size_is_traced_for_each_size(program):
    """``if x.shape[0] == 4`` or ``x.size(0) % 2`` in the user's code answered as for
    every size (False, 1) once the dim was symbolic: calls of size 4 or 6 silently took
    the other branch. Now the trace is ended there and the function traced per shape."""
    compiled = dg.compile(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (3, 4, 5, 6, 4):
            x = dg.ones(n, 2)
            np.testing.assert_array_equal(compiled(x).numpy(), program(x).numpy())


def test_sym_equality_with_numbers_it_can_never_be():
    """A symbolic dim is never 0, 1, negative or off its coefficient's multiples: known
    False there (shape rules and broadcasting ask it), unknown (raises) elsewhere."""
    from dualgraph.shapes import Sym
    b = Sym("B")
    assert (b == 1) is False and (b != 0) is True and (2 * b == 3) is False
    assert 2 * b % 2 == 0
    with pytest.raises(ShapeError):
        b % 2


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


def _fast_ran(compiled, *args):
    """What the inlined fast path (capture/fastpath.py) gives for ``args``: its result, or
    None where it hands the call to the general path."""
    from dualgraph.capture.fastpath import MISS
    assert compiled._fast is not None, "no fast path"
    out = compiled._fast(args, {})
    return None if out is MISS else out


def test_a_symbolic_graph_gets_the_inlined_fast_path_with_the_signatures_rules():
    """After a symbolic graph runs, its calls take the fast path: sizes checked inline
    (equal sizes one symbol, each above 1, distinct symbols distinct), and a shape a static
    graph was traced for, a size 1, two dims of one size, another rank: the general path,
    which picks the graph the signature says."""
    w = dg.randn(3, 4)

    def f(a, b):
        return (a @ w).relu().sum(0) + b.sum(1).mean()

    compiled = dg.compile(f)
    for n, m in ((2, 5), (4, 6), (7, 3)):   # (2, 5) static, then (s0, 3), (s1, 4)
        compiled(dg.randn(n, 3), dg.randn(m, 4))
    assert len(compiled.cache) == 2 and "n1" in compiled._fast.source
    for n, m in ((6, 2), (9, 11), (3, 8)):
        a, b = dg.randn(n, 3), dg.randn(m, 4)
        close(_fast_ran(compiled, a, b).numpy(), f(a, b).numpy())
    for n, m in ((2, 5), (1, 4), (4, 1), (5, 5)):
        a, b = dg.randn(n, 3), dg.randn(m, 4)
        assert _fast_ran(compiled, a, b) is None
        close(compiled(a, b).numpy(), f(a, b).numpy())   # (its own graph, or a new one)
    assert _fast_ran(compiled, dg.randn(4, 3, 1), dg.randn(5, 4)) is None
    assert _fast_ran(compiled, dg.randn(4, 2), dg.randn(5, 4)) is None


def test_a_training_step_of_varying_batch_runs_the_fast_path_as_eager_does():
    """A training step (its buffers planned for the symbolic sizes, one set per size)
    through the fast path over batches of several sizes: losses, parameters and optimiser
    state equal eager's; the graphs: the first size, the optimiser's first step, then one
    symbolic graph."""
    runs = []
    sizes = (3, 5, 7, 9, 4, 7, 12, 6)
    for compiled in (False, True):
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.ReLU(), dg.nn.Linear(8, 2))
        opt = dg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss

        fn = dg.compile(step) if compiled else step
        rng = np.random.default_rng(1)
        losses, fast = [], []
        for n in sizes:
            x = dg.tensor(rng.normal(size=(n, 4)).astype(np.float32))
            y = dg.tensor(rng.normal(size=(n, 2)).astype(np.float32))
            fast.append(compiled and fn._fast is not None)
            losses.append(fn(x, y).item())
        state = [t.numpy().copy() for s in opt.state.values() for t in s.values()]
        runs.append((losses, [p.detach().numpy().copy() for p in model.parameters()] + state,
                     fn, fast))
    (want, want_p, _, _), (got, got_p, fn, fast) = runs
    close(got, want)
    for a, b in zip(got_p, want_p):
        close(a, b)
    assert len(fn.cache) == 3, fn.explain()
    assert all(fast[4:]) and "bufs = buffers.get((n0,))" in fn._fast.source


def test_dynamic_true_fast_path_leaves_a_size_mismatch_to_the_general_path():
    """``dynamic=True``: dim 0 of every argument is ``B``; a call whose two arguments
    differ there is refused by the fast path and raises as the general path does."""
    compiled = dg.compile(lambda a, b: a * 2 + b, dynamic=True)
    for n in (3, 5):
        a, b = dg.randn(n, 2), dg.randn(n, 2)
        close(compiled(a, b).numpy(), (a * 2 + b).numpy())
    a, b = dg.randn(6, 2), dg.randn(6, 2)
    close(_fast_ran(compiled, a, b).numpy(), (a * 2 + b).numpy())
    assert _fast_ran(compiled, dg.randn(1, 2), dg.randn(1, 2)) is not None   # (B may be 1)
    a, b = dg.randn(4, 2), dg.randn(5, 2)
    assert _fast_ran(compiled, a, b) is None
    with pytest.raises(ShapeError, match="cannot be 5 when B=4"):
        compiled(a, b)
