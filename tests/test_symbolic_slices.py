"""Slices whose bounds or sizes are symbolic in a trace with automatic dynamic dims
(shapes.SizeCases): a static table cut to a traced length (``pos[:, :T]``, a causal mask's
``mask[:T, :T]``, a rotary cache's ``cos[:T]``, clamped past its end as Python clamps),
constants from either end of a symbolic dim (``x[3:]``, ``x[:-3]``, ``x[2:7]``), ``narrow``
by a traced length. Compiled against eager and torch (values, shapes, gradients) over
lengths that grow, shrink, hit 0 and pass the static size; the graphs each sequence
compiles are counted: new lengths past the first two reuse the symbolic graphs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dualgraph as dg
from dualgraph.shapes import ShapeError, SizeCases, Sym, sym_slice

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
POS = RNG.normal(size=(1, 8, 3))
MASK = np.triu(np.full((8, 8), -np.inf), 1)


def traces(compiled) -> int:
    """How many times ``compiled`` traced (captures and retraces in ``explain()``)."""
    return sum(r.kind in ("capture", "retrace") for r in compiled.records)


def check(program, arrays_of, lengths, grads=False, compiled=None):
    """``program`` compiled (or ``compiled``, made by an earlier call) against itself
    eagerly and under torch for each length (``arrays_of(n)``: its NumPy arguments);
    with ``grads``, the gradients of its arguments by a backward inside the compiled
    function. The compiled function."""
    def step(*xs):
        out = program(*xs)
        if grads:
            (out * out).sum().backward()
        return out

    compiled = compiled or dg.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (no retrace-limit or static-dims warning)
        for n in lengths:
            arrays = arrays_of(n)
            results = []
            for fn, lib in ((compiled, dg), (step, dg), (step, torch)):
                xs = [lib.tensor(a, requires_grad=grads) for a in arrays]
                out = fn(*xs)
                results.append([out.detach().numpy()] +
                               ([x.grad.numpy() for x in xs] if grads else []))
            for got, eager, want in zip(*results):
                assert got.shape == eager.shape == want.shape, (n, got.shape, want.shape)
                np.testing.assert_allclose(got, eager, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert "given up" not in compiled.explain(), compiled.explain()
    return compiled


def lib_of(x):
    return dg if isinstance(x, dg.Tensor) else torch


@pytest.mark.parametrize("grads", [False, True], ids=["forward", "backward"])
def test_a_static_table_cut_to_a_traced_length_is_one_graph(grads):
    """A learned position table and a causal-mask buffer cut to the sequence's length
    (``pos[:, :T]``, ``mask[:T, :T]``): one symbolic graph for every length up to the
    table's, gradients of the table's rows included."""
    def attend(x, pos):
        t = x.shape[1]
        h = x + pos[:, :t]
        scores = h @ h.transpose(1, 2) + lib_of(x).tensor(MASK)[:t, :t]
        return scores.softmax(-1) @ h

    lengths = (2, 3, 5, 8, 4, 7, 6, 2, 3)
    compiled = check(attend, lambda n: [RNG.normal(size=(2, n, 3)), POS], lengths, grads)
    assert traces(compiled) == 2   # (length 2 static, then T symbolic for all the others)


@pytest.mark.parametrize("grads", [False, True], ids=["forward", "backward"])
def test_positions_by_arange_of_a_traced_length_are_one_graph(grads):
    """``torch.arange(T)`` of the sequence's length (position ids, a causal mask by
    comparing two aranges, T5's relative positions ``memory - context``, as float and
    int64): symbolic from the second length, where an array of the traced length made
    every length a graph of its own."""
    def attend(x):
        lib, t = lib_of(x), x.shape[1]
        pos = lib.arange(t, dtype=x.dtype)
        causal = lib.arange(t)[None, :] <= lib.arange(0, t)[:, None]
        relative = (lib.arange(t)[None, :] - lib.arange(t)[:, None]).abs()
        scores = x @ x.transpose(1, 2) - 0.1 * relative + pos[:, None] * 0.01
        scores = scores.masked_fill(~causal, float("-inf"))
        return scores.softmax(-1) @ x + pos[:, None]

    lengths = (2, 3, 5, 8, 4, 7, 6, 2, 3)
    compiled = check(attend, lambda n: [RNG.normal(size=(2, n, 3))], lengths, grads)
    assert traces(compiled) == 2   # (length 2 static, then T symbolic for all the others)


def test_a_clamp_past_the_static_size_is_a_second_symbolic_graph():
    """``w[:T]`` with T past the table's 8 rows gives all 8 (Python's clamp): the graph
    traced for T within the table runs only for such T (its case, a guard); a T past it
    traces the other case once, also symbolic; each serves its lengths from then on."""
    def f(x, w):
        return w[:x.shape[0]].sum(0) * x.sum()

    table = RNG.normal(size=(8, 2))
    lengths = (3, 4, 5, 9, 12, 6, 8, 30, 2, 7, 10)
    compiled = check(f, lambda n: [RNG.normal(size=(n, 2)), table], lengths)
    assert traces(compiled) == 3
    assert "traced again for that case of the clamp" in compiled.explain()
    assert "3 graph(s)" in compiled.explain()


@pytest.mark.parametrize("key", ["[3:]", "[:-3]", "[2:7]", "[-5:]", "[-6:-2]", "[1:-4]",
                                 "[-4::2]", "[3:4]"])
@pytest.mark.parametrize("grads", [False, True], ids=["forward", "backward"])
def test_slices_by_constants_of_a_symbolic_dim(key, grads):
    """Constant bounds of any size on a symbolic dim: the length ``max(0, s0 - k)`` (or
    a constant, where the clamp decides so) by the case the traced length takes. Lengths
    that leave a slice of 0 or 1 rows, or below a bound, get graphs of their own (a
    symbolic dim is at least 2); every other new length reuses a graph already made."""
    def f(x):
        return eval("x" + key) * 2.0

    def arrays_of(n):
        return [RNG.normal(size=(n, 2))]

    compiled = check(f, arrays_of, (9, 10, 12, 6, 11, 1, 3, 4, 2, 0, 5, 15, 8, 14), grads)
    before = traces(compiled)
    check(f, arrays_of, (13, 16, 20, 17, 40), grads, compiled)   # (new lengths, past
    assert traces(compiled) == before, compiled.explain()         # every bound)


@pytest.mark.parametrize("body", [
    "x.narrow(0, 1, x.shape[0] - 2)",
    "x.narrow(0, x.shape[0] - 3, 3)",
    "x.narrow(0, -3, 2)",
    "w.narrow(0, 0, x.shape[0]) * x",
    "w[x.shape[0]] * x",
])
def test_narrow_and_an_index_by_a_traced_length(body):
    """``narrow`` with a start or a length computed from a symbolic size, and a static
    table's row at a traced length (``table[T]``): one symbolic graph for all lengths."""
    w = RNG.normal(size=(12, 2))

    def f(x, w):
        return eval(body) * 1.0

    lengths = (4, 5, 7, 9, 6, 11)
    compiled = check(f, lambda n: [RNG.normal(size=(n, 2)), w], lengths)
    assert traces(compiled) == 2


