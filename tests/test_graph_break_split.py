"""dg.compile split at graph breaks (capture/split.py): the code before and after a break is
compiled, the breaking line runs eagerly between, and the results equal eager's over several
training steps: parameters, returned values and what the breaks printed."""
from __future__ import annotations

import io
import os
import warnings

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F
from dualgraph.errors import CaptureError

HERE = os.path.basename(__file__)
STEPS = 5


def line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line and "line_of" not in line)


class Net(nn.Module):
    """An MLP whose forward may print an activation (a graph break inside a module)."""

    def __init__(self, out, debug=False, dropout=0.0):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 16), nn.Linear(16, 3)
        self.drop = nn.Dropout(dropout)
        self.debug, self.out = debug, out

    def forward(self, x):
        h = self.drop(F.relu(self.fc1(x)))
        if self.debug:
            print("activation", h.mean(), file=self.out)   # MARK-forward-print
        return self.fc2(h)


def data(steps=STEPS):
    rng = np.random.default_rng(0)
    return [(dg.tensor(rng.standard_normal((8, 4)).astype(np.float32)),
             dg.tensor(rng.standard_normal((8, 3)).astype(np.float32))) for _ in range(steps)]


def step_for(kind: str, debug=False, dropout=0.0):
    """A model, its optimiser, a training step with the break ``kind`` and its printout."""
    dg.manual_seed(0)
    out = io.StringIO()
    model = Net(out, debug, dropout)
    opt = dg.optim.Adam(model.parameters(), lr=0.01)
    state = {"skipped": 0}

    def step(x, y):
        opt.zero_grad()
        pred = model(x)
        loss = F.mse_loss(pred, y)
        if kind == "format":
            print(f"loss {loss.item():.4f}", file=out)   # MARK-format
        if kind == "branch":
            if loss.item() > 1.1:                      # MARK-branch
                loss = loss * 0.5
            else:
                state["skipped"] += 1
        if kind == "numpy":   # a call the graph can't take: NumPy on the values
            scale = dg.tensor(np.clip(np.abs(pred.detach().numpy()).mean(), 0.5, 2.0))
            loss = loss * scale                        # (MARK-numpy above)
        if kind == "two":
            print("pred", pred.sum(), file=out)
            print(f"{loss.item():.5f}", file=out)
        loss.backward()
        opt.step()
        return loss.detach()

    return model, step, out, state


def run(kind, compiled, steps=STEPS, **options):
    model, step, out, state = step_for(kind, **options)
    fn = dg.compile(step) if compiled else step
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = [fn(x, y).numpy().copy() for x, y in data(steps)]
    params = [p.detach().numpy().copy() for p in model.parameters()]
    return losses, params, out.getvalue(), state, fn, [str(w.message) for w in caught]


