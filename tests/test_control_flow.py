"""dg.cond, dg.while_loop and dg.scan: eager == traced == interpreted, gradients (vs eager
autograd and finite differences), printing, verification, save/load and errors."""
from __future__ import annotations

import re

import numpy as np
import pytest

import dualgraph as dg
from dualgraph.errors import CaptureError
from dualgraph.graph import load
from dualgraph.ops.control import cond, scan, while_loop


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_modes(fn, *arrays, dtype="float64"):
    """fn eager == captured == the captured graph run by the interpreter; and gradients of
    the captured function == eager autograd. Returns the compiled function."""
    def inputs():
        return [dg.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    eager_in, comp_in = inputs(), inputs()
    eager = leaves(fn(*eager_in))
    compiled = dg.compile(fn, fullgraph=True)
    traced = leaves(compiled(*comp_in))
    for e, t in zip(eager, traced):
        np.testing.assert_allclose(t.detach().numpy(), e.detach().numpy(), rtol=1e-6)
    with dg.no_grad():
        plain = dg.compile(fn, fullgraph=True)
        plain(*inputs())
    feeds = [b.tensor.detach().numpy() if b.kind == "captured" else arrays[b.index].astype(dtype)
             for b in plain._last.capture.bindings]   # arguments and captured tensors
    run = plain.graph(*feeds)
    for e, r in zip(eager, run):
        np.testing.assert_allclose(r, e.detach().numpy(), rtol=1e-6)
    plain.graph.verify()
    loss_e = sum((e * (i + 1)).sum() for i, e in enumerate(eager) if e.requires_grad)
    loss_t = sum((t * (i + 1)).sum() for i, t in enumerate(traced) if t.requires_grad)
    ge = dg.autograd.grad(loss_e, eager_in, allow_unused=True)
    gt = dg.autograd.grad(loss_t, comp_in, allow_unused=True)
    for a, b in zip(ge, gt):
        want = np.zeros(1) if a is None else a.numpy()
        got = np.zeros(1) if b is None else b.numpy()
        np.testing.assert_allclose(got, want + 0 * got, rtol=1e-6, atol=1e-12)
    assert dg.autograd.gradcheck(lambda *xs: compiled(*xs), inputs(), eps=1e-6, atol=1e-5)
    return plain


W = dg.tensor(rand(3, seed=5))


def cond_fn(x):
    return cond(x.sum() > 0, lambda a: (a * W).exp(), lambda a: a.sin() * 2, (x,))


@pytest.mark.parametrize("sign", [1, -1])
def test_cond_modes_and_gradients(sign):
    check_modes(cond_fn, np.abs(rand(3)) * sign)


def test_cond_both_branches_live_in_one_graph():
    f = dg.compile(cond_fn, fullgraph=True)
    for sign in (1, -1):
        x = dg.tensor(np.abs(rand(3)) * sign)
        np.testing.assert_allclose(f(x).numpy(), cond_fn(x).numpy(), rtol=1e-6)
    assert len(f.cache) == 1


def test_cond_eager_is_python_if():
    x = dg.tensor([1.0, -2.0])
    assert cond(True, lambda a: a + 1, lambda a: a - 1, (x,)).tolist() == [2.0, -1.0]
    assert cond(x.sum() > 0, lambda a: a + 1, lambda a: a - 1, [x]).tolist() == [0.0, -3.0]


def test_while_loop_modes_and_gradients():
    def f(x, w):
        i, y = while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, dg.tanh(y * w) + 0.5),
                          (dg.tensor(0), x), max_iters=6)
        return y
    check_modes(f, rand(3), rand(3, seed=1))


def test_while_loop_data_dependent_trip_count():
    def f(x):
        (y,) = while_loop(lambda y: y.sum() < 10.0, lambda y: (y * 1.5 + 0.1,), (x,),
                          max_iters=50)
        return y
    g = check_modes(f, np.abs(rand(3)) + 0.5)
    # the same graph runs a different number of iterations for other data
    np.testing.assert_allclose(g.graph(np.full(3, 0.01))[0], f(dg.full((3,), 0.01)).numpy())


