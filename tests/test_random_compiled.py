"""Random numbers compiled are eager's: every draw reads the generator's seed state, eagerly
or as a graph node (ops/random.py), so from the same state a compiled function draws the
same numbers as the same code run eagerly, call after call, and never bakes one draw in.
Draws from the PCG64 stream (``nn.init``) inside a compiled function make it run its Python
at every call, drawing as eager does."""
import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F
from dualgraph.ops import random as rnd


def _draws(x, g=None):
    """Every random API a program calls, each a tensor result."""
    return [
        dg.rand(2, 3), dg.randn((4,)), dg.rand(3, dtype=dg.float64),
        dg.randint(0, 7, (5,)), dg.randint(3, (2, 2)), dg.randperm(6),
        dg.rand_like(x), dg.randn_like(x), dg.bernoulli(dg.full((5,), 0.5)),
        dg.normal(x, 2.0), dg.normal(0.0, 1.0, size=(3,)),
        dg.empty(4).uniform_(-1, 1), dg.empty(4).normal_(3, 0.5),
        dg.empty(4).exponential_(2.0), dg.empty(4, dtype=dg.int64).random_(0, 9),
        F.dropout(x, 0.4), F.dropout2d(x.reshape(1, 2, 3, 1), 0.5),
        dg.rand(3, generator=g), dg.randint(0, 100, (3,), generator=g),
    ]


def _run(fn, calls, x, g):
    dg.manual_seed(7)
    g.manual_seed(11)
    return [[t.numpy().copy() for t in fn(x, g)] for _ in range(calls)]


def test_compiled_draws_equal_eager_draws_call_after_call():
    x = dg.arange(6, dtype=dg.float32).reshape(2, 3) + 1
    g = dg.Generator()
    eager = _run(_draws, 3, x, g)
    compiled = _run(dg.compile(_draws), 3, x, g)
    for call, (e, c) in enumerate(zip(eager, compiled)):
        for k, (u, v) in enumerate(zip(e, c)):
            assert u.dtype == v.dtype and np.array_equal(u, v), (call, k, u, v)
    # fresh numbers at every call, not the first call's baked in
    for k in range(len(eager[0])):
        assert not all(np.array_equal(eager[0][k], later[k]) for later in eager[1:]), k


def test_eager_draws_between_compiled_calls_keep_one_sequence():
    def f():
        return dg.rand(3) + dg.randint(0, 5, (3,))

    compiled = dg.compile(f)
    dg.manual_seed(3)
    eager = [f().numpy(), dg.rand(2).numpy(), f().numpy(), f().numpy()]
    dg.manual_seed(3)
    mixed = [compiled().numpy(), dg.rand(2).numpy(), compiled().numpy(), f().numpy()]
    for u, v in zip(eager, mixed):
        np.testing.assert_array_equal(u, v)


def test_rng_state_replays_draws_eager_and_compiled():
    def f():
        return F.dropout(dg.ones(8), 0.5) + dg.randperm(8)

    compiled = dg.compile(f)
    compiled()
    state = dg.get_rng_state()
    first = compiled().numpy()
    dg.set_rng_state(state)
    np.testing.assert_array_equal(f().numpy(), first)
    g = dg.Generator().manual_seed(5)
    saved = g.get_state()
    a = dg.rand(4, generator=g).numpy()
    g.set_state(saved)
    np.testing.assert_array_equal(dg.rand(4, generator=g).numpy(), a)


def test_training_with_dropout_compiled_equals_eager():
    def make():
        dg.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
        return model, dg.optim.SGD(model.parameters(), lr=0.1)

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x = dg.tensor(np.random.default_rng(0).standard_normal((8, 5)), dtype=dg.float32)
    y = dg.tensor([0, 1] * 4)
    losses = {}
    for mode in ("eager", "compiled"):
        model, opt = make()
        fn = dg.compile(step) if mode == "compiled" else step
        losses[mode] = [float(fn(model, opt, x, y)) for _ in range(4)]
        losses[mode + " weights"] = model[0].weight.detach().numpy().copy()
    assert losses["eager"] == losses["compiled"]
    np.testing.assert_array_equal(losses["eager weights"], losses["compiled weights"])


def test_init_inside_a_compiled_function_draws_at_every_call():
    def f(x):
        return x + nn.init.normal_(dg.empty(3))

    x = dg.zeros(3)
    dg.manual_seed(2)
    eager = [f(x).numpy() for _ in range(3)]
    compiled = dg.compile(f)
    dg.manual_seed(2)
    got = [compiled(x).numpy() for _ in range(3)]
    for u, v in zip(eager, got):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(got[0], got[1])
    assert "its Python runs at every call" in compiled.explain()


def test_seeded_streams_are_a_function_of_the_seed():
    a = rnd.seeded_stream(41).random(1000)
    b = rnd.seeded_stream(42).random(1000)
    np.testing.assert_array_equal(rnd.seeded_stream(41).random(1000), a)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.1
    ints = dg.randint(-3, 4, (20000,)).numpy()
    assert ints.dtype == np.int64 and ints.min() == -3 and ints.max() == 3
    assert sorted(dg.randperm(50).tolist()) == list(range(50))


def test_a_split_function_draws_eagers_numbers():
    """A branch on a tensor splits the function (a graph break); the pieces draw from the
    same seed state in eager's order."""
    def f(x):
        h = F.dropout(x, 0.5)
        if h.sum() > 0:
            h = h * 2
        return F.dropout(h, 0.3) + dg.randint(0, 3, (4,))

    x = dg.ones(4)

    def run(fn):
        dg.manual_seed(0)
        return [fn(x).numpy().copy() for _ in range(5)]

    with pytest.warns(UserWarning, match="graph break"):
        compiled = run(dg.compile(f))
    for u, v in zip(run(f), compiled):
        np.testing.assert_array_equal(u, v)
