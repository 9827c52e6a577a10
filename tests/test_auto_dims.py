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
        return x[::2] * 2          # (a strided slice of the dim: not a sum of symbols)

    compiled = dg.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (3, 4, 5, 4):
            x = dg.randn(n, 2)
            close(compiled(x).numpy(), f(x).numpy())
    assert len(compiled.cache) == 3
    assert "automatic dynamic dims given up" in compiled.explain()


def test_a_kv_cache_grown_by_cat_compiles_once_for_every_length():
    """``k = cat([k_cache, k_new], 1)`` at each step of a decode: one symbolic graph (dims
    ``s0`` and ``s0 + 1``) from the second length on, equal to eager at every step, forward
    and backward."""
    rng = np.random.default_rng(0)
    wk, wq = (dg.tensor(rng.normal(size=(4, 4)), requires_grad=True) for _ in range(2))

    def step(x, cache):
        k = dg.cat([cache, x @ wk], 1)
        att = ((x @ wq) @ k.transpose(1, 2)).softmax(-1)
        return att @ k, k.detach()

    compiled = dg.compile(step)
    caches = [dg.tensor(rng.normal(size=(2, 1, 4)))] * 2
    for t in range(9):
        x = dg.tensor(rng.normal(size=(2, 1, 4)))
        outs = []
        for k, fn in enumerate((step, compiled)):
            out, caches[k] = fn(x, caches[k])
            (out * out).sum().backward()
            outs.append((out.detach().numpy(), caches[k].numpy(), wk.grad.numpy().copy()))
            wk.grad = wq.grad = None
        for e, c in zip(*outs):
            np.testing.assert_allclose(c, e, rtol=1e-9)
    assert len(compiled.cache) == 2   # (length 1, then s0)
    shapes = [tuple(map(str, v.shape)) for v in compiled.graph.nodes[-1].outputs]
    assert "automatic dynamic dims given up" not in compiled.explain(), shapes


@pytest.mark.parametrize("key", ["[:, :-1]", "[:, 1:]", "[:, -2:]", "[:, :2]", "[:, 1:-1]",
                                 "[:, -2:-1]", "[..., :-2, :]"])
def test_slices_by_constants_of_a_symbolic_dim_stay_symbolic(key):
    """Teacher forcing (``tgt[:, :-1]`` against ``tgt[:, 1:]``) with lengths that vary: one
    symbolic graph, equal to eager at every length; a length at which a slice's dim would
    be 0 or 1 (which the graph assumed it is not: a squeeze would drop it) gets a static
    graph of its own."""
    def f(tgt):
        part = eval("tgt" + key)
        return (part * 2.0).squeeze(1), part.sum(1)

    torch = pytest.importorskip("torch")
    compiled = dg.compile(f)
    rng = np.random.default_rng(1)
    for n in (6, 7, 9, 2, 3, 4, 12, 2, 3):
        array = rng.normal(size=(2, n, 3))
        expected = f(torch.tensor(array))   # (the oracle: torch's slices and squeeze)
        for c, e, t in zip(compiled(dg.tensor(array)), f(dg.tensor(array)), expected):
            assert c.shape == e.shape == tuple(t.shape), (n, c.shape, e.shape)
            np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-12)
            np.testing.assert_allclose(c.numpy(), t.numpy(), rtol=1e-12)
    assert "given up" not in compiled.explain()
    symbolic = [sig for sig in compiled.cache if any(
        type(d) is not int for f in sig[1] for d in f[1])]
    assert len(symbolic) == 1 and len(compiled.cache) <= 4


@pytest.mark.parametrize("body", [
    "dg.cat([x, x[:1]])[:x.shape[0]]",                 # a bag's starts: [:n] of n + 1
    "dg.cat([x, x[:2]])[x.shape[0]:]",                 # the appended part
    "dg.cat([x, x[:2]])[1:x.shape[0]].cumsum(0)",
    "dg.cat([x, x])[:x.shape[0]]",                     # n of 2n: never past the end
    "dg.arange(10.0)[:x.shape[0]]",                    # a static dim by a size (clamped)
    "dg.cat([x, x[:1]])[x.shape[0]:x.shape[0] + 1]",
])
def test_slices_by_symbolic_sizes(body):
    """``x[:n]`` with ``n`` another tensor's traced size (an embedding bag's starts cut
    to the input's length, a static table cut to it, clamped past its end): symbolic,
    the clamp's case decided by the traced sizes (shapes.SizeCases); equal to eager at
    every size."""
    def f(x):
        return eval(body)
    compiled = dg.compile(f)
    rng = np.random.default_rng(2)
    for n in (5, 7, 9, 12, 6):
        x = dg.tensor(rng.normal(size=n))
        np.testing.assert_array_equal(compiled(x).numpy(), f(x).numpy())
    assert "given up" not in compiled.explain(), compiled.explain()


