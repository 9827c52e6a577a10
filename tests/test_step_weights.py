"""The lowering rule ``step_weights_kn`` (passes/step_weights.py) on recurrent steps: an
``LSTMCell`` in a Python loop, whose hidden weight the rule copies transposed per call,
compiled gives eager's losses and weights; where the cost rule says no (too few steps, too
few or too many rows) the graph is left alone. LSTM, GRU and RNN layers (bidirectional,
stacked, odd sizes) are one layer op a layer and direction, which lays its weight out
itself: the rule finds nothing to copy, and their compiled training steps give torch's
outputs and gradients and eager's, in float32 and float64."""
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.passes.step_weights import READERS, ROWS
from torch_compare import load_from_torch


def _ops(graph) -> dict:
    ops = {}
    for node in graph.nodes:
        ops[node.op.name] = ops.get(node.op.name, 0) + 1
    return ops


def _relayouts(compiled) -> int:
    return _ops(compiled.optimized_graph).get("relayout", 0)


def _train_step(lib, model, x, r):
    """``loss = sum(output * r)``, its gradients by backward: what the test compares."""
    out = model(x)
    out = out[0] if isinstance(out, tuple) else out
    loss = (out * r).sum()
    loss.backward()
    return loss


def _pair(name, dtype, seed, **kwargs):
    torch.manual_seed(seed)
    ref = getattr(torch.nn, name)(**kwargs).to(getattr(torch, dtype))
    ours = getattr(dg.nn, name)(**kwargs, dtype=getattr(dg, dtype))
    return ref, load_from_torch(ours, ref)


CASES = [("LSTM", dict(input_size=5, hidden_size=7)),
         ("LSTM", dict(input_size=5, hidden_size=7, num_layers=2, bidirectional=True,
                       batch_first=True)),
         ("GRU", dict(input_size=3, hidden_size=9, bidirectional=True)),
         ("RNN", dict(input_size=4, hidden_size=6, num_layers=2, nonlinearity="relu"))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,kwargs", CASES, ids=lambda c: str(c))
def test_recurrent_layers_compiled_match_torch_and_eager(name, kwargs, dtype):
    seq, batch = 6, 9                      # (9 rows: inside ROWS; 6 steps: READERS or more)
    ref, ours = _pair(name, dtype, 0, **kwargs)
    rng = np.random.default_rng(1)
    shape = (batch, seq) if kwargs.get("batch_first") else (seq, batch)
    x = rng.standard_normal(shape + (kwargs["input_size"],)).astype(dtype)
    out_size = kwargs["hidden_size"] * (2 if kwargs.get("bidirectional") else 1)
    r = rng.standard_normal(shape + (out_size,)).astype(dtype)

    want_loss = _train_step(torch, ref, torch.tensor(x), torch.tensor(r)).item()
    want = {k: p.grad.numpy() for k, p in ref.named_parameters()}
    eager_loss = _train_step(dg, ours, dg.tensor(x), dg.tensor(r)).item()
    eager = {k: p.grad.numpy().copy() for k, p in ours.named_parameters()}
    ours.zero_grad()
    step = dg.compile(lambda x, r: _train_step(dg, ours, x, r))
    got_loss = step(dg.tensor(x), dg.tensor(r)).item()
    got = {k: p.grad.numpy() for k, p in ours.named_parameters()}

    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    # one layer op a layer and direction, which lays its weight out itself
    op = {"LSTM": "lstm_layer", "GRU": "gru_layer", "RNN": "rnn_layer"}[name]
    assert _ops(step.optimized_graph).get(op) == layers
    assert _relayouts(step) == 0
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_loss, want_loss, **tol)
    np.testing.assert_allclose(got_loss, eager_loss, **tol)
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], err_msg=k, **tol)
        np.testing.assert_allclose(got[k], eager[k], err_msg=k, **tol)


def test_lstm_cell_loop_in_a_training_step_matches_eager():
    """An ``LSTMCell`` called per step from Python, trained by Adam for two steps: the
    compiled step's losses and weights are eager's (the rule read the copy of a weight the
    optimiser updates in place)."""
    def build():
        torch.manual_seed(3)
        torch_cell = torch.nn.LSTMCell(6, 10)
        cell = load_from_torch(dg.nn.LSTMCell(6, 10), torch_cell)
        opt = dg.optim.Adam(cell.parameters(), lr=0.01)

        def step(xs):
            opt.zero_grad()
            h = c = dg.zeros(xs.shape[1], 10)
            loss = 0
            for t in range(xs.shape[0]):
                h, c = cell(xs[t], (h, c))
                loss = loss + h.square().mean()
            loss.backward()
            opt.step()
            return loss
        return cell, step
    xs = dg.tensor(np.random.default_rng(2).standard_normal((5, 11, 6)).astype("float32"))
    cell, step = build()
    want = [step(xs).item() for _ in range(3)] + [p.detach().numpy() for p in cell.parameters()]
    cell, step = build()
    compiled = dg.compile(step)
    got = [compiled(xs).item() for _ in range(3)] + [p.detach().numpy() for p in cell.parameters()]
    assert _relayouts(compiled) == 1
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seq,batch", [(READERS - 1, 9), (6, ROWS[0] - 1), (6, ROWS[1] + 1)])
def test_where_the_cost_rule_says_no_the_weight_stays(seq, batch):
    lstm = dg.nn.LSTM(4, 5)
    x = dg.randn(seq, batch, 4)
    compiled = dg.compile(lambda x: lstm(x)[0].sum())
    np.testing.assert_allclose(compiled(x).item(), lstm(x)[0].sum().item(), rtol=1e-5)
    assert _relayouts(compiled) == 0