def test_nested_cond_inside_while():
    def f(x):
        def body(i, y):
            y = cond(y.sum() > 1.0, lambda a: a * 0.5, lambda a: a * 1.7 + 0.2, (y,))
            return i + 1, y
        return while_loop(lambda i, y: i < 5, body, (dg.tensor(0), x), max_iters=5)[1]
    g = check_modes(f, rand(3))
    whiles = [n for n in g.graph.nodes if n.op.name == "while_loop"]
    assert [n.op.name for n in whiles[0].attrs["body_graph"].nodes].count("cond") == 1


def test_compiled_control_flow_runs_each_body_as_a_compiled_program(monkeypatch):
    """The generated code runs every body (nested ones too) through its own compiled
    program, not the reference interpreter, and ``.code`` prints each body's code."""
    from dualgraph.codegen.executable import Bodies
    ran = []
    run_body = Bodies.run
    monkeypatch.setattr(Bodies, "run",
                        lambda self, graph, *arrays: ran.append(graph) or run_body(
                            self, graph, *arrays))

    def f(x):
        def body(i, y):
            y = cond(y.sum() > 1.0, lambda a: dg.tanh(a) * 0.5, lambda a: a * 1.7 + 0.2, (y,))
            return i + 1, y
        return while_loop(lambda i, y: i < 5, body, (dg.tensor(0), x), max_iters=5)[1]
    x = dg.tensor(rand(64, 32).astype(np.float32))
    compiled = dg.compile(f, fullgraph=True)
    with dg.no_grad():
        np.testing.assert_allclose(compiled(x).numpy(), f(x).numpy(), rtol=1e-6)
    # the loop's condition 6 times, its body 5 times, one branch of the cond in each
    assert len(ran) == 6 + 5 + 5 and len({id(g) for g in ran}) >= 3
    code = compiled.code
    assert code.count("a body of control flow, compiled") == 4   # cond, body, 2 branches
    assert "k_while_loop(" in code and "k_cond(" in code
    assert re.search(r"# g\w*\.g\w*: a body of control flow", code)   # the branches
    assert len(re.findall(r"passes on control-flow body g\w*(\.g\w*)?",
                          compiled.explain())) == 4


def test_checked_mode_runs_control_flow_eagerly_and_compares():
    """``check=True`` runs the function eagerly under a recorder: control flow runs as
    Python there (it used to try to trace into the recorder and failed), then the compiled
    graph's results are compared with it."""
    w = dg.tensor(rand(3, seed=2), requires_grad=True)

    def f(h, xs):
        carry, ys = scan(lambda h, x: (dg.tanh(h * w + x), (h * x).sum()), h, xs)
        return cond(carry.sum() > 0, lambda c: c * 2.0, lambda c: -c, (carry,)).sum() + ys.sum()
    h, xs = dg.tensor(rand(3)), dg.tensor(rand(4, 3, seed=1))
    checked = dg.compile(f, check=True)
    got = checked(h, xs)
    got.backward()
    grad, w.grad = w.grad.numpy().copy(), None
    want = f(h, xs)
    want.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    np.testing.assert_allclose(grad, w.grad.numpy(), rtol=1e-6)


def test_scan_modes_and_gradients():
    def f(h, xs, w):
        carry, ys = scan(lambda h, x: (dg.tanh(h * w + x), (h * x).sum()), h, xs)
        return carry, ys
    check_modes(f, rand(3), rand(4, 3, seed=1), rand(3, seed=2))


def test_a_scan_that_needs_a_gradient_saves_its_carries_instead_of_rerunning():
    """With a gradient to come, the forward scan also stacks the carry before each step, so
    the backward runs one reverse scan instead of first re-running the whole loop; under
    no_grad, or when nothing needs a gradient, it keeps only the last carry."""
    w = dg.tensor(rand(3, seed=2), requires_grad=True)

    def f(h, xs):
        return scan(lambda h, x: (dg.tanh(h * w + x), (h * x).sum()), h, xs)

    def scans(graph):
        return [n for n in graph.nodes if n.op.name == "scan"]
    h, xs = dg.tensor(rand(3)), dg.tensor(rand(4, 3, seed=1))
    compiled = dg.compile(f, fullgraph=True)
    carry, ys = compiled(h, xs)
    (forward,) = scans(compiled.graph)
    assert forward.attrs.get("saves_carry") is True
    assert len(forward.outputs) == 1 + 1 + 1        # carry, ys, the stacked carries
    (carry * 2 + ys.sum()).sum().backward()
    backward = compiled._last.backward_executable.source_graph
    assert len(scans(backward)) == 1                # the reverse scan only
    grad = w.grad.numpy().copy()
    w.grad = None
    carry, ys = f(h, xs)
    (carry * 2 + ys.sum()).sum().backward()
    np.testing.assert_allclose(grad, w.grad.numpy(), rtol=1e-6)
    with dg.no_grad():
        plain = dg.compile(f, fullgraph=True)
        plain(h, xs)
    assert "saves_carry" not in scans(plain.graph)[0].attrs


