"""``gru_layer`` and ``rnn_layer`` (ops/recurrent_gru_elman.py): nn.GRU's and nn.RNN's layers
as one op per layer and direction, each way, against torch's modules in float32: a training
step (output, final state, every parameter's and input's gradient) eager and compiled,
bidirectional, stacked, batch_first, with and without an initial state, dropout between
layers in training, and the edges (no steps, bad shapes)."""
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.ops.recurrent_gru_elman import gru_layer, rnn_layer
from torch_compare import assert_steps_match, load_from_torch

TOL = dict(rtol=2e-4, atol=2e-5)

CONFIGS = [("GRU", dict(input_size=8, hidden_size=64, batch_first=True)),
           ("GRU", dict(input_size=5, hidden_size=16, bidirectional=True, num_layers=2)),
           ("RNN", dict(input_size=8, hidden_size=32, batch_first=True)),
           ("RNN", dict(input_size=5, hidden_size=16, bidirectional=True, num_layers=2,
                        nonlinearity="relu")),
           ("RNN", dict(input_size=5, hidden_size=12, num_layers=3, bias=False))]


def _pair(kind, **kwargs):
    torch.manual_seed(0)
    ref = getattr(torch.nn, kind)(**kwargs)
    return ref, load_from_torch(getattr(dg.nn, kind)(**kwargs), ref)


def _step(model, x, h0, r):
    """A loss over the output and the final state, and its gradients by backward."""
    out, h = model(x, h0)
    loss = (out * r).sum() + (h * h).sum()
    loss.backward()
    return loss


def _arrays(kwargs, seq=7, batch=6, seed=1):
    rng = np.random.default_rng(seed)
    shape = (batch, seq) if kwargs.get("batch_first") else (seq, batch)
    directions = 2 if kwargs.get("bidirectional") else 1
    layers = kwargs.get("num_layers", 1) * directions
    arrays = [rng.standard_normal(shape + (kwargs["input_size"],)),
              rng.standard_normal((layers, batch, kwargs["hidden_size"])),
              rng.standard_normal(shape + (kwargs["hidden_size"] * directions,))]
    return [a.astype(np.float32) for a in arrays]


def _run(lib, model, step, arrays, with_h0=True):
    ts = [lib.tensor(a, requires_grad=k < 2) for k, a in enumerate(arrays)]
    if not with_h0:
        ts[1] = None
    loss = step(*ts).item()
    grads = {k: p.grad.numpy().copy() for k, p in model.named_parameters()}
    grads.update({f"input {k}": ts[k].grad.numpy().copy() for k in range(2)
                  if ts[k] is not None})
    model.zero_grad()
    return loss, grads


@pytest.mark.parametrize("with_h0", [True, False], ids=["h0", "zeros"])
@pytest.mark.parametrize("kind,kwargs", CONFIGS,
                         ids=["gru", "gru-bidirectional", "tanh", "relu-bidirectional",
                              "tanh-3-layers-no-bias"])
def test_training_step_matches_torch_eager_and_compiled(kind, kwargs, with_h0):
    ref, ours = _pair(kind, **kwargs)
    arrays = _arrays(kwargs)
    want = _run(torch, ref, lambda *t: _step(ref, *t), arrays, with_h0)
    eager = _run(dg, ours, lambda *t: _step(ours, *t), arrays, with_h0)
    compiled_step = dg.compile(lambda *t: _step(ours, *t))
    compiled = _run(dg, ours, compiled_step, arrays, with_h0)
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    op = "gru_layer" if kind == "GRU" else "rnn_layer"
    nodes = compiled_step.optimized_graph.nodes
    assert sum(n.op.name == op for n in nodes) == layers
    assert sum(n.op.name == op + "_backward" for n in nodes) == layers
    assert_steps_match(want, eager, compiled, TOL)


@pytest.mark.parametrize("kind", ["GRU", "RNN"])
def test_dropout_between_layers_in_training(kind):
    """p = 1 drops every input of the second layer, in torch as here: the step is then
    deterministic, and differs from the eval-mode step, where dropout is off."""
    kwargs = dict(input_size=4, hidden_size=8, num_layers=2, dropout=1.0)
    ref, ours = _pair(kind, **kwargs)
    arrays = _arrays(kwargs, seq=5, batch=3)
    want = _run(torch, ref, lambda *t: _step(ref, *t), arrays)
    got = _run(dg, ours, lambda *t: _step(ours, *t), arrays)
    np.testing.assert_allclose(got[0], want[0], **TOL)
    for k in want[1]:
        np.testing.assert_allclose(got[1][k], want[1][k], err_msg=k, **TOL)
    ours.eval()
    assert abs(_run(dg, ours, lambda *t: _step(ours, *t), arrays)[0] - got[0]) > 1e-3


@pytest.mark.parametrize("reverse", [False, True])
def test_no_steps_give_the_initial_state_and_its_gradient(reverse):
    for layer, gates in ((gru_layer, 3), (rnn_layer, 1)):
        h0 = dg.randn(3, 4, requires_grad=True)
        w = dg.randn(4 * gates, 4, requires_grad=True)
        y, h = layer(dg.zeros(0, 3, 4 * gates), h0, w, reverse=reverse)
        assert tuple(y.shape) == (0, 3, 4)
        np.testing.assert_array_equal(h.detach().numpy(), h0.detach().numpy())
        (2 * h.sum()).backward()
        np.testing.assert_array_equal(h0.grad.numpy(), np.full((3, 4), 2, np.float32))
        np.testing.assert_array_equal(w.grad.numpy(), np.zeros(w.shape, np.float32))


def test_bad_shapes_dtypes_and_nonlinearity_are_refused():
    with pytest.raises(dg.ShapeError, match=r"weight_hh \(8, 4\)"):
        gru_layer(dg.zeros(2, 3, 12), dg.zeros(3, 4), dg.zeros(8, 4))
    with pytest.raises(dg.ShapeError, match=r"gates \(T, B, H\)"):
        rnn_layer(dg.zeros(2, 3, 5), dg.zeros(3, 4), dg.zeros(4, 4))
    with pytest.raises(TypeError, match="one float dtype"):
        rnn_layer(dg.zeros(2, 3, 4), dg.zeros(3, 4, dtype=dg.float64), dg.zeros(4, 4))
    with pytest.raises(ValueError, match="nonlinearity"):
        rnn_layer(dg.zeros(2, 3, 4), dg.zeros(3, 4), dg.zeros(4, 4), nonlinearity="gelu")


def test_unbatched_and_float16_inputs_run_as_torch():
    ref, ours = _pair("GRU", input_size=3, hidden_size=8)
    x = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    want, wh = ref(torch.tensor(x))
    got, gh = ours(dg.tensor(x))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **TOL)
    np.testing.assert_allclose(gh.detach().numpy(), wh.detach().numpy(), **TOL)
    half = dict(dtype=dg.float16)
    y, h = gru_layer(dg.zeros(4, 2, 24, **half), dg.zeros(2, 8, **half), dg.zeros(24, 8, **half))
    assert (y.dtype, h.dtype) == (dg.float16, dg.float16)
    y, h = rnn_layer(dg.ones(4, 2, 8, **half), dg.zeros(2, 8, **half), dg.zeros(8, 8, **half))
    np.testing.assert_allclose(y.numpy().astype(np.float32), np.tanh(np.ones((4, 2, 8))),
                               rtol=1e-3)
