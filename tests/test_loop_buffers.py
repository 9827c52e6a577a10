"""The loop ops' results in planned buffers (``scan`` and ``while_loop`` are ``fills_out``):
a compiled scan writes each step's ys into its stacked outputs' planned buffers (the
generated line shows ``out=``), and compiled == eager == the reference interpreter call
after call with new data, the results of earlier calls unchanged by later ones (buffers are
reused across calls); reverse scans, gradients (the reverse scan of the backward), loops
whose body returns what it was given (a loop's results are never views of its inputs, so
the inputs' buffers may be reused while they live), while_loops of varying trip counts,
nested loops and two threads."""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import dualgraph as dg
from dualgraph.codegen import Executable
from dualgraph.graph import Graph, interpret
from dualgraph.ops.control import scan, while_loop

B, H, T = 32, 64, 12   # (a stacked output of T x B x H float32 is planned a buffer)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_calls(fn, make_args, calls=3, grad_of=None):
    """``dg.compile(fn)`` == eager ``fn`` over ``calls`` calls, ``make_args(k)`` giving call
    k's arguments; each call's results (and, with ``grad_of``, the gradients of the
    arguments at those positions, from ``sum(results)``) are unchanged by later calls.
    Returns the compiled function."""
    compiled = dg.compile(fn, fullgraph=True)
    kept = []
    for k in range(calls):
        outs = []
        for f in (fn, compiled):
            args = make_args(k)
            if grad_of:
                for i in grad_of:
                    args[i].requires_grad_()
            res = leaves(f(*args))
            if grad_of:
                sum(r.sum() for r in res).backward()
                res = [r.detach() for r in res] + [args[i].grad for i in grad_of]
            outs.append(res)
        agree_and_keep(*outs, kept)
    unchanged(kept)
    return compiled


def agree_and_keep(want, got, kept: list) -> None:
    """``got`` == ``want`` (tensors); ``got`` kept with copies in ``kept``."""
    assert len(want) == len(got)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)
    kept.append([(g, g.numpy().copy()) for g in got])


def unchanged(kept: list) -> None:
    """The results kept by :func:`agree_and_keep` still equal their copies (no later call
    wrote into their memory)."""
    for results in kept:
        for g, copy in results:
            np.testing.assert_array_equal(g.numpy(), copy)


def scan_calls(code: str) -> list[str]:
    """The generated lines that call a scan's kernel (broken lines joined)."""
    return re.findall(r"k_scan\([^#]*", re.sub(r"\n\s+", " ", code))


def lstm_like(h, xs, w):
    def step(carry, x):
        h, c = carry
        g = dg.tanh(x + h @ w)
        c = c * 0.5 + g
        return (dg.tanh(c) * g, c), h * g
    (h, c), ys = scan(step, (h, h * 0.5), xs)
    return h, c, ys * 2.0


def test_a_scans_stacked_outputs_fill_planned_buffers_call_after_call():
    w = dg.tensor(rand(H, H, seed=9) * 0.1)

    def fn(h, xs):
        h, c, ys = lstm_like(h, xs, w)
        return h + c, ys.sum(0)
    compiled = check_calls(fn, lambda k: [dg.tensor(rand(B, H, seed=k)),
                                          dg.tensor(rand(T, B, H, seed=10 + k))])
    # (the two carries, then the stacked ys)
    assert re.search(r"out=\(bufs\[\d+\], bufs\[\d+\], bufs\[\d+\],?\)",
                     scan_calls(compiled.code)[0])


def test_reverse_scans_and_their_gradients_reuse_buffers_without_changing_values():
    w = dg.tensor(rand(H, H, seed=3) * 0.1)

    def fn(h, xs):
        def step(c, x):
            return dg.tanh(c @ w + x), (c * x, x.exp())
        c, (ys, zs) = scan(step, h, xs, reverse=True)
        return c, (ys * zs).sum(0), (ys + 1.0).tanh()
    def make_args(k):
        return [dg.tensor(rand(B, H, seed=k)), dg.tensor(rand(T, B, H, seed=20 + k))]
    with dg.no_grad():
        compiled = check_calls(fn, make_args)
    assert "out=(" in scan_calls(compiled.code)[0]
    check_calls(fn, make_args, grad_of=(0, 1))