def test_out_of_range_after_a_symbolic_trace_raises_as_eager():
    """A graph traced for lengths where ``narrow`` and ``w[T]`` are in range is not run
    for one where they are not: that call raises what eager raises."""
    w = dg.tensor(RNG.normal(size=(6, 2)))
    compiled = dg.compile(lambda x: w[x.shape[0]] * x.narrow(0, 0, 5))
    for n in (5, 6):   # (w[5] fits; then 6 is past the table)
        x = dg.randn(n, 2)
        if n < 6:
            compiled(x)
    for n in (7, 4):
        with pytest.raises(IndexError):
            compiled(dg.randn(n, 2))


def test_a_decoding_loop_with_a_cache_passed_in_is_one_graph():
    """A GPT-style step: the new token's embedding plus the position table's row at the
    cache's length (``pos[t:t + 1]``), keys and values appended to the caches passed in
    and returned, a causal mask cut to the lengths. Greedy decoding compiled equals eager
    at every step, with one graph after the first two lengths."""
    wq, wk, wv = (dg.tensor(RNG.normal(size=(3, 3))) for _ in range(3))
    pos = dg.tensor(RNG.normal(size=(16, 3)))
    mask = dg.tensor(np.triu(np.full((16, 16), -np.inf), 1))

    def step(x, k_cache, v_cache):
        t = k_cache.shape[1]
        h = x + pos[t:t + 1]
        k = dg.cat([k_cache, h @ wk], 1)
        v = dg.cat([v_cache, h @ wv], 1)
        scores = (h @ wq) @ k.transpose(1, 2) + mask[t:t + 1, :t + 1]
        return scores.softmax(-1) @ v, k, v

    compiled = dg.compile(step)
    first = dg.tensor(RNG.normal(size=(2, 1, 3)))
    states = {fn: (first, first) for fn in (step, compiled)}
    x = dg.tensor(RNG.normal(size=(2, 1, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(14):
            outs = {}
            for fn in (step, compiled):
                out, *states[fn] = fn(x, *states[fn])
                outs[fn] = out.numpy()
            np.testing.assert_allclose(outs[compiled], outs[step], rtol=1e-12)
            x = dg.tensor(outs[step])
    assert traces(compiled) == 3, compiled.explain()   # (lengths 1, 2, then symbolic)


def test_size_cases_decide_by_the_traced_sizes_and_record_the_case():
    """SizeCases answers what holds for every size (a symbolic dim is at least 2) without
    a fact, else by the traced sizes, recording the case; without sizes it refuses."""
    s = Sym("s0")
    cases = SizeCases({"s0": 5})
    assert cases.at_least(s + 1, 2) and not cases.at_least(-s, 0) and not cases.facts
    assert sym_slice(None, 8, None, s, cases) == (0, s, 1)          # (5 <= 8: the dim)
    assert sym_slice(3, None, None, s, cases) == (3, s, 1)
    assert sym_slice(None, s, None, 4, cases) == (0, 4, 1)          # (a static 4 < s0)
    assert cases.facts == {7 - s, s - 3, s - 5}   # (each at least 0)
    with pytest.raises(ShapeError):
        SizeCases(None).at_least(s, 3)
    assert (48 * s + 48) // (6 * s + 6) == 8
    with pytest.raises(ShapeError):
        (48 * s + 47) // (6 * s + 6)
