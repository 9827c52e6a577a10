"""to_static: Python control flow on tensors becomes cond / while_loop / scan; Python
control flow on Python values stays Python; errors name the user's variables and lines."""
from __future__ import annotations

import inspect
import traceback

import numpy as np
import pytest

import dualgraph as dg
from dualgraph.capture.ast import to_static
from dualgraph.errors import CaptureError

THIS = "test_to_static.py"


def line_of(fn, text: str) -> int:
    """The line number, in this file, of the first line of ``fn`` containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def ops_of(graph) -> list:
    return [n.op.name for n in graph.nodes]


def same(a, b):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(x.detach().numpy() if isinstance(x, dg.Tensor)
                                              else x),
                                   np.asarray(y.detach().numpy() if isinstance(y, dg.Tensor)
                                              else y), rtol=1e-6, atol=1e-7)


def check(fn, *calls, op=None):
    """The converted, captured ``fn`` equals eager ``fn`` on each argument tuple, all with
    one graph; ``op`` must appear in it."""
    static = to_static(fn, fullgraph=True)
    for args in calls:
        same(static(*args), fn(*args))
    assert len(static.cache) == 1
    if op is not None:
        assert op in ops_of(static.graph), static.graph
    static.graph.verify()
    return static


def branchy(x):
    if x.sum() > 0:
        t = x * 2          # a temporary of one branch only: fine, it is not used later
        y = t + 1
    elif x.sum() > -1:
        y = x.exp()
    else:
        y = -x
    return y * 3


def test_if_elif_else_on_tensor():
    check(branchy, (dg.tensor([1.0, 2.0]),), (dg.tensor([-0.2, 0.1]),),
          (dg.tensor([-3.0, 1.0]),), op="cond")


def test_python_control_flow_stays_python():
    def f(x, flag: bool, n: int):
        if flag:
            x = x + 1
        for _ in range(n):
            x = x * 2
        i = 0
        while i < 2:
            x = x - 1
            i += 1
        return x
    static = to_static(f, fullgraph=True)
    same(static(dg.ones(2), True, 3), f(dg.ones(2), True, 3))
    assert not {"cond", "while_loop", "scan"} & set(ops_of(static.graph))


def count_up(x, n):
    i = 0
    y = x
    while i < n:
        y = y * 1.5
        i = i + 1
    return y, i


def test_while_on_tensor_bound():
    check(count_up, (dg.tensor([1.0, 2.0]), dg.tensor(3)), (dg.tensor([1.0, 2.0]),
                                                              dg.tensor(0)), op="while_loop")


def test_for_range_of_tensor_with_break_and_continue():
    def f(x, n):
        total = x * 0
        for k in range(n):
            if k == 1:
                continue
            total = total + x * k
            if total.sum() > 10:
                break
        return total
    x = dg.tensor([1.0, 2.0])
    check(f, (x, dg.tensor(5)), (x, dg.tensor(2)), (x * 10, dg.tensor(6)), op="while_loop")


def test_for_over_tensor_rows_is_a_scan():
    def f(xs, h):
        for row in xs:
            if row.sum() < 0:
                continue
            h = dg.tanh(h + row)
        return h
    rows = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    check(f, (dg.tensor(rows), dg.zeros(3)),
          op="scan")


def rows_written(xs, h, w, start):
    """An RNN filling ``hs`` one row per step at a counter, as W4's converted loop does."""
    hs = dg.zeros(xs.shape[0] + max(start, 0), h.shape[0], dtype=h.dtype)
    t = start
    for x in xs:
        h = dg.tanh(h @ w + x)
        hs[t] = h
        t += 1
    return hs, h, t


def test_row_writes_at_a_counter_become_the_scans_ys():
    rng = np.random.default_rng(0)
    xs, h = (dg.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((5, 3), (3,)))
    w = dg.tensor(rng.standard_normal((3, 3)).astype(np.float32) * 0.5)
    for start in (0, 2, -5):   # rows 0..4, 2..6 of 7, and -5..-1 (counted from the end)
        static = check(rows_written, (xs, h, w, start), op="scan")
        (scan,) = [n for n in static.graph.nodes if n.op.name == "scan"]
        assert scan.attrs["num_carry"] == 2          # h and t: hs is not carried
        assert "index_put" not in ops_of(scan.attrs["body_graph"])
        assert "index_put" in ops_of(static.graph)   # all the rows, after the loop
    # gradients through the rows written (the scan's ys): against eager, and by differences
    static = to_static(rows_written, fullgraph=True)

    def loss(fn, xs, h, w):
        hs, last, _ = fn(xs, h, w, 1)
        return (hs * dg.arange(hs.shape[0] * 3).reshape(-1, 3)).sum() + last.sum()
    params = [dg.tensor(a.numpy(), requires_grad=True) for a in (xs, h, w)]
    got = dg.autograd.grad(loss(static, *params), params)
    want = dg.autograd.grad(loss(rows_written, *params), params)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert dg.autograd.gradcheck(lambda *a: loss(static, *a), [
        dg.tensor(a.numpy().astype(np.float64), requires_grad=True) for a in (xs, h, w)],
        eps=1e-6, atol=1e-5)


