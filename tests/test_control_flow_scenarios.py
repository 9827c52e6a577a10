"""Data-dependent control flow end to end: models whose path depends on tensor values, run
through dg.jit.to_static (Python if / while / for converted) and dg.compile (explicit dg.cond /
dg.while_loop / dg.scan), against eager: values, gradients (eager autograd and float64 finite
differences), one graph serving every path, and what happens when a conversion can't be done
(a graph break naming the line, or an error with fullgraph=True)."""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import dualgraph as dg
from dualgraph.capture.ast import to_static
from dualgraph.capture.ast.runtime import ConversionError
from dualgraph.errors import CaptureError

THIS = "test_control_flow_scenarios.py"


def line_of(fn, text: str) -> int:
    """The line, in this file, of the first line of ``fn`` containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def ops_of(graph) -> set:
    return {n.op.name for n in graph.nodes}


def t64(values, grad=True):
    return dg.tensor(np.asarray(values, np.float64), requires_grad=grad)


def as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def loss_of(outs) -> dg.Tensor:
    """A scalar mixing every float output (weights tell them apart)."""
    floats = [o for o in as_list(outs) if isinstance(o, dg.Tensor) and o.requires_grad]
    return sum(((o * (k + 1)) ** 2).sum() for k, o in enumerate(floats))


def same(got, want, rtol=1e-6, atol=1e-9):
    got, want = as_list(got), as_list(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.detach().numpy() if isinstance(g, dg.Tensor) else g
        w = w.detach().numpy() if isinstance(w, dg.Tensor) else w
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def matches_eager(static, eager, args, wrt, rtol=1e-6):
    """``static(*args)`` == ``eager(*args)``, and so are the gradients of a loss over their
    outputs with respect to ``wrt`` (inputs or parameters)."""
    got, want = static(*args), eager(*args)
    same(got, want, rtol)
    g_got = dg.autograd.grad(loss_of(got), wrt, allow_unused=True)
    g_want = dg.autograd.grad(loss_of(want), wrt, allow_unused=True)
    for a, b in zip(g_got, g_want):
        same(a if a is not None else 0.0, b if b is not None else 0.0, rtol)
    return got


def paths_agree(static, eager, calls, wrt_of=lambda args: args):
    """Each argument tuple of ``calls`` (they take different paths) gives eager's values and
    gradients, and one graph serves them all."""
    for args in calls:
        matches_eager(static, eager, args, [a for a in wrt_of(args)
                                            if isinstance(a, dg.Tensor) and a.requires_grad])
    assert len(static.cache) == 1, static.explain()


def fd_ok(static, *args):
    """Gradients of the captured function vs float64 central differences."""
    assert dg.autograd.gradcheck(lambda *a: static(*a), list(args), eps=1e-6, atol=1e-6)


# -- 1. an `if` on a tensor value ------------------------------------------------------------
def gate(x, w):
    if (x * w).sum() > 0:
        y = dg.tanh(x * w) + x
    else:
        y = x.exp() * w
    return y


def gate_cond(x, w):
    return dg.cond((x * w).sum() > 0, lambda x, w: dg.tanh(x * w) + x,
                   lambda x, w: x.exp() * w, (x, w))


@pytest.mark.parametrize("capture", ["to_static", "compile"])
def test_tensor_if_one_graph_serves_both_branches(capture):
    static = (to_static(gate, fullgraph=True) if capture == "to_static"
              else dg.compile(gate_cond, fullgraph=True))
    w = t64([0.5, -0.3, 0.2])
    pos, neg = t64([1.0, 0.5, 2.0]), t64([-1.0, 0.5, -2.0])
    paths_agree(static, gate, [(pos, w), (neg, w), (pos, w), (t64([-3.0, 1.5, -6.0]), w)])
    assert "cond" in ops_of(static.graph)
    fd_ok(static, pos, w)
    fd_ok(static, neg, w)


# -- 2. nested ifs ---------------------------------------------------------------------------
def nested(x):
    if x.sum() > 0:
        if x.max() > 2:
            y = x * x
        else:
            y = dg.sin(x) + 1
    else:
        if x.min() < -2:
            y = -x * 3
        else:
            y = dg.tanh(x)
    return y * 2


def nested_cond(x):
    return 2 * dg.cond(x.sum() > 0,
                       lambda x: dg.cond(x.max() > 2, lambda x: x * x,
                                         lambda x: dg.sin(x) + 1, (x,)),
                       lambda x: dg.cond(x.min() < -2, lambda x: -x * 3, dg.tanh, (x,)),
                       (x,))


@pytest.mark.parametrize("capture", ["to_static", "compile"])
def test_nested_tensor_ifs_take_all_four_paths(capture):
    static = (to_static(nested, fullgraph=True) if capture == "to_static"
              else dg.compile(nested_cond, fullgraph=True))
    inputs = [t64([1.0, 3.0]), t64([0.5, 1.0]), t64([-3.0, 0.5]), t64([-0.5, 0.2])]
    paths_agree(static, nested, [(x,) for x in inputs])
    for x in inputs:
        fd_ok(static, x)


# -- 3. Newton's iteration until convergence ---------------------------------------------------
def newton_sqrt(a, tol):
    x = a
    steps = 0
    while dg.abs(x * x - a).max() > tol:
        x = 0.5 * (x + a / x)
        steps += 1
    return x, steps


def newton_sqrt_loop(a, tol):
    x, steps = dg.while_loop(lambda x, n: dg.abs(x * x - a).max() > tol,
                             lambda x, n: (0.5 * (x + a / x), n + 1),
                             (a, dg.tensor(0)), max_iters=100)
    return x, steps


@pytest.mark.parametrize("capture", ["to_static", "compile"])
def test_newton_iterates_a_data_dependent_number_of_times(capture):
    static = (to_static(newton_sqrt, fullgraph=True) if capture == "to_static"
              else dg.compile(newton_sqrt_loop, fullgraph=True))
    small, large = t64([2.0, 3.0]), t64([100.0, 1e4])
    counts = []
    for a in (small, large, small):
        root, steps = matches_eager(static, newton_sqrt, (a, 1e-9), [a])
        np.testing.assert_allclose(root.detach().numpy(), np.sqrt(a.detach().numpy()))
        assert steps.item() == newton_sqrt(a, 1e-9)[1]
        counts.append(steps.item())
    assert counts[0] != counts[1] and counts[0] == counts[2]
    assert len(static.cache) == 1 and "while_loop" in ops_of(static.graph)
    # d sqrt(a) / da = 1 / (2 sqrt(a)), through the iterations, vs finite differences
    fd_ok(lambda a: static(a, 1e-12)[0], t64([2.0, 30.0]))


# -- 4. a counter loop with break and continue on tensor conditions ----------------------------
def count_up(x, limit):
    i = 0
    total = x * 0
    skipped = 0
    while i < limit:
        i += 1
        if (x * i).sum() % 3 < 1:
            skipped += 1
            continue
        total = total + dg.sin(x) * i
        if total.sum() > 6:
            break
    return total, i, skipped


def test_counter_loop_with_break_and_continue_on_tensors():
    static = to_static(count_up, fullgraph=True)
    calls = [(t64([1.0, 0.5]), dg.tensor(10)), (t64([0.3, 0.4]), dg.tensor(10)),
             (t64([2.0, 3.0]), dg.tensor(4)), (t64([0.1, 0.1]), dg.tensor(3))]
    stops = set()
    for x, limit in calls:
        total, i, skipped = matches_eager(static, count_up, (x, limit), [x])
        stops.add((i.item(), skipped.item()))
    assert len(stops) >= 3    # different break and continue points
    assert len(static.cache) == 1 and "while_loop" in ops_of(static.graph)
    fd_ok(lambda x: static(x, dg.tensor(10))[0], t64([0.3, 0.4]))


# -- 5. an RNN over a tensor-dependent number of steps ---------------------------------------
class Recurrent(dg.nn.Module):
    """An LSTM cell run for ``length`` steps (a tensor), then a linear head."""

    def __init__(self):
        super().__init__()
        self.cell = dg.nn.LSTMCell(3, 4)
        self.head = dg.nn.Linear(4, 2)

    def forward(self, xs, length):
        h = dg.zeros(xs.shape[1], 4, dtype=xs.dtype)
        c = dg.zeros(xs.shape[1], 4, dtype=xs.dtype)
        for t in range(length):
            h, c = self.cell(xs[t], (h, c))
        return self.head(h)


def recurrent_loop(model, xs, length):
    """The same model with an explicit dg.while_loop (its gradient needs max_iters)."""
    zeros = dg.zeros(xs.shape[1], 4, dtype=xs.dtype)

    def body(t, h, c):
        h, c = model.cell(xs[t], (h, c))
        return t + 1, h, c
    _, h, _ = dg.while_loop(lambda t, h, c: t < length, body, (dg.tensor(0), zeros, zeros),
                            max_iters=xs.shape[0])
    return model.head(h)


@pytest.mark.parametrize("capture", ["to_static", "compile"])
def test_rnn_over_a_tensor_number_of_steps(capture):
    dg.manual_seed(0)
    model = Recurrent().to(dg.float64)
    eager = type(model).forward.__get__(model)
    if capture == "to_static":
        static = to_static(model, fullgraph=True)
    else:
        static = dg.compile(lambda xs, n: recurrent_loop(model, xs, n), fullgraph=True)
    xs = dg.tensor(np.random.default_rng(1).standard_normal((6, 2, 3)), requires_grad=True)
    params = list(model.parameters())
    outs = [matches_eager(static, eager, (xs, dg.tensor(n)), params + [xs])
            for n in (2, 5, 1)]
    assert not np.allclose(outs[0].detach().numpy(), outs[1].detach().numpy())
    assert len(static.cache) == 1 and "while_loop" in ops_of(static.graph)
    fd_ok(lambda xs: static(xs, dg.tensor(3)), xs)


# -- 6. a tree-structured recursive model -----------------------------------------------------
class TreeNet(dg.nn.Module):
    """Recursive over nested tuples (Python recursion, tensors inside): a leaf is embedded,
    a node combines the sum of its children, gated by a tensor condition."""

    def __init__(self):
        super().__init__()
        self.leaf = dg.nn.Linear(3, 4)
        self.combine = dg.nn.Linear(4, 4)

    def encode(self, tree):
        if isinstance(tree, dg.Tensor):
            return dg.tanh(self.leaf(tree))
        total = sum(self.encode(child) for child in tree)
        return dg.cond(total.sum() > 0, lambda s: dg.tanh(self.combine(s)),
                       lambda s: s * 0.5, (total,))

    def forward(self, tree):
        h = self.encode(tree)
        if h.sum() > 0:
            h = h * 2
        else:
            h = h - 1
        return h


@pytest.mark.parametrize("capture", ["to_static", "compile"])
def test_tree_recursion_stays_python(capture):
    dg.manual_seed(0)
    model = TreeNet().to(dg.float64)
    if capture == "to_static":   # forward's Python `if` converted, encode's dg.cond kept
        eager = type(model).forward.__get__(model)
        static = to_static(model, fullgraph=True)
    else:
        eager = model.encode
        static = dg.compile(model.encode, fullgraph=True)
    rng = np.random.default_rng(2)

    def leaf():
        return dg.tensor(rng.standard_normal(3), requires_grad=True)
    big = (leaf(), (leaf(), leaf()), ((leaf(),), leaf()))
    small = ((leaf(), leaf()), leaf())
    params = list(model.parameters())
    for tree in (big, small, big):
        matches_eager(static, eager, (tree,), params + dg._pytree.flatten(tree)[0])
    assert len(static.cache) == 2     # one graph per tree shape, reused
    assert "cond" in ops_of(static.graph)
    first = dg._pytree.flatten(small)[0][0]
    fd_ok(lambda x: static(((x, small[0][1]), small[1])), first)


# -- 7. early return inside a tensor `if` -------------------------------------------------------
def clipped(x, w):
    y = x * w
    if y.sum() > 4:
        return y / y.sum() * 4
    if y.sum() < -4:
        return dg.zeros_like(y) + w
    return dg.sin(y)


def test_early_return_inside_a_tensor_if():
    static = to_static(clipped, fullgraph=True)
    w = t64([1.0, 2.0])
    calls = [(t64([3.0, 2.0]), w), (t64([-3.0, -2.0]), w), (t64([0.5, -0.2]), w)]
    paths_agree(static, clipped, calls)
    for x, w in calls:
        fd_ok(static, x, w)


# -- 8. errors name the variable and the line -----------------------------------------------
def grows_in_for(xs, h):
    for row in xs:
        h = dg.cat([h, row])
    return h


def first_inside_loop(x):
    while x.sum() < 10:
        x = x * 2
        last = x
    return last


def grows_in_while(x):
    while x.sum() < 10:
        x = dg.cat([x, x])
    return x


@pytest.mark.parametrize("fn, args, cls, message", [
    (grows_in_while, (dg.ones(2),), TypeError,
     r"the `while` loop at {file}:{line}: the body changes carried value 'x' from f32\[2\] "
     r"to f32\[4\]"),
    (grows_in_for, (dg.ones(2, 3), dg.ones(1)), TypeError,
     r"the `for` loop at {file}:{line}: the body changes carried value 'h' from f32\[1\] "
     r"to f32\[4\]"),
    (first_inside_loop, (dg.ones(2),), NameError,
     r"variable 'last' is first assigned inside the `while` loop at {file}:{line}"),
])
def test_loop_errors_name_the_variable_and_the_line(fn, args, cls, message):
    line = line_of(fn, "while " if "while" in inspect.getsource(fn) else "for ")
    with pytest.raises(cls, match=message.format(file=THIS, line=line)) as info:
        to_static(fn, fullgraph=True)(*args)
    assert isinstance(info.value, ConversionError) and info.value.location == f"{THIS}:{line}"


# -- 9. a conversion that can't be done: a graph break, or an error with fullgraph ------------
def two_structures(x):
    if x.sum() > 0:
        y = (x, x * 2)
    else:
        y = x
    return y


@pytest.mark.parametrize("fn, args, text", [
    (two_structures, (dg.ones(2),), "if x.sum()"),
    (two_structures, (-dg.ones(2),), "if x.sum()"),
    (grows_in_while, (dg.ones(2),), "while x.sum()"),
    (grows_in_for, (dg.ones(2, 3), dg.ones(1)), "for row"),
])
def test_unconvertible_control_flow_breaks_the_graph_or_raises(fn, args, text):
    where = f"{THIS}:{line_of(fn, text)}"
    static = to_static(fn)
    with pytest.warns(UserWarning, match=f"graph break in {fn.__name__} at {where}"):
        got = static(*args)
    same(got, fn(*args))
    assert static.eager_only and f"graph break at {where}" in static.explain()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # warned once; later calls run eagerly, quietly
        same(static(*args), fn(*args))
    with pytest.raises(CaptureError, match=where):
        to_static(fn, fullgraph=True)(*args)


def test_unbound_after_a_python_branch_raises_like_python():
    def maybe(x, flag: bool):
        if flag:
            z = x * 2
        return z
    static = to_static(maybe)
    same(static(dg.ones(2), True), dg.ones(2) * 2)
    with pytest.raises(UnboundLocalError, match="'z'"):
        static(dg.ones(2), False)


# -- in-place writes inside converted bodies --------------------------------------------------
def collect(xs, w):
    h = dg.zeros(xs.shape[1], dtype=xs.dtype)
    hs = dg.zeros(*xs.shape, dtype=xs.dtype)
    t = 0
    for x in xs:
        h = dg.tanh(h * w + x)
        hs[t] = h          # an in-place write makes hs a loop variable, like an assignment
        t += 1
    return hs


def test_in_place_writes_to_a_tensor_carried_by_a_traced_loop():
    static = to_static(collect, fullgraph=True)
    xs = dg.tensor(np.random.default_rng(4).standard_normal((4, 2)))
    w = t64([0.5, -1.5])
    matches_eager(static, collect, (xs, w), [w])
    assert "scan" in ops_of(static.graph)
    fd_ok(static, xs, w)


def test_in_place_change_of_an_outer_tensor_in_a_branch_is_an_error():
    def f(x):
        y = x * 1
        z = dg.cond(x.sum() > 0, lambda a: y.add_(1) * a, lambda a: a, (x,))
        return y, z
    with pytest.raises(CaptureError, match="in-place change of an outer tensor"):
        dg.compile(f, fullgraph=True)(dg.ones(2))
