"""RNN, LSTM, GRU and their cells against torch with identical weights: outputs, final
states, gradients of the inputs, initial states and every parameter; names, repr, init."""
import math

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.nn.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401 (by name)
from torch_compare import TOL, check, load_from_torch, randn



def _pair(name, *args, **kwargs):
    """The torch module (float64) and ours with its weights, loaded by state_dict name."""
    ref = getattr(torch.nn, name)(*args, **kwargs).double()
    ours = globals()[name](*args, **kwargs, dtype=dg.float64)
    return ref, load_from_torch(ours, ref)


def _randn(*shape, seed=1):
    return randn(*shape, seed=seed + len(shape))


# -- full sequences -------------------------------------------------------------------------
SEQ, BATCH, IN, HID = 5, 3, 4, 6

CONFIGS = [
    dict(),
    dict(bidirectional=True),
    dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(bias=False, batch_first=True),
]


def _input(cfg, batched=True):
    if not batched:
        return _randn(SEQ, IN)
    return _randn(BATCH, SEQ, IN) if cfg.get("batch_first") else _randn(SEQ, BATCH, IN)


def _state(cfg, size=HID, batched=True, seed=2):
    layers = cfg.get("num_layers", 1) * (2 if cfg.get("bidirectional") else 1)
    shape = (layers, BATCH, size) if batched else (layers, size)
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
@pytest.mark.parametrize("name,extra", [("RNN", {}), ("RNN", {"nonlinearity": "relu"}),
                                        ("GRU", {})])
def test_rnn_gru_match_torch(name, extra, cfg):
    """With initial states (zero states: see the unbatched and float32 tests)."""
    ref, ours = _pair(name, IN, HID, **cfg, **extra)
    check(ref, ours, [_input(cfg), _state(cfg)], lambda m, x, h: m(x, h))


@pytest.mark.parametrize("cfg", CONFIGS + [dict(proj_size=3, num_layers=2, bidirectional=True)],
                         ids=str)
def test_lstm_matches_torch(cfg):
    ref, ours = _pair("LSTM", IN, HID, **cfg)
    h0 = _state(cfg, cfg.get("proj_size") or HID)
    check(ref, ours, [_input(cfg), h0, _state(cfg, seed=3)], lambda m, x, h, c: m(x, (h, c)))


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("cfg", [dict(), dict(num_layers=2, bidirectional=True,
                                              batch_first=True)], ids=str)
def test_unbatched_input(name, cfg):
    x = _input(cfg, batched=False)
    ref, ours = _pair(name, IN, HID, **cfg)
    check(ref, ours, [x], lambda m, x: m(x))
    ref, ours = _pair(name, IN, HID, **cfg)
    states = [_state(cfg, batched=False, seed=s) for s in (2, 3)[:2 if name == "LSTM" else 1]]
    if name == "LSTM":
        check(ref, ours, [x] + states, lambda m, x, h, c: m(x, (h, c)))
    else:
        check(ref, ours, [x] + states, lambda m, x, h: m(x, h))