def test_a_training_step_over_a_scan_equals_eager_step_after_step():
    """Forward scan, reverse scan of the gradient and an SGD update in one compiled step:
    the parameters after each step equal eager's."""
    def make():
        return [dg.tensor(rand(H, H, seed=5) * 0.1, requires_grad=True)]

    def step_fn(params):
        def step(h, xs):
            (w,) = params
            h, c, ys = lstm_like(h, xs, w)
            loss = (ys * ys).mean() + (h * c).mean()
            loss.backward()
            with dg.no_grad():
                w -= 0.1 * w.grad
                w.grad = None
            return loss
        return step
    eager_p, comp_p = make(), make()
    eager, compiled = step_fn(eager_p), dg.compile(step_fn(comp_p), fullgraph=True)
    for k in range(4):
        h, xs = dg.tensor(rand(B, H, seed=k)), dg.tensor(rand(T, B, H, seed=30 + k))
        np.testing.assert_allclose(compiled(h, xs).item(), eager(h, xs).item(), rtol=2e-5)
        np.testing.assert_allclose(comp_p[0].detach().numpy(), eager_p[0].detach().numpy(),
                                   rtol=1e-4, atol=1e-6)
    calls = scan_calls(compiled.code)   # the forward scan and the reverse one of its gradient
    assert len(calls) == 2 and all("out=(bufs[" in c for c in calls)


def test_a_body_returning_its_inputs_gives_no_view_of_them():
    """A body that returns a row of ``xs``, an outer tensor or its carry unchanged, a
    while_loop that runs no step: the loops' carries are copies, so the planned buffer of ``xs`` (a product) may be reused
    by the next product while the carries live."""
    w, v = dg.tensor(rand(H, H, seed=1)), dg.tensor(rand(H, H, seed=2))

    def fn(a):
        xs = (a @ w).reshape(T, B, H)               # a product in a planned buffer
        last, ys = scan(lambda c, x: (x, c.sum() + x), xs[0] * 0, xs)
        same, _ = scan(lambda c, x: (c, x * 2.0), xs[1], xs)
        outer, _ = scan(lambda c, x: (w, x.sum()), w * 1.0, xs)
        held, _ = while_loop(lambda c, i: i < 0, lambda c, i: (c * 2.0, i + 1),
                             (xs[2], dg.tensor(0)))   # (no trip: the carry it was given)
        later = (a @ v).reshape(T, B, H)            # may take xs's buffer
        return last, same, outer, held, later.sum(0), ys.sum(0)
    compiled = check_calls(fn, lambda k: [dg.tensor(rand(T * B, H, seed=k))])
    assert re.search(r"matmul_blas\(a, \w+, out=bufs", compiled.code)


@pytest.mark.parametrize("limit, trips", [(0.3, {0}), (1.0, {0, 26}), (2.0, {50})])
def test_while_loops_of_varying_trip_counts(limit, trips):
    w = dg.tensor(rand(H, H, seed=4) * 0.05)

    def fn(x, bound):
        def body(i, y, acc):
            return i + 1, dg.tanh(y @ w + 0.3), acc + y
        def more(i, y, acc):
            return (y.abs().mean() + acc.abs().mean() * 0.1 < bound) & (i < 50)
        i, y, acc = while_loop(more, body, (dg.tensor(0), x, x * 0.0))
        return i, y * 2.0, acc + 1.0
    compiled = dg.compile(fn, fullgraph=True)
    counts = set()
    kept = []
    for k in range(4):   # (the trip count varies with the data and the bound)
        x, bound = dg.tensor(rand(B, H, seed=k) * (k + 1) * 0.5), dg.tensor(limit)
        want = fn(x, bound)
        counts.add(int(want[0]))
        agree_and_keep(want, compiled(x, bound), kept)
    unchanged(kept)
    assert counts == trips   # (zero trips: the carries are the inputs, copied)