def test_a_scans_gradient_reads_what_its_forward_scan_computed():
    """In a compiled training step, the reverse scan of the gradient would compute each
    step's forward values again (the tanh its VJP reads); ``save_scan_residuals`` has the
    forward scan stack them instead. The same numbers as without the pass and as eager,
    over three steps of SGD."""
    from dualgraph.passes import PASS_NAMES

    def make():
        w = dg.tensor(rand(3, 3, seed=2), requires_grad=True)
        opt = dg.optim.SGD([w], lr=0.1)

        def train_step(h, xs):
            opt.zero_grad()
            carry, ys = scan(lambda c, x: (dg.tanh(c @ w + x), (c * c).sum()), h, xs)
            loss = carry.sum() + ys.sum()
            loss.backward()
            opt.step()
            return loss
        return train_step, w

    h, xs = dg.tensor(rand(2, 3)), dg.tensor(rand(5, 2, 3, seed=1))
    runs = {}
    for name, passes in (("eager", None), ("saved", "all"),
                         ("recomputed", set(PASS_NAMES) - {"save_scan_residuals"})):
        step, w = make()
        if passes == "all":
            step = dg.compile(step)
        elif passes is not None:
            step = dg.compile(step, passes=passes)
        losses = [step(h, xs).item() for _ in range(3)]
        runs[name] = (losses, w.detach().numpy().copy(), step)
    for name in ("saved", "recomputed"):
        assert runs[name][0] == runs["eager"][0]
        np.testing.assert_array_equal(runs[name][1], runs["eager"][1])
    saved = runs["saved"][2]
    report = saved.explain()
    assert re.search(r"save_scan_residuals: .*\(saved 1\)", report), report
    assert re.search(r"1 values of %scan\w*'s body stacked for %scan\w*'s", report), report

    def reverse_body(compiled):
        graph = compiled._last.executable.graph
        (node,) = [n for n in graph.nodes if n.op.name == "scan" and n.attrs["reverse"]]
        return [n.op.name for n in node.attrs["body_graph"].nodes]
    assert "tanh" not in reverse_body(saved)
    assert "tanh" in reverse_body(runs["recomputed"][2])
    with dg.no_grad():     # no reverse scan: nothing to change
        w = dg.tensor(rand(3, 3, seed=2))
        plain = dg.compile(lambda h, xs: scan(lambda c, x: (dg.tanh(c @ w + x), c), h, xs))
        plain(h, xs)
    assert re.search(r"save_scan_residuals: (\d+) -> \1 nodes, 0 B saved", plain.explain())
    assert "stacked for" not in plain.explain()


