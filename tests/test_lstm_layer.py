"""``lstm_layer`` (ops/recurrent_layer.py): an LSTM layer's direction as one op, forward and
backward, against torch's ``nn.LSTM`` in float32 at sizes where the kernel takes its fast
paths (the packed product on AVX-512 hosts, the fused cell loops), eager and compiled, and
at the edges (no steps, reversed, states given and their gradients)."""
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.ops.recurrent_layer import lstm_layer
from torch_compare import assert_steps_match, load_from_torch

TOL = dict(rtol=2e-4, atol=2e-5)


def _pair(**kwargs):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(**kwargs)
    return ref, load_from_torch(dg.nn.LSTM(**kwargs), ref)


def _step(lib, model, x, h0, c0, r):
    """A loss over the output and both final states, and its gradients by backward."""
    out, (h, c) = model(x, (h0, c0))
    loss = (out * r).sum() + (h * h).sum() + c.sum()
    loss.backward()
    return loss


@pytest.mark.parametrize("kwargs,batch", [
    (dict(input_size=8, hidden_size=128, batch_first=True), 32),
    (dict(input_size=5, hidden_size=16, bidirectional=True, num_layers=2), 32),
    # the packed products with a partial panel (4H = 192, H = 48 of 64) and the last five
    # rows of a batch two by two, then one, forward and backward, one direction reversed
    (dict(input_size=6, hidden_size=48, bidirectional=True), 29),
    # the input projection packed at each call (``linear_packed.per_call``: 91 x 32 x 320),
    # five full panels a step, one row past the last block of six
    (dict(input_size=32, hidden_size=80, batch_first=True), 13)],
    ids=["wide", "bidirectional", "partial-panels", "packed-input"])
def test_float32_training_step_matches_torch_eager_and_compiled(kwargs, batch):
    seq = 7
    ref, ours = _pair(**kwargs)
    rng = np.random.default_rng(1)
    shape = (batch, seq) if kwargs.get("batch_first") else (seq, batch)
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    out_size = kwargs["hidden_size"] * (2 if kwargs.get("bidirectional") else 1)
    arrays = [rng.standard_normal(shape + (kwargs["input_size"],)),
              rng.standard_normal((layers, batch, kwargs["hidden_size"])),
              rng.standard_normal((layers, batch, kwargs["hidden_size"])),
              rng.standard_normal(shape + (out_size,))]
    arrays = [a.astype(np.float32) for a in arrays]

    def run(lib, model, step):
        ts = [lib.tensor(a, requires_grad=k in (0, 1, 2)) for k, a in enumerate(arrays)]
        loss = step(*ts).item()
        grads = {k: p.grad.numpy().copy() for k, p in model.named_parameters()}
        grads.update({f"input {k}": ts[k].grad.numpy().copy() for k in range(3)})
        model.zero_grad()
        return loss, grads

    want = run(torch, ref, lambda *t: _step(torch, ref, *t))
    eager = run(dg, ours, lambda *t: _step(dg, ours, *t))
    compiled_step = dg.compile(lambda *t: _step(dg, ours, *t))
    compiled = run(dg, ours, compiled_step)
    assert sum(n.op.name == "lstm_layer" for n in compiled_step.optimized_graph.nodes) == layers
    assert_steps_match(want, eager, compiled, TOL)


@pytest.mark.parametrize("reverse", [False, True])
def test_no_steps_gives_the_initial_state_and_its_gradients(reverse):
    h0 = dg.randn(3, 4, requires_grad=True)
    c0 = dg.randn(3, 4, requires_grad=True)
    w = dg.randn(16, 4, requires_grad=True)
    y, h, c = lstm_layer(dg.zeros(0, 3, 16), h0, c0, w, reverse=reverse)
    assert tuple(y.shape) == (0, 3, 4)
    np.testing.assert_array_equal(h.detach().numpy(), h0.detach().numpy())
    (2 * h.sum() + 3 * c.sum()).backward()
    np.testing.assert_array_equal(h0.grad.numpy(), np.full((3, 4), 2, np.float32))
    np.testing.assert_array_equal(c0.grad.numpy(), np.full((3, 4), 3, np.float32))
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros((16, 4), np.float32))


def test_bad_shapes_and_dtypes_are_refused_with_the_shapes():
    with pytest.raises(dg.ShapeError, match=r"weight_hh \(12, 4\)"):
        lstm_layer(dg.zeros(2, 3, 16), dg.zeros(3, 4), dg.zeros(3, 4), dg.zeros(12, 4))
    with pytest.raises(TypeError, match="one float dtype"):
        lstm_layer(dg.zeros(2, 3, 16), dg.zeros(3, 4, dtype=dg.float64), dg.zeros(3, 4),
                   dg.zeros(16, 4))


def test_unbatched_and_float16_autocast_inputs_run_as_torch():
    ref, ours = _pair(input_size=3, hidden_size=8)
    x = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    want, (wh, wc) = ref(torch.tensor(x))
    got, (gh, gc) = ours(dg.tensor(x))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **TOL)
    np.testing.assert_allclose(gc.detach().numpy(), wc.detach().numpy(), **TOL)
    layer = lstm_layer(dg.zeros(4, 2, 32, dtype=dg.float16), dg.zeros(2, 8, dtype=dg.float16),
                       dg.zeros(2, 8, dtype=dg.float16), dg.zeros(32, 8, dtype=dg.float16))
    assert [t.dtype for t in layer] == [dg.float16] * 3


@pytest.mark.parametrize("hidden,batch,reverse", [(128, 32, False), (48, 29, True)])
def test_steps_in_one_compiled_loop_equal_the_step_calls(hidden, batch, reverse, monkeypatch):
    """Where the product is packed on one thread the layer runs its steps in one compiled
    loop each way (``kernels/recurrence.py``): the same bits as the steps called one by
    one (the path of every other shape), outputs and all five gradients."""
    from dualgraph.ops import recurrent_layer as rl
    rng = np.random.default_rng(2)
    f32 = np.float32
    w = (rng.standard_normal((4 * hidden, hidden)) * 0.3).astype(f32)
    b, xg = (rng.standard_normal(s).astype(f32) for s in (4 * hidden, (6, batch, 4 * hidden)))
    h0, c0, gh, gc = (rng.standard_normal((batch, hidden)).astype(f32) for _ in range(4))
    gy = rng.standard_normal((6, batch, hidden)).astype(f32)

    def both():
        fw = rl.LSTM_LAYER.kernel(xg, h0, c0, w, b, reverse=reverse)
        return fw + rl.LSTM_LAYER_BACKWARD.kernel(gy, gh, gc, xg, h0, c0, w, b, fw[0], fw[4],
                                                  fw[3], need=(True,) * 5, reverse=reverse)
    looped = both()
    monkeypatch.setattr(rl._Products, "one_thread", lambda self: None)
    for got, want in zip(looped, both()):
        np.testing.assert_array_equal(got, want)