def test_a_while_loops_gradient_over_varying_trip_counts():
    w = dg.tensor(rand(H, H, seed=6) * 0.05)

    def fn(x, n):
        def body(i, y):
            return i + 1, dg.tanh(y @ w) + y * 0.5
        i, y = while_loop(lambda i, y: i < n, body, (dg.tensor(0), x), max_iters=8)
        return y
    check_calls(fn, lambda k: [dg.tensor(rand(B, H, seed=k)), dg.tensor(2 * k + 1)],
                calls=4, grad_of=(0,))


def test_nested_loops():
    w = dg.tensor(rand(H, H, seed=7) * 0.1)

    def fn(h, xs):
        def outer(c, x):
            inner_c, inner_ys = scan(lambda d, r: (dg.tanh(d @ w + r), d * r),
                                     c, dg.stack([x, x * 0.5, -x]))
            _, y = while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y * 0.9 + inner_c),
                              (dg.tensor(0), x), max_iters=2)
            return inner_c, inner_ys.sum(0) + y
        c, ys = scan(outer, h, xs)
        return c, ys * 1.5
    check_calls(fn, lambda k: [dg.tensor(rand(B, H, seed=k)),
                               dg.tensor(rand(T, B, H, seed=40 + k))], grad_of=(0, 1))


def test_two_threads_calling_one_compiled_scan():
    w = dg.tensor(rand(H, H, seed=8) * 0.1)

    def fn(h, xs):
        h, c, ys = lstm_like(h, xs, w)
        return h, ys.sum(0)
    compiled = dg.compile(fn, fullgraph=True)
    data = [(dg.tensor(rand(B, H, seed=k)), dg.tensor(rand(T, B, H, seed=50 + k)))
            for k in range(2)]
    want = [[o.numpy() for o in fn(*d)] for d in data]
    compiled(*data[0])

    def calls(k):   # (how many of 40 calls differed)
        return sum(not all(np.allclose(g.numpy(), w_, rtol=2e-5, atol=2e-6)
                           for g, w_ in zip(compiled(*data[k]), want[k])) for _ in range(40))
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(calls, [0, 1])) == [0, 0]


def test_the_scan_kernel_fills_out_and_equals_the_interpreter():
    """At the graph level: an Executable's scan (planned buffers, a zero-step scan among
    them) against the reference interpreter, call after call."""
    g = Graph()
    h, xs = g.add_input((B, H), "float32", name="h"), g.add_input((T, B, H), "float32",
                                                                    name="xs")
    body = Graph()
    c, x = body.add_input((B, H), "float32", name="c"), body.add_input((B, H), "float32",
                                                                       name="x")
    (s,) = body.add_node("add", [c, x])
    (t,) = body.add_node("tanh", [s])
    body.set_outputs([t, s])
    outs = g.add_node("scan", [h, xs], dict(body_graph=body, num_carry=1, num_xs=1,
                                             length=T, reverse=True))
    empty = g.add_input((0, B, H), "float32", name="empty")
    outs0 = g.add_node("scan", [h, empty], dict(body_graph=body, num_carry=1, num_xs=1,
                                                length=0, reverse=False))
    g.set_outputs([g.add_node("mul", [v, 2.0])[0] for v in (*outs, *outs0)])
    exe = Executable(g)
    assert "out=(bufs[0], bufs[" in re.sub(r"\n\s+", " ", exe.code)
    kept = []
    for k in range(3):
        arrays = [rand(B, H, seed=k), rand(T, B, H, seed=60 + k), rand(0, B, H)]
        got, want = exe.run(arrays), interpret(g, *arrays)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        kept.append([(a, a.copy()) for a in got])
    for results in kept:
        for a, copy in results:
            np.testing.assert_array_equal(a, copy)