def rows_and_a_pair(xs, h):
    """Row writes beside a variable holding a tuple (two leaves) and one set before."""
    pair, hs, t = (h, h * 2), dg.zeros(xs.shape[0], 3), 0
    for x in xs:
        pair = (pair[1], pair[0] + x)
        hs[t] = pair[0] * x
        t += 1
    return hs, pair


def test_row_writes_beside_a_structured_variable():
    rows = dg.tensor(np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32))
    static = check(rows_and_a_pair, (rows, dg.ones(3)), op="scan")
    (scan,) = [n for n in static.graph.nodes if n.op.name == "scan"]
    assert scan.attrs["num_carry"] == 3 and "index_put" in ops_of(static.graph)


def test_a_row_write_only_the_first_trace_makes_is_a_capture_error():
    traces = []

    def flaky(xs):
        hs = dg.zeros(xs.shape[0], 3)
        t = 0
        for x in xs:
            traces.append(t)
            if len(traces) == 1:       # a Python condition: only the first trace writes
                hs[t] = x
            t += 1
        return hs
    rows = dg.ones(2, 3)
    with pytest.raises(CaptureError, match="wrote a row at its first trace but not"):
        to_static(flaky, fullgraph=True)(rows)


def test_row_writes_that_are_read_or_not_at_a_counter_stay_carried():
    def reads_back(xs, h):
        hs = dg.zeros(xs.shape[0] + 1, 3)
        t = 1
        for x in xs:
            hs[t] = hs[t - 1] + x      # reads an earlier row: hs must be carried
            t += 1
        return hs

    def steps_by_two(xs, h):
        hs = dg.zeros(2 * xs.shape[0], 3)
        t = 0
        for x in xs:
            hs[t] = x + h
            t += 2
        return hs

    def adds_into(xs, h):
        hs = dg.zeros(xs.shape[0], 3)
        t = 0
        for x in xs:
            hs[t] += x * h             # reads the row it writes
            t += 1
        return hs
    rows = dg.tensor(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32))
    for fn in (reads_back, steps_by_two, adds_into):
        static = check(fn, (rows, dg.ones(3)), op="scan")
        (scan,) = [n for n in static.graph.nodes if n.op.name == "scan"]
        assert "index_put" in ops_of(scan.attrs["body_graph"]), fn.__name__


def test_early_return():
    def f(x):
        if x.sum() > 0:
            return x * 2
        y = x - 1
        if y.sum() < -5:
            return y * 0
        return y
    check(f, (dg.tensor([1.0, 2.0]),), (dg.tensor([-1.0, 0.5]),),
          (dg.tensor([-3.0, -3.0]),), op="cond")


def test_return_inside_a_tensor_loop():
    def f(x):
        i = 0
        while i < 10:
            x = x * 2
            if x.sum() > 20:
                return x, i
            i = i + 1
        return x, i
    check(f, (dg.tensor([1.0, 1.0]),), (dg.tensor([3.0, 4.0]),))


def test_nested_functions_and_nested_control_flow():
    def f(x, n):
        def step(h):
            if h.sum() > 1:
                h = h * 0.5
            return h
        i = 0
        while i < n:
            x = step(x) + 0.3
            i += 1
        return x
    check(f, (dg.tensor([1.0, 0.2]), dg.tensor(4)), (dg.tensor([0.1, 0.2]), dg.tensor(1)))


def test_python_and_or_not_in_conditions():
    def f(x, y):
        if x.sum() > 0 and not y.sum() > 0:
            return x - y
        if x.sum() < -1 or y.sum() > 2:
            return x + y
        return x * y
    a, b = dg.tensor([1.0]), dg.tensor([-1.0])
    check(f, (a, b), (b, a), (b * 3, a), (a, a * 3))