def assert_same(a, b):
    for u, v in zip(a, b, strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def pieces(fn) -> int:
    return sum(line.split(". ", 1)[-1].startswith("compiled piece")
               for line in fn.explain().splitlines())


@pytest.mark.parametrize("kind,options", [
    ("none", dict(debug=True)),     # a print of an activation inside the module's forward
    ("format", {}),                 # f"{loss.item():.4f}" mid-step
    ("branch", {}),                 # .item() choosing a Python branch
    ("numpy", {}),                  # NumPy called on the values mid-step
    ("two", {}),                    # two breaks in the step
    ("format", dict(debug=True)),   # two breaks, one inside the module
])
def test_split_step_matches_eager(kind, options):
    losses_e, params_e, printed_e, state_e, _, _ = run(kind, False, **options)
    losses_c, params_c, printed_c, state_c, fn, warned = run(kind, True, **options)
    assert_same(losses_c, losses_e)
    assert_same(params_c, params_e)
    assert printed_c == printed_e and state_c == state_e
    assert printed_e.count("\n") in (0, STEPS, 2 * STEPS)
    explained = fn.explain()
    assert "running it eagerly" not in explained and not fn.eager_only
    assert pieces(fn) >= 2, explained
    assert any("graph break" in w and HERE in w for w in warned), warned


def test_branch_taken_both_ways_matches_eager():
    """The ``.item()`` branch changes direction during training: each direction is its own
    last piece, and the Python counter of the branch not taken is eager's."""
    _, _, _, state, fn, _ = run("branch", True, steps=8)
    losses, _, _, _, _, _ = run("branch", False, steps=8)
    assert 0 < state["skipped"] < 8, (state, losses)


def test_explain_lists_each_piece_its_lines_and_the_break():
    *_, fn, warned = run("format", True, debug=True)
    text = fn.explain()
    forward, fmt = line_of("MARK-forward-print"), line_of("MARK-format")
    assert f"graph break at {os.path.abspath(__file__)}:{forward}: print()/str() on a " \
           "traced tensor; split there" in text or f"{HERE}:{forward}" in text
    assert f"{HERE}:{fmt}: item() on a traced tensor" in text
    assert f"compiled piece before the break at {os.path.abspath(__file__)}:{forward}" in text
    assert "compiled piece after the last break (lines " in text
    assert any(f"{HERE}:{forward}" in w for w in warned)


def test_pieces_are_reused_after_the_first_calls():
    model, step, out, _ = step_for("format", debug=True)
    fn = dg.compile(step)
    batches = data(8)
    for x, y in batches[:3]:
        fn(x, y)
    compiled = pieces(fn)
    for x, y in batches[3:]:
        fn(x, y)
    assert pieces(fn) == compiled


def test_whole_step_is_one_last_piece_with_backward_and_update():
    """A break in the forward keeps the backward and the optimiser's update compiled: the
    last piece holds both (Adam's update ops, the linear layers' gradients)."""
    *_, fn, _ = run("format", True)
    ops = {node.op.name for node in fn.capture.graph.nodes}
    assert any("adam" in name for name in ops), ops
    assert any("backward" in name or "matmul" in name for name in ops), ops
    assert len(fn.capture.graph.nodes) > 10


def test_dropout_split_draws_the_numbers_the_unsplit_compiled_step_draws():
    """Compiled random ops read the generator's seed state (docs/capture.md): a split step
    draws the same numbers as the same step compiled without its break."""
    _, params_split, printed, *_ = run("format", True, dropout=0.5)
    _, params_whole, *_ = run("none", True, dropout=0.5)
    assert printed.count("loss") == STEPS
    assert_same(params_split, params_whole)


def test_module_forward_with_print_differentiated_outside():
    """A compiled module whose forward prints: its output's backward (outside) reaches the
    parameters through every piece, as eager's does."""
    out_e, out_c = io.StringIO(), io.StringIO()
    dg.manual_seed(0)
    eager = Net(out_e, debug=True)
    dg.manual_seed(0)
    model = Net(out_c, debug=True)
    compiled = dg.compile(model)
    for x, y in data(3):
        for m in (eager, compiled):
            m.zero_grad()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                F.mse_loss(m(x), y).backward()
        for p, q in zip(eager.parameters(), model.parameters()):
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert out_c.getvalue() == out_e.getvalue()
    assert pieces(compiled) >= 2


def test_fullgraph_still_raises_naming_the_line():
    _, step, _, _ = step_for("format")
    fn = dg.compile(step, fullgraph=True)
    x, y = data(1)[0]
    with pytest.raises(CaptureError, match=rf"{HERE}:{line_of('MARK-format')}"):
        fn(x, y)


def test_an_unsplittable_break_still_falls_back_to_eager():
    """A break that is not a value Python needs (a tensor made at every call and kept) still
    sends the function to eager, as before, with one warning."""
    kept = {}

    def f(x):
        y = x * 2
        print(y.sum(), file=io.StringIO())
        kept["t"] = dg.ones(2) * y.sum()
        return y

    fn = dg.compile(f)
    x = dg.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            np.testing.assert_allclose(fn(x).numpy(), [2.0, 2.0])
    np.testing.assert_allclose(kept["t"].numpy(), [4.0, 4.0])


def test_break_between_backward_and_update():
    """``print(clip_grad_norm_(...).item())`` between backward and step: the update is the
    last piece, reading the gradients the piece before computed."""
    def run_clip(compiled):
        dg.manual_seed(0)
        out = io.StringIO()
        model = Net(out)
        opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            print(f"grad norm {norm.item():.5f}", file=out)
            opt.step()

        fn = dg.compile(step) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for x, y in data():
                fn(x, y)
        return [p.detach().numpy().copy() for p in model.parameters()], out.getvalue(), fn

    params_e, printed_e, _ = run_clip(False)
    params_c, printed_c, fn = run_clip(True)
    assert_same(params_c, params_e)
    assert printed_c == printed_e and printed_e.count("grad norm") == STEPS
    assert pieces(fn) >= 2 and any("sgd" in n.op.name for n in fn.capture.graph.nodes)


@pytest.mark.parametrize("dynamic", [True, None])
def test_dynamic_batch_with_a_break(dynamic):
    """``dynamic=True`` with a print: the first call traces with a symbolic batch, later
    calls split with their own shapes; values equal eager's for two batch sizes. (Without
    it, too: a call replaying the one before meets an argument of another shape and
    traces on, capture/replay.py.)"""
    dg.manual_seed(0)
    model = nn.Linear(4, 2)
    sink = io.StringIO()

    def f(x):
        h = model(x)
        print(h.sum(), file=sink)
        return h * 2

    fn = dg.compile(f, dynamic=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (3, 3, 3, 5, 5, 3):
            x = dg.ones(n, 4) * n
            np.testing.assert_allclose(fn(x).detach().numpy(), f(x).detach().numpy(),
                                       rtol=1e-6)
    lines = sink.getvalue().splitlines()
    assert lines[0::2] == lines[1::2]


def test_learning_rate_set_every_step_becomes_an_input_of_the_split_step():
    """nanoGPT's loop sets ``param_group['lr']`` before every step: split, as unsplit, the
    rate becomes a graph input after its second change, so the step is not compiled again
    at every call (nor sent to eager at the retrace limit)."""
    def run_schedule(compiled, steps=12):
        dg.manual_seed(0)
        out = io.StringIO()
        model = Net(out)
        opt = dg.optim.AdamW(model.parameters(), lr=0.01)

        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            print(f"loss {loss.item():.4f}", file=out)
            loss.backward()
            opt.step()

        fn = dg.compile(step) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i, (x, y) in enumerate(data(steps)):
                for group in opt.param_groups:
                    group["lr"] = 0.01 * (i + 1) / steps
                fn(x, y)
        return [p.detach().numpy().copy() for p in model.parameters()], out.getvalue(), fn

    params_e, printed_e, _ = run_schedule(False)
    params_c, printed_c, fn = run_schedule(True)
    for u, v in zip(params_c, params_e, strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-6)
    assert printed_c == printed_e
    assert not fn.eager_only and pieces(fn) <= 5, fn.explain()


def test_a_step_returning_loss_item_is_not_compiled_again_at_every_call():
    """``return loss.item()``: the Python number the step returns differs at every call;
    it is not part of what the last piece is cached by."""
    _, step, _, _ = step_for("none")

    def logged(x, y):
        return step(x, y).item()

    fn = dg.compile(logged)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = [fn(x, y) for x, y in data(10)]
    assert len(set(values)) == 10 and all(type(v) is float for v in values)
    assert not fn.eager_only and pieces(fn) <= 3, fn.explain()


def test_split_is_timed_against_eager_and_the_faster_is_kept():
    """After its first calls a split function alternates split and eager calls, then keeps
    the faster (a small step: eager, often); either way the results are eager's and
    ``explain()`` gives both times."""
    losses_e, params_e, printed_e, *_ = run("format", False, steps=20)
    losses_c, params_c, printed_c, _, fn, _ = run("format", True, steps=20)
    assert_same(losses_c, losses_e)
    assert_same(params_c, params_e)
    assert printed_c == printed_e
    text = fn.explain()
    assert "ms per call, eager" in text and "(the best of 3 calls each" in text, text


class Queue(nn.Module):
    """MoCo's queue of keys: a pointer buffer read with ``int()`` and both buffers written
    by index assignment, before any op has read them."""

    def __init__(self):
        super().__init__()
        self.register_buffer("queue", dg.zeros(2, 6))
        self.register_buffer("ptr", dg.zeros(1, dtype=dg.int64))

    def forward(self, keys):
        ptr = int(self.ptr)   # MARK-queue-ptr
        self.queue[:, ptr:ptr + 2] = keys.T
        self.ptr[0] = (ptr + 2) % 6
        return self.queue.sum(1)


def test_a_buffer_read_as_a_python_number_is_a_break_and_its_writes_are_state():
    """``int(self.ptr)`` reads state the graph can't guard: a graph break there (as
    TorchDynamo's), not the traced call's value baked in; the buffers written by index
    assignment are updated at every call, as eagerly (before: the write ran once, at trace
    time, or failed on the traced value)."""
    runs = []
    for compiled in (False, True):
        m = Queue()
        f = dg.compile(m) if compiled else m
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs.append([f(dg.ones(2, 2) * (i + 1)).numpy().copy() for i in range(7)]
                        + [m.queue.numpy().copy(), m.ptr.numpy().copy()])
    for got, want in zip(*runs):
        np.testing.assert_array_equal(got, want)
    report = f.explain()
    assert f"{HERE}:{line_of('MARK-queue-ptr')}" in report and "1 graph break" in report


def test_state_of_a_module_passed_as_an_argument_read_as_a_number_is_a_break():
    """``step(model, x)`` reading ``model.gamma.item()`` (RotatE's frozen margin, a
    Parameter with requires_grad=False) or a buffer's ``item()``: a graph break, as for
    the state the function's scope reaches. Before, the traced call's values were baked in
    unguarded: a later change of the parameter or buffer gave stale results silently."""
    class Margin(nn.Module):
        def __init__(self):
            super().__init__()
            self.gamma = nn.Parameter(dg.tensor([2.0]), requires_grad=False)
            self.register_buffer("shift", dg.tensor(1.0))

    m = Margin()
    f = dg.compile(lambda model, x: x * model.gamma.item() + model.shift.item())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [f(m, dg.ones(2)).tolist()]
        m.gamma.data.fill_(5.0)
        m.shift.fill_(-1.0)
        got.append(f(m, dg.ones(2)).tolist())
    assert got == [[3.0, 3.0], [4.0, 4.0]]
    assert "graph break" in f.explain()


def test_reading_captured_state_as_a_number_with_fullgraph_raises():
    state = dg.tensor([3])
    f = dg.compile(lambda x: x * int(state), fullgraph=True)
    with pytest.raises(CaptureError, match="item\\(\\) of the traced function.s state"):
        f(dg.ones(2))