def test_a_scans_per_step_linears_become_one_gemm_outside_it():
    """``batch_scan_linears``: a compiled LSTM training step over a scan computes the input
    projection once before the loop and the projection's and the cell's weight gradients
    once after it; a linear of the carry stays in the loop. The same numbers as eager and
    as without the pass, up to rounding, over three steps of SGD."""
    from dualgraph.passes import PASS_NAMES

    def make():
        dg.manual_seed(0)
        proj, cell = dg.nn.Linear(3, 8), dg.nn.LSTMCell(8, 4)
        mix = dg.nn.Linear(4, 4, bias=False)
        params = [*proj.parameters(), *cell.parameters(), *mix.parameters()]
        opt = dg.optim.SGD(params, lr=0.1)

        def step(carry, x):
            h, c = cell(proj(x), carry)
            return (mix(h), c), h          # (mix reads the carry: it stays in the loop)

        def train_step(h, xs):
            opt.zero_grad()
            (last, _), hs = scan(step, (h, h), xs)
            loss = (hs * hs).sum() + last.sum()
            loss.backward()
            opt.step()
            return loss
        return train_step, params

    h, xs = (dg.tensor(a.astype(np.float32)) for a in (rand(2, 4), rand(6, 2, 3, seed=1)))
    runs = {}
    for name, passes in (("eager", None), ("batched", "all"),
                         ("per step", set(PASS_NAMES) - {"batch_scan_linears"})):
        step, params = make()
        if passes is not None:
            step = dg.compile(step, **({} if passes == "all" else {"passes": passes}))
        losses = [step(h, xs).item() for _ in range(3)]
        runs[name] = (losses, [p.detach().numpy().copy() for p in params], step)
    for name in ("batched", "per step"):
        np.testing.assert_allclose(runs[name][0], runs["eager"][0], rtol=1e-5)
        for got, want in zip(runs[name][1], runs["eager"][1]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    def bodies(compiled):
        graph = compiled._last.executable.graph
        scans = {n.attrs["reverse"]: n.attrs["body_graph"].nodes for n in graph.nodes
                 if n.op.name == "scan"}
        return ([n.op.name for n in scans[False]], [n.op.name for n in scans[True]],
                [n.attrs["need"] for n in scans[True] if n.op.name == "lstm_cell_backward"])
    forward, reverse, needs = bodies(runs["batched"][2])
    # in the loop: the cell and mix (it reads the carry), mix's input gradient, the cell's
    assert forward == ["lstm_cell", "linear"], forward
    assert reverse.count("linear_backward") == 1 and "add" in reverse, reverse
    assert [need[3:] for need in needs] == [(False, False)]
    assert [n.attrs["need"] for n in runs["batched"][2]._last.executable.graph.nodes
            if n.op.name == "scan" and n.attrs["reverse"]
            for n in n.attrs["body_graph"].nodes if n.op.name == "linear_backward"] == [
                (True, False, False)]         # mix's weight gradient: after the loop too
    forward, reverse, needs = bodies(runs["per step"][2])
    assert forward.count("linear") == 3 and reverse.count("linear_backward") == 3
    assert [need[3:] for need in needs] == [(True, True)]
    report = runs["batched"][2].explain()
    for what, n in (("hoisted linears", 2), ("batched linear gradients", 2),
                    ("hoisted weight gradients", 2)):  # (the cell's, mix's)
        assert re.search(rf"lower: .*{what} {n}", report), report


def test_scan_reverse_and_structures():
    def f(a, xs):
        def step(c, x):
            return {"s": c["s"] + x["u"], "p": c["p"] * x["v"]}, (c["s"], x["u"] * 2)
        carry, (ys, zs) = scan(step, {"s": a, "p": a}, {"u": xs, "v": xs + 1.0},
                               reverse=True)
        return carry["s"], carry["p"], ys, zs
    check_modes(f, rand(2), rand(3, 2, seed=1))


def test_scan_eager_matches_python_loop():
    carry, ys = scan(lambda c, x: (c + x, c * x), dg.tensor(0.0), dg.tensor([1.0, 2.0, 3.0]))
    assert carry.item() == 6.0 and ys.tolist() == [0.0, 2.0, 9.0]


def strip_locations(text: str) -> str:
    return re.sub(r"    # \S+:\d+( \(vjp\))?", "", text)


GOLDEN = """\
graph(%x: f32[3]) {
  %sum: f32[] = sum(%x, dims=(0,), keepdim=False, dtype=None)
  %gt: bool[] = gt(%sum, 0)
  %cond: f32[3] = cond(%gt, %x, true_graph=@true_graph, false_graph=@false_graph)
    @false_graph = graph(%x: f32[3]) {
      %neg: f32[3] = neg(%x)
      return (%neg)
    }
    @true_graph = graph(%x: f32[3]) {
      %mul: f32[3] = mul(%x, 2)
      return (%mul)
    }
  %scan: f32[3], %scan_1: f32[2,3] = scan(%cond, %y, body_graph=@body_graph, num_carry=1, \
num_xs=1, length=2, reverse=False)
    @body_graph = graph(%cond: f32[3], %y_t: f32[3]) {
      %add: f32[3] = add(%cond, %y_t)
      return (%add, %cond)
    }
  return (%scan, %scan_1)
}"""


def golden_fn(x, y):
    h = cond(x.sum() > 0, lambda a: a * 2, lambda a: -a, (x,))
    return scan(lambda c, r: (c + r, c), h, y)


def test_print_golden_and_locations():
    f = dg.compile(golden_fn, fullgraph=True)
    f(dg.ones(3), dg.ones(2, 3))
    text = str(f.graph)
    assert strip_locations(text).replace("%x: f32[3], %y: f32[2,3]", "%x: f32[3]") == \
        GOLDEN.replace("graph(%x: f32[3]) {\n  %sum", "graph(%x: f32[3]) {\n  %sum", 1)
    assert "# test_control_flow.py:" in text   # nodes, also inside subgraphs, name user lines


def test_save_load_round_trip(tmp_path):
    def f(x):
        def body(i, y):
            return i + 1, cond(y.sum() > 0, lambda a: a - 1.0, lambda a: a + 2.0, (y,))
        i, y = while_loop(lambda i, y: i < 3, body, (dg.tensor(0), x))
        return scan(lambda c, r: (c * r, c), y, dg.stack([x, x]))
    f_c = dg.compile(f, fullgraph=True)
    x = dg.tensor([0.5, -1.0, 2.0])
    f_c(x)
    path = tmp_path / "control.json"
    f_c.graph.save(path)
    back = load(path)
    assert str(back) == str(f_c.graph)
    want = [t.numpy() for t in leaves(f(x))]
    for got, w in zip(back(x.numpy()), want):
        np.testing.assert_allclose(got, w)


# -- errors ---------------------------------------------------------------------------------------
def traced(fn, *args):
    return dg.compile(fn, fullgraph=True)(*args)


def test_cond_branch_mismatch_names_the_output():
    with pytest.raises(TypeError, match=r"output 0 is f32\[3\] in the true branch but "
                                        r"f32\[1\] in the false branch"):
        traced(lambda x: cond(x.sum() > 0, lambda a: a, lambda a: a.sum(0, keepdim=True),
                              (x,)), dg.ones(3))
    with pytest.raises(TypeError, match="same structure"):
        traced(lambda x: cond(x.sum() > 0, lambda a: (a, a), lambda a: a, (x,)), dg.ones(3))


def test_while_body_changing_a_carried_value_names_it():
    with pytest.raises(TypeError, match=r"changes carried value 1 from f32\[3\] to f32\[1,3\]"):
        traced(lambda x: while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y[None]),
                                    (dg.tensor(0), x)), dg.ones(3))
    with pytest.raises(TypeError, match=r"changes carried value 0 from i64\[\] to f32\[\]"):
        while_loop(lambda i: i < 2, lambda i: (i + 0.5,), (dg.tensor(0),))