class Gate(dg.nn.Module):
    """A module whose forward has data-dependent if / while / for."""

    def __init__(self):
        super().__init__()
        self.fc = dg.nn.Linear(3, 3)

    def forward(self, x):
        h = self.fc(x)
        steps = 0
        while h.abs().sum() < 4.0:
            h = h * 2
            steps += 1
        for row in h:
            if row.sum() > 0:
                h = h + row
        if h.mean() > 0:
            return dg.relu(h), steps
        return -h, steps


def test_module_forward_and_gradients():
    dg.manual_seed(0)
    m = Gate()
    x = dg.randn(2, 3)
    eager_out = Gate.forward(m, x)
    static = to_static(m, fullgraph=True)
    out = static(x)
    same(out, eager_out)
    assert {"while_loop", "scan", "cond"} <= set(ops_of(static.graph))
    ge = dg.autograd.grad(eager_out[0].sum(), list(m.parameters()))
    gs = dg.autograd.grad(out[0].sum(), list(m.parameters()))
    for a, b in zip(ge, gs):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6)


def test_gradients_vs_finite_differences():
    def f(x, w):
        y = x
        for k in range(3):
            if (y * w).sum() > 0:
                y = dg.tanh(y * w) + x
            else:
                y = y * 0.5 - w
        return y
    static = to_static(f, fullgraph=True)
    rng = np.random.default_rng(3)
    xs = [dg.tensor(rng.standard_normal(3), requires_grad=True) for _ in range(2)]
    assert dg.autograd.gradcheck(lambda *a: static(*a), xs, eps=1e-6, atol=1e-5)


def one_branch(x):
    if x.sum() > 0:
        z = x * 2
    return z


def test_variable_defined_in_one_branch_names_it_and_the_line():
    line = line_of(one_branch, "if x.sum()")
    with pytest.raises(NameError, match=rf"variable 'z' is assigned only in the true branch "
                                        rf"of the `if` at {THIS}:{line}"):
        to_static(one_branch, fullgraph=True)(dg.ones(2))
    # run eagerly, the converted function keeps Python semantics: fine when the branch runs
    assert to_static(one_branch).converted.fn(dg.ones(2)).tolist() == [2.0, 2.0]


def mismatch(x):
    if x.sum() > 0:
        y = x
    else:
        y = x.sum()
    return y


def test_branches_of_different_types_name_the_variable():
    line = line_of(mismatch, "if x.sum()")
    with pytest.raises(TypeError, match=rf"variable 'y' is f32\[2\] after the true branch but "
                                        rf"f32\[\] after the false branch of the `if` at "
                                        rf"{THIS}:{line}"):
        to_static(mismatch, fullgraph=True)(dg.ones(2))


def grows(x):
    while x.sum() < 10:
        x = dg.cat([x, x])
    return x


def test_loop_changing_a_variable_names_it():
    with pytest.raises(TypeError, match=r"carried value 'x' from f32\[2\] to f32\[4\]"):
        to_static(grows, fullgraph=True)(dg.ones(2))


def bad_shapes(x):
    if x.sum() > 0:
        x = x + dg.ones(5)
    return x


def test_errors_point_at_the_users_source_line():
    line = line_of(bad_shapes, "dg.ones(5)")
    with pytest.raises(Exception) as info:
        to_static(bad_shapes, fullgraph=True)(dg.ones(3))
    frames = [f for f in traceback.extract_tb(info.value.__traceback__)
              if f.filename.endswith(THIS)]
    assert frames[-1].lineno == line and "dg.ones(5)" in frames[-1].line


def test_code_shows_the_converted_source_and_maps_lines_back():
    static = to_static(branchy)
    assert "_jst.convert_if(" in static.code and "def _jst_true_" in static.code
    code_lines = static.code.splitlines()
    k = next(i for i, text in enumerate(code_lines, 1) if "y = t + 1" in text)
    assert static.origin(k) == line_of(branchy, "y = t + 1")
    static(dg.ones(2))
    assert any(f"{THIS}:{line_of(branchy, 'y = t + 1')}" in str(n.location) or
               any(f"{THIS}:{line_of(branchy, 'y = t + 1')}" in str(m.location)
                   for g in n.attrs.values() if isinstance(g, dg.graph.Graph)
                   for m in g.nodes)
               for n in static.graph.nodes)


def test_decorator_and_closure():
    scale = dg.tensor(3.0)

    @to_static
    def f(x):
        if x.sum() > 0:
            x = x * scale
        return x
    assert f(dg.ones(2)).tolist() == [3.0, 3.0]
    assert f(-dg.ones(2)).tolist() == [-1.0, -1.0]