def test_float32_default_dtype():
    ref = torch.nn.LSTM(IN, HID, num_layers=2, bidirectional=True)
    ours = LSTM(IN, HID, num_layers=2, bidirectional=True)
    ours.load_state_dict({k: dg.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    x = _randn(SEQ, BATCH, IN).astype(np.float32)
    out, (h, c) = ours(dg.tensor(x))
    t_out, (t_h, t_c) = ref(torch.tensor(x))
    assert out.dtype == dg.float32
    for d, t in ((out, t_out), (h, t_h), (c, t_c)):
        np.testing.assert_allclose(d.detach().numpy(), t.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


# -- cells ------------------------------------------------------------------------------------
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("name,kwargs", [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}),
                                         ("GRUCell", {}), ("GRUCell", {"bias": False}),
                                         ("LSTMCell", {}), ("LSTMCell", {"bias": False})])
def test_cells_match_torch(name, kwargs, batched):
    lead = (BATCH,) if batched else ()
    x = _randn(*lead, IN)
    ref, ours = _pair(name, IN, HID, **kwargs)
    check(ref, ours, [x], lambda m, x: m(x))
    ref, ours = _pair(name, IN, HID, **kwargs)
    h, c = _randn(*lead, HID, seed=5), _randn(*lead, HID, seed=7)
    if name == "LSTMCell":
        check(ref, ours, [x, h, c], lambda m, x, h, c: m(x, (h, c)))
    else:
        check(ref, ours, [x, h], lambda m, x, h: m(x, h))


def test_cell_unrolled_equals_layer():
    """A cell stepped by hand over a sequence gives the layer's output (same weights)."""
    layer = GRU(IN, HID, dtype=dg.float64)
    cell = GRUCell(IN, HID, dtype=dg.float64)
    cell.load_state_dict({k[:-3]: v for k, v in layer.state_dict().items()})
    x = dg.tensor(_randn(SEQ, BATCH, IN))
    out, h_n = layer(x)
    h = None
    for t in range(SEQ):
        h = cell(x[t], h)
        np.testing.assert_allclose(h.detach().numpy(), out[t].detach().numpy(), **TOL)
    np.testing.assert_allclose(h.detach().numpy(), h_n[0].detach().numpy(), **TOL)


# -- structure: names, repr, init -------------------------------------------------------------
@pytest.mark.parametrize("name,kwargs", [
    ("RNN", dict(num_layers=2, nonlinearity="relu", bias=False, batch_first=True,
                 dropout=0.5, bidirectional=True)),
    ("LSTM", dict(proj_size=2, num_layers=3)),
    ("GRU", dict(bidirectional=True)),
    ("RNNCell", dict(bias=False, nonlinearity="relu")),
    ("LSTMCell", {}),
    ("GRUCell", dict(bias=False)),
])
def test_names_shapes_and_repr_match_torch(name, kwargs):
    ref = getattr(torch.nn, name)(IN, HID, **kwargs)
    ours = globals()[name](IN, HID, **kwargs)
    assert repr(ours) == repr(ref)
    assert [(k, tuple(p.shape)) for k, p in ours.named_parameters()] == \
        [(k, tuple(p.shape)) for k, p in ref.named_parameters()]
    bound = 1 / math.sqrt(HID)
    for p in ours.parameters():
        assert p.dtype == dg.float32 and p.requires_grad
        values = p.detach().numpy()
        assert np.abs(values).max() <= bound and values.std() > bound / 4


def test_all_weights_and_reassigned_parameter():
    lstm = LSTM(IN, HID, bidirectional=True)
    assert [len(ws) for ws in lstm.all_weights] == [4, 4]
    assert lstm.all_weights[1][0] is lstm.weight_ih_l0_reverse
    x = dg.randn(SEQ, BATCH, IN)
    before = lstm(x)[0].detach().numpy()
    lstm.bias_hh_l0 = dg.nn.Parameter(lstm.bias_hh_l0.detach() + 1)
    assert not np.allclose(lstm(x)[0].detach().numpy(), before)


def test_dropout_between_layers():
    gru = GRU(IN, HID, num_layers=2, dropout=0.5)
    x = dg.randn(SEQ, BATCH, IN)
    gru.eval()
    np.testing.assert_array_equal(gru(x)[0].detach().numpy(), gru(x)[0].detach().numpy())
    if not hasattr(dg.nn.functional, "dropout"):
        pytest.skip("nn.functional.dropout is not there yet")
    gru.train()
    assert not np.array_equal(gru(x)[0].detach().numpy(), gru(x)[0].detach().numpy())


def test_compiled_lstm_equals_eager():
    lstm = LSTM(IN, HID, num_layers=2, bidirectional=True, batch_first=True)
    x = dg.randn(BATCH, SEQ, IN)
    out, (h, c) = dg.compile(lstm)(x)
    e_out, (e_h, e_c) = lstm(x)
    for a, b in ((out, e_out), (h, e_h), (c, e_c)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)


# -- errors ------------------------------------------------------------------------------------
def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="nonlinearity"):
        RNN(IN, HID, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="dropout"):
        LSTM(IN, HID, dropout=1.5)
    with pytest.raises(ValueError, match="proj_size"):
        LSTM(IN, HID, proj_size=HID)
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        GRU(IN, HID, dropout=0.2)
    lstm = LSTM(IN, HID)
    with pytest.raises(RuntimeError, match="input_size"):
        lstm(dg.randn(SEQ, BATCH, IN + 1))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[1\] size \(1, 3, 6\)"):
        lstm(dg.randn(SEQ, BATCH, IN), (dg.zeros(1, BATCH, HID), dg.zeros(2, BATCH, HID)))
    with pytest.raises(RuntimeError, match="hx should also be 3-D"):
        GRU(IN, HID)(dg.randn(SEQ, BATCH, IN), dg.zeros(1, HID))
    with pytest.raises(ValueError, match="does not match weight dtype"):
        lstm(dg.randn(SEQ, BATCH, IN, dtype=dg.float64))
    with pytest.raises(ValueError, match="Expected input to be 1D or 2D"):
        LSTMCell(IN, HID)(dg.randn(1, 2, IN))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "object"])
def test_unneeded_gradients_are_read_only_zeros_of_no_memory(dtype):
    """What a fused cell's backward returns for a gradient nobody needs (``need``)."""
    from dualgraph.ops._util import zeros_view
    for shape in [(5, 3), (7,), (), (2, 0, 4)]:
        z = zeros_view(shape, np.dtype(dtype))
        assert z.shape == shape and z.dtype == np.dtype(dtype)
        assert not z.flags.writeable and all(s == 0 for s in z.strides)
        assert not z.any()
        with pytest.raises(ValueError):
            z[...] = 1
