"""A tensor a compiled step keeps in an attribute or a global and grows at every call (a
KV cache ``self.cache = cat([self.cache, k], 1)``: autodims.PlaceDims): once its size
alone changed, the dim is traced symbolic, so decoding runs one graph whatever the length;
compiled against eager at every call, with the cache reset, truncated or replaced outside
the function, and the traces counted."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import dualgraph as dg

RNG = np.random.default_rng(0)


def traces(compiled) -> int:
    return sum(r.kind in ("capture", "retrace") for r in compiled.records)


class Attention(dg.nn.Module):
    """One attention layer decoding a token per call, keys and values kept in
    ``self.k``/``self.v`` (None: a new sequence), positions from a table cut at the
    cache's length, a causal-mask buffer cut to it."""

    def __init__(self, dim=4, ctx=16):
        super().__init__()
        self.qkv = dg.nn.Linear(dim, 3 * dim)
        self.pos = dg.nn.Parameter(dg.tensor(RNG.normal(size=(ctx, dim)).astype(np.float32)))
        self.register_buffer("mask", dg.full((ctx, ctx), float("-inf")).triu(1))
        self.k = self.v = None

    def forward(self, x):
        t = 0 if self.k is None else self.k.shape[1]
        n = x.shape[1]
        q, k, v = self.qkv(x + self.pos[t:t + n]).chunk(3, -1)
        self.k = k if self.k is None else dg.cat([self.k, k], 1)
        self.v = v if self.v is None else dg.cat([self.v, v], 1)
        scores = q @ self.k.transpose(1, 2) / 2.0 + self.mask[t:t + n, :t + n]
        return scores.softmax(-1) @ self.v


def pair():
    eager = Attention()
    model = Attention()
    model.load_state_dict(eager.state_dict())
    return eager, model, dg.compile(model)


def same(compiled_out, eager_out, model, eager):
    np.testing.assert_allclose(compiled_out.numpy(), eager_out.numpy(), rtol=1e-6, atol=1e-7)
    for a, b in ((model.k, eager.k), (model.v, eager.v)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def test_a_cache_grown_in_an_attribute_is_one_symbolic_graph():
    eager, model, compiled = pair()
    with dg.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(14):
            x = dg.tensor(RNG.normal(size=(2, 1, 4)).astype(np.float32))
            same(compiled(x), eager(x), model, eager)
    assert traces(compiled) <= 5, compiled.explain()   # (then none for 9 more lengths)
    assert "self.k's dim 1 symbolic" in compiled.explain()
    assert not compiled.eager_only


def test_the_cache_reset_truncated_or_replaced_outside_matches_eager():
    """A new sequence (the cache set to None), a prompt of several tokens, a cache cut
    back outside the function (beam search keeping a prefix), one of another batch: each
    call equals eager; the lengths after the first of each kind reuse the graphs."""
    eager, model, compiled = pair()
    plan = [(2, 1)] * 5 + ["reset", (2, 3)] + [(2, 1)] * 4 + ["cut"] + [(2, 1)] * 3 + \
        ["reset", (3, 2)] + [(3, 1)] * 4
    with dg.no_grad():
        for item in plan:
            if item == "reset":
                model.k = model.v = eager.k = eager.v = None
                continue
            if item == "cut":
                for m in (model, eager):
                    m.k, m.v = m.k[:, :2].clone(), m.v[:, :2].clone()
                continue
            x = dg.tensor(RNG.normal(size=(*item, 4)).astype(np.float32))
            same(compiled(x), eager(x), model, eager)
    before = traces(compiled)
    with dg.no_grad():
        for _ in range(6):
            x = dg.tensor(RNG.normal(size=(3, 1, 4)).astype(np.float32))
            same(compiled(x), eager(x), model, eager)
    assert traces(compiled) == before, compiled.explain()


def test_a_cache_past_the_position_table_matches_eager():
    """Past the table's 16 rows, ``pos[t:t + 1]`` is empty (Python's clamp) and so is
    the call's output, as eagerly (the cache stops growing): the graph traced for lengths
    within the table (that clamp's case) is not run there."""
    eager, model, compiled = pair()
    with dg.no_grad():
        for _ in range(22):
            x = dg.tensor(RNG.normal(size=(1, 1, 4)).astype(np.float32))
            same(compiled(x), eager(x), model, eager)
    assert traces(compiled) <= 6, compiled.explain()


@pytest.mark.parametrize("result,symbolic", [
    ("history.sum(0) * 2.0", True),
    ("history.mean(0) * history.shape[0]", False),   # (a size as a number: static)
])
def test_a_global_grown_by_cat(result, symbolic):
    """``global history; history = cat([history, x])``: one symbolic graph; where the
    function uses the size as a Python number, the global keeps static shapes (a graph
    per length), equal to eager either way."""
    namespace = {"dg": dg, "history": None}
    exec("def step(x):\n"
         "    global history\n"
         "    history = x if history is None else dg.cat([history, x])\n"
         f"    return {result}\n", namespace)
    compiled = dg.compile(namespace["step"])
    history = None
    for i in range(12):
        x = dg.tensor(RNG.normal(size=(1, 3)))
        got = compiled(x)
        history = x if history is None else dg.cat([history, x])
        want = eval(result)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
        np.testing.assert_array_equal(namespace["history"].numpy(), history.numpy())
    assert (traces(compiled) <= 5) == symbolic, compiled.explain()
    assert ("keep static shapes" in compiled.explain()) != symbolic


def test_new_sequences_of_one_shape_each_start_from_an_empty_cache():
    """Decoding several sequences token by token, the cache set to None before each: the
    call of a new sequence's first token has the shapes of every other call. Its graph
    (the branch of an empty cache, ``self.k is None``) once ran at later calls too, where
    the cache held a tensor (a silently wrong decode); now each graph is guarded by what
    the places held when it was traced, and the graphs of one signature are swapped in as
    they fit: no trace after the second sequence."""
    eager, model, compiled = pair()
    counts = []
    with dg.no_grad():
        for _ in range(4):
            model.k = model.v = eager.k = eager.v = None
            for _ in range(7):
                x = dg.tensor(RNG.normal(size=(2, 1, 4)).astype(np.float32))
                same(compiled(x), eager(x), model, eager)
            counts.append(traces(compiled))
    assert counts[1] == counts[2] == counts[3], compiled.explain()


class _ShapeReader(dg.nn.Module):
    """Reads its state only for sizes: a buffer's length and a plain tensor attribute's
    width (never their values)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", dg.ones(3))
        self.cache = dg.zeros(2, 3)

    def forward(self, x):
        return x * self.table.shape[0] + self.cache.size(1) * 10 + len(self.cache) * 100


def test_state_read_for_its_size_alone_is_guarded_on_it():
    """The sizes of state the function reads only for its shape were baked into the graph
    unguarded: after ``.data`` gave the tensor another shape (same object), the compiled
    call returned the old sizes, silently. Such state is a graph input now, its shape
    checked at every call."""
    model = _ShapeReader()
    compiled = dg.compile(model)
    x = dg.ones(4)
    changes = [lambda: None,
               lambda: setattr(model.table, "data", dg.ones(5)),
               lambda: setattr(model.cache, "data", dg.zeros(4, 7)),
               lambda: setattr(model, "cache", dg.zeros(1, 2)),
               lambda: None]
    for change in changes:
        change()
        with dg.no_grad():
            want = model(x).numpy()
            np.testing.assert_array_equal(compiled(x).numpy(), want)
        np.testing.assert_array_equal(compiled(x).numpy(), want)
