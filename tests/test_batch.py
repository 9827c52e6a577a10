"""``batch_linears``: per-step linears over one tensor (an unrolled RNN's input projection)
become one GEMM, forward and backward, and an LSTM cell's per-step weight gradients one GEMM
after the steps, with the same results; what it must leave alone."""
import numpy as np
import pytest
from test_passes import node, run

import dualgraph as dg
from dualgraph.graph import Graph
from dualgraph.passes import batch_linears

STEPS = 6


def steps_graph(positions=range(STEPS), backward=True, grad_also_returned=False):
    """x: (4, 6, 8); per position t: y_t = linear(x[:, t], W, b) and, with ``backward``,
    linear_backward(g_t, x[:, t], W) with the weight and bias gradients summed."""
    g = Graph()
    x = g.add_input((4, STEPS, 8), "float32", name="x")
    w = g.add_input((5, 8), "float32", name="w")
    b = g.add_input((5,), "float32", name="b")
    outs, dws, dbs = [], [], []
    for t in positions:
        s = node(g, "slice", x, index=(None, (t, t + 1, 1), None))
        xt = node(g, "reshape", s, shape=(4, 8))
        y = node(g, "linear", xt, w, b)
        outs.append(y)
        if backward:
            gt = node(g, "mul", y, 2.0)       # a stand-in for an upstream gradient
            dx, dw, db = g.add_node("linear_backward", [gt, xt, w],
                                    {"need": (True, True, True)})
            outs.append(dx)
            dws.append(dw)
            dbs.append(db)
    extra = []
    if backward:
        total_w, total_b = dws[0], dbs[0]
        for dw, db in zip(dws[1:], dbs[1:]):
            total_w, total_b = node(g, "add", total_w, dw), node(g, "add", db, total_b)
        extra = [total_w, total_b] + ([dws[1]] if grad_also_returned else [])
    g.set_outputs(outs + extra)
    return g


def test_per_step_linears_and_their_gradients_become_one_gemm_each():
    new, report = run(batch_linears, steps_graph())
    names = [n.op.name for n in new.nodes]
    assert names.count("linear") == 1 and names.count("linear_backward") == 1
    assert "add" not in names                  # the sum trees read the batched gradient
    assert report.counts == {"batched linears": STEPS, "batched linear gradients": STEPS}


def test_a_contiguous_part_of_the_steps_is_batched_over_its_slice():
    new, report = run(batch_linears, steps_graph(positions=range(1, STEPS)))
    assert [n.op.name for n in new.nodes].count("linear_backward") == 1


@pytest.mark.parametrize("kwargs", [
    {"positions": [0, 2], "backward": False},     # too few of the steps: not worth it
    {"grad_also_returned": True},                 # a step's weight gradient is read alone
])
def test_what_batch_linears_leaves_alone(kwargs):
    graph = steps_graph(**kwargs)
    new, report = run(batch_linears, graph)
    if kwargs.get("grad_also_returned"):   # the forward is still batched
        assert [n.op.name for n in new.nodes].count("linear_backward") == STEPS
        assert report.counts == {"batched linears": STEPS}
    else:
        assert new is graph and not report.changed


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell"])
def test_an_unrolled_rnn_compiles_to_batched_gemms_and_equals_eager(kind):
    def train(compiled):
        dg.manual_seed(0)
        cell = getattr(dg.nn, kind)(8, 16)
        head = dg.nn.Linear(16, 3)
        opt = dg.optim.Adam(list(cell.parameters()) + list(head.parameters()), lr=1e-2)
        xs = dg.tensor(np.random.default_rng(0).normal(size=(4, 10, 8)), dtype=dg.float32)

        def step():
            opt.zero_grad()
            h = state = dg.zeros(4, 16)
            if kind == "LSTMCell":
                state = (h, dg.zeros(4, 16))
            loss = 0
            for t in range(xs.shape[1]):
                state = cell(xs[:, t], state)
                h = state[0] if kind == "LSTMCell" else state
                loss = loss + head(h).pow(2).mean()
            loss.backward()
            opt.step()
            return loss
        fn = dg.compile(step) if compiled else step
        losses = [fn().item() for _ in range(3)]
        return losses, [p.detach().numpy().copy() for p in cell.parameters()], fn
    eager_losses, eager_params, _ = train(False)
    losses, params, fn = train(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for got, want in zip(params, eager_params):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    report = fn.explain()
    assert "batched linears 10" in report and "batched linear gradients 10" in report
    if kind == "LSTMCell":   # the cell's own weight gradient: one GEMM after the steps
        assert "hoisted recurrent weight gradients 10" in report
        # ... over the gate gradients the input projection's gradient stacks too (one
        # concatenation of them, shared) and the hidden states stacked the same way
        cats = [n for n in fn._last.executable.graph.nodes if n.op.name == "cat"]
        assert sorted(tuple(n.outputs[0].shape) for n in cats) == [(4, 10, 16), (4, 10, 64)]


@pytest.mark.parametrize("batch_first", [False, True])
def test_an_lstm_layer_is_one_op_each_way_with_eagers_values(batch_first):
    """``nn.LSTM`` projects the whole sequence's input in one GEMM and runs the recurrence
    as one ``lstm_layer`` op, whose backward stacks the gate gradients itself: nothing is
    left for ``batch_linears`` to hoist, and no ``cat`` of per-step gradients is made."""
    def train(compiled):
        dg.manual_seed(0)
        lstm = dg.nn.LSTM(5, 7, batch_first=batch_first)
        shape = (9, 6, 5) if batch_first else (6, 9, 5)    # (6 steps of 9 rows)
        x = dg.tensor(np.random.default_rng(1).normal(size=shape), dtype=dg.float32)

        def step():
            lstm.zero_grad()
            loss = lstm(x)[0].square().mean()
            loss.backward()
            return [loss] + [p.grad for p in lstm.parameters()]
        fn = dg.compile(step) if compiled else step
        return [t.detach().numpy().copy() for t in fn()], fn
    want, _ = train(False)
    got, fn = train(True)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    ops = [n.op.name for n in fn._last.executable.graph.nodes]
    assert ops.count("lstm_layer") == 1 and ops.count("lstm_layer_backward") == 1
    assert "cat" not in ops