def test_scan_carry_change_and_length_errors():
    with pytest.raises(TypeError, match=r"changes carried value 0 from f32\[3\] to f32\[\]"):
        traced(lambda x: scan(lambda c, r: (c.sum(), r), x, dg.ones(2, 3)), dg.ones(3))
    with pytest.raises(ValueError, match="same leading size"):
        scan(lambda c, r: (c, r), dg.ones(1), (dg.ones(2), dg.ones(3)))


def test_traced_while_gradient_needs_max_iters():
    def f(x):
        return while_loop(lambda y: y.sum() < 5, lambda y: (y * 2,), (x,))[0]
    with pytest.raises(CaptureError, match="max_iters"):
        traced(f, dg.ones(3, requires_grad=True))
    with dg.no_grad():
        np.testing.assert_allclose(traced(f, dg.ones(3)).numpy(), [2.0, 2.0, 2.0])


def test_while_max_iters_is_enforced():
    f = dg.compile(lambda x: while_loop(lambda y: y.sum() < 1e9, lambda y: (y * 2,), (x,),
                                        max_iters=3)[0], fullgraph=True)
    with pytest.raises(RuntimeError, match="more than max_iters=3"):
        f(dg.ones(2))


def test_branch_mutating_outer_tensor_is_rejected():
    state = dg.zeros(3)

    def f(x):
        def branch(a):
            state.add_(1.0)
            return a
        return cond(x.sum() > 0, branch, lambda a: a, (x,))
    with pytest.raises(CaptureError, match="in-place change of an outer tensor"):
        traced(f, dg.ones(3))