def test_an_int_index_from_either_end_of_a_symbolic_dim_stays_symbolic():
    """``logits[:, -1]`` (the last position of a sequence that grows at each call) and
    ``x[:, 0]``, ``x[:, -2]``: one symbolic graph for every length, equal to torch's."""
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(2).normal(size=(3, 5))

    def f(x, w):
        return (x @ w)[:, -1].softmax(-1) + x[:, 0].sum(-1, keepdim=True) + x[:, -2].mean()

    compiled = dg.compile(f)
    rng = np.random.default_rng(3)
    for n in (4, 5, 6, 7, 2, 3, 9):
        a = rng.normal(size=(2, n, 3))
        out = compiled(dg.tensor(a), dg.tensor(w)).numpy()
        np.testing.assert_allclose(out, f(torch.tensor(a), torch.tensor(w)).numpy(),
                                   rtol=1e-12)
    assert len(compiled.cache) == 2 and "given up" not in compiled.explain()


LAYOUT_PROGRAMS = {   # a copy made by contiguous(), then a write to its base
    "permuted, slice written": "t = x.t().contiguous().t()\nx[:1] = 3.0",
    "permuted, whole written": "t = x.t().contiguous().t()\nx.mul_(2.0)",
    "sliced": "t = x[:, 1:].contiguous() + x[1:].contiguous().sum()\nx.mul_(2.0)",
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("body", list(LAYOUT_PROGRAMS))
def test_contiguous_of_a_view_with_symbolic_dims_copies_where_eager_does(body, dynamic):
    """With a symbolic dim, ``x.t().contiguous()`` counted as ``x`` itself (the layout was
    not known), so a later write to ``x`` reached the copy while tracing and not eagerly:
    the view chain is replayed at stand-in sizes above 1 instead (ops/views.py)."""
    namespace = {"dg": dg}
    exec("def f(x):\n    " + LAYOUT_PROGRAMS[body].replace("\n", "\n    ")
         + "\n    return t * 1.0\n", namespace)
    f = namespace["f"]
    compiled = dg.compile(f, dynamic=dynamic)
    rng = np.random.default_rng(4)
    for n in (3, 4, 5, 6):
        a = rng.normal(size=(n, 3))
        np.testing.assert_array_equal(compiled(dg.tensor(a)).numpy(), f(dg.tensor(a)).numpy())
    assert "given up" not in compiled.explain()


def test_the_fast_path_checks_the_facts_of_dims_that_are_sums():
    """An inference call through the inlined fast path: ``x[:, 1:] - x[:, :-1]`` at length
    2 has a dim of 1 that the squeeze drops; the fast path misses, and the call runs the
    static graph of its own, as eagerly."""
    def f(x):
        return (x[:, 1:] - x[:, :-1]).squeeze(1) * 2

    compiled = dg.compile(f)
    fast = []
    for n in (5, 6, 7, 2, 9, 2, 3):
        x = dg.randn(3, n)
        out = compiled(x)
        assert out.shape == f(x).shape
        np.testing.assert_allclose(out.numpy(), f(x).numpy(), rtol=1e-6)
        fast.append(compiled._fast is not None and "dims_fit" in compiled._fast.source)
    assert fast == [False, True, True, False, True, False, True]


def test_a_sum_dim_equal_to_another_dim_gets_a_static_graph():
    """``a[:-1]`` (``s0 - 1``) where ``b`` has that very length (``s1``): the trace took the
    two for different sizes (here, broadcasting refuses them), so that call is traced with
    static shapes and adds as eager does."""
    def f(a, b):
        return a[:-1].sum(0) + b.sum(0), a[:-1] * 1.0

    compiled = dg.compile(f)
    for n, m in ((5, 3), (6, 4), (7, 6), (8, 3), (4, 3)):
        a, b = dg.randn(n, 2), dg.randn(m, 2)
        for c, e in zip(compiled(a, b), f(a, b)):
            np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-6)
    assert "unlike the other dims" in compiled.explain()


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


def test_a_tensor_filled_with_a_symbolic_size_is_one_graph():
    """``torch.full((n,), x.size(0))`` (CTC's input lengths): the value a node computes
    from the dims when it runs, not a size baked in or a break."""
    def lengths(x):
        return dg.full((x.size(1),), x.size(0), dtype=dg.long), dg.full((2,), 2 * x.size(0) + 1)

    compiled = dg.compile(lengths)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (3, 5, 8, 2):
            got, want = compiled(dg.randn(n, 4)), lengths(dg.randn(n, 4))
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g.numpy(), w.numpy())
                assert g.dtype == w.dtype
    assert len(compiled.cache) == 2   # (the first size static, then one symbolic graph)
