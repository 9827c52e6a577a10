"""Smoke test of every public name in API.md (STYLE principle 10): each is importable and
does one tiny thing whose value is asserted. The thorough tests live elsewhere; this file
is the quick answer to "does the advertised surface exist and work at all?".

A name API.md promises that is not built yet gets an ``xfail(strict=True)`` test, so the
gap shows in every run and the marker must go when the feature lands (none at present).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F



def values(t):
    return np.asarray(t.detach().numpy() if isinstance(t, dg.Tensor) else t).tolist()


# -- tensors -------------------------------------------------------------------------------

def test_tensor_and_from_numpy():
    t = dg.tensor([[1, 2], [3, 4]], dtype=dg.float32, requires_grad=True)
    assert isinstance(t, dg.Tensor) and t.requires_grad and t.dtype == dg.float32
    a = np.arange(3, dtype=np.int64)
    assert values(dg.from_numpy(a)) == [0, 1, 2]


CREATION = [
    (lambda: dg.zeros(2, 3), (2, 3), 0.0),
    (lambda: dg.ones(2), (2,), 2.0),
    (lambda: dg.full((2, 2), 1.5), (2, 2), 6.0),
    (lambda: dg.empty(4).fill_(1), (4,), 4.0),
    (lambda: dg.arange(5), (5,), 10),
    (lambda: dg.linspace(0, 1, 5), (5,), 2.5),
    (lambda: dg.eye(3), (3, 3), 3.0),
    (lambda: dg.zeros_like(dg.ones(2, 2)), (2, 2), 0.0),
    (lambda: dg.ones_like(dg.zeros(3)), (3,), 3.0),
]


@pytest.mark.parametrize("make,shape,total", CREATION)
def test_creation(make, shape, total):
    t = make()
    assert tuple(t.shape) == shape
    assert math.isclose(float(t.sum()), total)


def test_random_creation_and_manual_seed():
    dg.manual_seed(0)
    a = (dg.rand(3), dg.randn(3), dg.randint(0, 10, (3,)))
    dg.manual_seed(0)
    b = (dg.rand(3), dg.randn(3), dg.randint(0, 10, (3,)))
    for x, y in zip(a, b):
        assert values(x) == values(y)
    assert 0 <= float(a[0].min()) and float(a[0].max()) < 1
    assert a[2].dtype == dg.int64


@pytest.mark.parametrize("name,itemsize", [
    ("float32", 4), ("float64", 8), ("float16", 2), ("bfloat16", 2), ("int32", 4),
    ("int64", 8), ("bool", 1)])
def test_dtypes(name, itemsize):
    dtype = getattr(dg, name)
    t = dg.zeros(2, dtype=dtype)
    assert t.dtype == dtype
    assert t.numpy().itemsize == itemsize


def test_tensor_accessors():
    t = dg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert isinstance(t.numpy(), np.ndarray)
    assert t[1, 0].item() == 3.0
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert tuple(t.shape) == (2, 2) and t.ndim == 2 and t.size() == (2, 2) and t.size(1) == 2
    assert t.dtype == dg.float32


def test_tensor_autograd_attributes():
    x = dg.tensor([1.0, 2.0]).requires_grad_()
    x.register_hook(lambda g: g * 10)
    y = (x * x).sum()
    assert y.grad_fn is not None and x.grad_fn is None
    y.backward()
    assert values(x.grad) == [20.0, 40.0]
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None


def test_tensor_conversions():
    t = dg.tensor([1.7, -2.2], dtype=dg.float64)
    assert t.to(dg.float32).dtype == dg.float32
    assert t.float().dtype == dg.float32
    assert values(t.long()) == [1, -2]


def test_operators_indexing_and_slicing():
    a = dg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert values(a + 1 - a * 2 / 2) == [[1.0] * 3] * 2
    assert values(a[:, 1:]) == [[2.0, 3.0], [5.0, 6.0]]
    assert values(a[a > 4]) == [5.0, 6.0]
    assert values(a @ dg.ones(3)) == [6.0, 15.0]
    assert values(-a[0] ** 2) == [-1.0, -4.0, -9.0]


def test_view_and_shape_methods():
    a = dg.arange(6)
    assert tuple(a.reshape(2, 3).shape) == (2, 3)
    assert tuple(a.view(3, 2).shape) == (3, 2)
    b = a.reshape(1, 2, 3)
    assert tuple(b.permute(2, 0, 1).shape) == (3, 1, 2)
    assert tuple(b.transpose(1, 2).shape) == (1, 3, 2)
    assert tuple(a.unsqueeze(0).shape) == (1, 6)
    assert tuple(b.squeeze(0).shape) == (2, 3)
    assert tuple(b.flatten().shape) == (6,)
    assert tuple(dg.ones(1, 3).expand(4, 3).shape) == (4, 3)


def test_reductions_and_inplace_methods():
    a = dg.tensor([[1.0, 5.0], [3.0, 2.0]])
    assert float(a.sum()) == 11.0 and values(a.mean(0)) == [2.0, 3.5]
    assert values(a.max(dim=1).values) == [5.0, 3.0] and values(a.argmin(1)) == [0, 1]
    b = a.clone()
    assert b.mul_(2).add_(1) is b
    assert values(b) == [[3.0, 11.0], [7.0, 5.0]]


def test_namespace_functions():
    a = dg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert values(dg.matmul(a, dg.eye(2))) == values(a)
    assert tuple(dg.cat([a, a]).shape) == (4, 2) and tuple(dg.stack([a, a]).shape) == (2, 2, 2)
    assert values(dg.where(a > 2, a, 0)) == [[0, 0], [3, 4]]
    assert math.isclose(float(dg.log(dg.exp(a)).sum()), 10.0, rel_tol=1e-6)
    assert float(dg.tanh(dg.zeros(1))) == 0.0 and float(dg.sigmoid(dg.zeros(1))) == 0.5
    assert np.allclose(values(dg.softmax(a, dim=1).sum(1)), [1.0, 1.0])
    assert values(dg.einsum("ij->j", a)) == [4.0, 6.0]
    assert values(dg.gather(a, 1, dg.tensor([[1], [0]]))) == [[2.0], [3.0]]
    assert values(dg.clamp(a, 2, 3)) == [[2, 2], [3, 3]]
    assert int(dg.argmax(a)) == 3


def test_grad_modes_and_autograd_grad():
    x = dg.tensor(3.0, requires_grad=True)
    with dg.no_grad():
        assert not (x * 2).requires_grad
        with dg.enable_grad():
            assert (x * 2).requires_grad
    (g,) = dg.autograd.grad(x ** 3, (x,), create_graph=True)
    assert float(g) == 27.0
    (gg,) = dg.autograd.grad(g, x)
    assert float(gg) == 18.0


@pytest.mark.filterwarnings("ignore:invalid value")
def test_detect_anomaly_names_the_op():
    x = dg.tensor([-1.0], requires_grad=True)
    with pytest.raises(FloatingPointError, match="sqrt"), dg.autograd.detect_anomaly():
        dg.sqrt(x)


# -- training library ----------------------------------------------------------------------

class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
        self.register_buffer("steps", dg.zeros(()))

    def forward(self, x):
        return self.fc(x)


def test_module_api():
    m = Tiny()
    assert [n for n, _ in m.named_parameters()] == ["fc.weight", "fc.bias"]
    assert len(list(m.parameters())) == 2 and len(list(m.buffers())) == 1
    state = m.state_dict()
    assert set(state) == {"fc.weight", "fc.bias", "steps"}
    other = Tiny()
    other.load_state_dict(state)
    assert values(other.fc.weight) == values(m.fc.weight)
    assert not m.eval().training and m.train().training
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "Tiny"]
    assert m.to(dg.float64).fc.weight.dtype == dg.float64


def test_parameter():
    p = nn.Parameter(dg.ones(2))
    assert p.requires_grad and isinstance(p, dg.Tensor)


# every exported Module class: (constructor, input shapes, output shape)
LAYERS = {
    "AdaptiveAvgPool1d": (lambda: nn.AdaptiveAvgPool1d(2), [(1, 2, 6)], (1, 2, 2)),
    "AdaptiveAvgPool2d": (lambda: nn.AdaptiveAvgPool2d(2), [(1, 2, 4, 4)], (1, 2, 2, 2)),
    "AdaptiveAvgPool3d": (lambda: nn.AdaptiveAvgPool3d(2), [(1, 2, 4, 4, 3)], (1, 2, 2, 2, 2)),
    "MaxPool3d": (lambda: nn.MaxPool3d(2), [(1, 2, 4, 4, 4)], (1, 2, 2, 2, 2)),
    "AvgPool3d": (lambda: nn.AvgPool3d(2), [(1, 2, 4, 4, 4)], (1, 2, 2, 2, 2)),
    "Conv3d": (lambda: nn.Conv3d(2, 3, 3, padding=1), [(1, 2, 4, 4, 4)], (1, 3, 4, 4, 4)),
    "Unfold": (lambda: nn.Unfold(2), [(1, 2, 4, 4)], (1, 8, 9)),
    "Fold": (lambda: nn.Fold((4, 4), 2), [(1, 8, 9)], (1, 2, 4, 4)),
    "AvgPool1d": (lambda: nn.AvgPool1d(2), [(1, 2, 6)], (1, 2, 3)),
    "AvgPool2d": (lambda: nn.AvgPool2d(2), [(1, 2, 4, 4)], (1, 2, 2, 2)),
    "MaxPool1d": (lambda: nn.MaxPool1d(2), [(1, 2, 6)], (1, 2, 3)),
    "MaxPool2d": (lambda: nn.MaxPool2d(2), [(1, 2, 4, 4)], (1, 2, 2, 2)),
    "BatchNorm1d": (lambda: nn.BatchNorm1d(3), [(4, 3)], (4, 3)),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), [(2, 3, 2, 2)], (2, 3, 2, 2)),
    "BatchNorm3d": (lambda: nn.BatchNorm3d(3), [(2, 3, 2, 2, 2)], (2, 3, 2, 2, 2)),
    "InstanceNorm1d": (lambda: nn.InstanceNorm1d(3), [(2, 3, 4)], (2, 3, 4)),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(3), [(2, 3, 2, 2)], (2, 3, 2, 2)),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), [(2, 4, 3)], (2, 4, 3)),
    "LayerNorm": (lambda: nn.LayerNorm(4), [(2, 4)], (2, 4)),
    "RMSNorm": (lambda: nn.RMSNorm(4), [(2, 4)], (2, 4)),
    "Linear": (lambda: nn.Linear(3, 2), [(4, 3)], (4, 2)),
    "Bilinear": (lambda: nn.Bilinear(3, 2, 5), [(4, 3), (4, 2)], (4, 5)),
    "Identity": (lambda: nn.Identity(), [(2, 3)], (2, 3)),
    "Flatten": (lambda: nn.Flatten(), [(2, 3, 4)], (2, 12)),
    "Unflatten": (lambda: nn.Unflatten(1, (2, 2)), [(3, 4)], (3, 2, 2)),
    "Conv1d": (lambda: nn.Conv1d(2, 3, 3), [(1, 2, 5)], (1, 3, 3)),
    "Conv2d": (lambda: nn.Conv2d(2, 3, 3, padding=1), [(1, 2, 4, 4)], (1, 3, 4, 4)),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(2, 3, 3), [(1, 2, 5)], (1, 3, 7)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(2, 3, 2, stride=2), [(1, 2, 3, 3)],
                        (1, 3, 6, 6)),
    "Dropout": (lambda: nn.Dropout(0.5).eval(), [(2, 3)], (2, 3)),
    "Dropout1d": (lambda: nn.Dropout1d(0.5), [(2, 3, 4)], (2, 3, 4)),
    "Dropout2d": (lambda: nn.Dropout2d(0.5), [(2, 3, 2, 2)], (2, 3, 2, 2)),
    "Embedding": (lambda: nn.Embedding(10, 3), [(2, 5, "int")], (2, 5, 3)),
    "RNN": (lambda: nn.RNN(3, 4), [(5, 2, 3)], (5, 2, 4)),
    "LSTM": (lambda: nn.LSTM(3, 4, batch_first=True), [(2, 5, 3)], (2, 5, 4)),
    "GRU": (lambda: nn.GRU(3, 4, bidirectional=True), [(5, 2, 3)], (5, 2, 8)),
    "RNNCell": (lambda: nn.RNNCell(3, 4), [(2, 3)], (2, 4)),
    "LSTMCell": (lambda: nn.LSTMCell(3, 4), [(2, 3)], (2, 4)),
    "GRUCell": (lambda: nn.GRUCell(3, 4), [(2, 3)], (2, 4)),
    "MultiheadAttention": (lambda: nn.MultiheadAttention(4, 2), [(3, 2, 4)] * 3, (3, 2, 4)),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(4, 2, 8), [(3, 2, 4)],
                                (3, 2, 4)),
    "TransformerDecoderLayer": (lambda: nn.TransformerDecoderLayer(4, 2, 8),
                                [(3, 2, 4), (5, 2, 4)], (3, 2, 4)),
    "TransformerEncoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8),
                                                         2), [(3, 2, 4)], (3, 2, 4)),
    "TransformerDecoder": (lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(4, 2, 8),
                                                         2), [(3, 2, 4), (5, 2, 4)], (3, 2, 4)),
    "Transformer": (lambda: nn.Transformer(4, 2, 1, 1, 8), [(5, 2, 4), (3, 2, 4)], (3, 2, 4)),
    "Sequential": (lambda: nn.Sequential(nn.Linear(3, 2), nn.ReLU()), [(4, 3)], (4, 2)),
    "Threshold": (lambda: nn.Threshold(0.1, 20.0), [(2, 3)], (2, 3)),
    "PReLU": (lambda: nn.PReLU(), [(2, 3)], (2, 3)),
    "GLU": (lambda: nn.GLU(), [(2, 4)], (2, 2)),
    "Softmax": (lambda: nn.Softmax(dim=1), [(2, 3)], (2, 3)),
    "LogSoftmax": (lambda: nn.LogSoftmax(dim=1), [(2, 3)], (2, 3)),
    "Softmin": (lambda: nn.Softmin(dim=1), [(2, 3)], (2, 3)),
}
ACTIVATIONS = ["CELU", "ELU", "GELU", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU",
               "LogSigmoid", "Mish", "ReLU", "ReLU6", "SELU", "SiLU", "Sigmoid", "Softplus",
               "Softsign", "Tanh", "Tanhshrink"]
for _name in ACTIVATIONS:
    LAYERS[_name] = (getattr(nn, _name), [(2, 3)], (2, 3))
LOSSES = ["BCELoss", "BCEWithLogitsLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss",
          "SmoothL1Loss"]
for _name in LOSSES:
    LAYERS[_name] = (getattr(nn, _name), [(2, 3, "prob"), (2, 3, "prob")], ())
LAYERS["CrossEntropyLoss"] = (nn.CrossEntropyLoss, [(4, 3), (4, "int")], ())
LAYERS["NLLLoss"] = (nn.NLLLoss, [(4, 3), (4, "int")], ())
LAYERS.update({
    "AdaptiveMaxPool1d": (lambda: nn.AdaptiveMaxPool1d(3), [(1, 2, 7)], (1, 2, 3)),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d((1, 2)), [(1, 2, 4, 4)], (1, 2, 1, 2)),
    "Upsample": (lambda: nn.Upsample(scale_factor=2), [(1, 2, 3, 3)], (1, 2, 6, 6)),
    "UpsamplingNearest2d": (lambda: nn.UpsamplingNearest2d(size=4), [(1, 2, 3, 3)],
                            (1, 2, 4, 4)),
    "UpsamplingBilinear2d": (lambda: nn.UpsamplingBilinear2d(scale_factor=2), [(1, 2, 3, 3)],
                             (1, 2, 6, 6)),
    "PixelShuffle": (lambda: nn.PixelShuffle(2), [(1, 8, 3, 3)], (1, 2, 6, 6)),
    "PixelUnshuffle": (lambda: nn.PixelUnshuffle(2), [(1, 2, 4, 4)], (1, 8, 2, 2)),
    "ReflectionPad1d": (lambda: nn.ReflectionPad1d(1), [(1, 2, 3)], (1, 2, 5)),
    "ReflectionPad2d": (lambda: nn.ReflectionPad2d(1), [(1, 2, 3, 3)], (1, 2, 5, 5)),
    "ReplicationPad1d": (lambda: nn.ReplicationPad1d(2), [(1, 2, 3)], (1, 2, 7)),
    "ReplicationPad2d": (lambda: nn.ReplicationPad2d((1, 0, 0, 1)), [(1, 2, 3, 3)],
                         (1, 2, 4, 4)),
    "ConstantPad1d": (lambda: nn.ConstantPad1d(1, 0.5), [(1, 2, 3)], (1, 2, 5)),
    "ConstantPad2d": (lambda: nn.ConstantPad2d(1, 0.5), [(1, 2, 3, 3)], (1, 2, 5, 5)),
    "ZeroPad1d": (lambda: nn.ZeroPad1d(1), [(1, 2, 3)], (1, 2, 5)),
    "ZeroPad2d": (lambda: nn.ZeroPad2d(1), [(1, 2, 3, 3)], (1, 2, 5, 5)),
    "PairwiseDistance": (nn.PairwiseDistance, [(4, 3), (4, 3)], (4,)),
    "CosineSimilarity": (nn.CosineSimilarity, [(4, 3), (4, 3)], (4,)),
    "TripletMarginLoss": (nn.TripletMarginLoss, [(4, 3), (4, 3), (4, 3)], ()),
    "CosineEmbeddingLoss": (nn.CosineEmbeddingLoss, [(4, 3), (4, 3), (4,)], ()),
    "MarginRankingLoss": (nn.MarginRankingLoss, [(4,), (4,), (4,)], ()),
})
# containers and bases, smoke-tested below rather than called on an input
LAYERS.update({   # the less common layers and losses (tests/test_nn_more_layers.py)
    "EmbeddingBag": (lambda: nn.EmbeddingBag(10, 3), [(2, 5, "int")], (2, 3)),
    "LocalResponseNorm": (lambda: nn.LocalResponseNorm(3), [(1, 4, 3, 3)], (1, 4, 3, 3)),
    "ChannelShuffle": (lambda: nn.ChannelShuffle(2), [(1, 4, 3, 3)], (1, 4, 3, 3)),
    "LPPool1d": (lambda: nn.LPPool1d(2, 2), [(1, 2, 6)], (1, 2, 3)),
    "LPPool2d": (lambda: nn.LPPool2d(2, 2), [(1, 2, 4, 4)], (1, 2, 2, 2)),
    "MaxUnpool1d": (lambda: nn.MaxUnpool1d(2), [(1, 2, 3), (1, 2, 3, "int")], (1, 2, 6)),
    "MaxUnpool2d": (lambda: nn.MaxUnpool2d(2), [(1, 2, 2, 2), (1, 2, 2, 2, "int")],
                    (1, 2, 4, 4)),
    "Hardshrink": (nn.Hardshrink, [(2, 3)], (2, 3)),
    "Softshrink": (nn.Softshrink, [(2, 3)], (2, 3)),
    "RReLU": (nn.RReLU, [(2, 3)], (2, 3)),
    "Softmax2d": (nn.Softmax2d, [(1, 2, 3, 3)], (1, 2, 3, 3)),
    "Dropout3d": (nn.Dropout3d, [(1, 2, 2, 2, 2)], (1, 2, 2, 2, 2)),
    "AlphaDropout": (nn.AlphaDropout, [(2, 3)], (2, 3)),
    "FeatureAlphaDropout": (nn.FeatureAlphaDropout, [(2, 3, 2)], (2, 3, 2)),
    "InstanceNorm3d": (lambda: nn.InstanceNorm3d(2), [(1, 2, 2, 3, 3)], (1, 2, 2, 3, 3)),
    "ReflectionPad3d": (lambda: nn.ReflectionPad3d(1), [(1, 1, 2, 3, 3)], (1, 1, 4, 5, 5)),
    "ReplicationPad3d": (lambda: nn.ReplicationPad3d(1), [(1, 1, 2, 3, 3)], (1, 1, 4, 5, 5)),
    "ConstantPad3d": (lambda: nn.ConstantPad3d(1, 0.5), [(1, 1, 2, 3, 3)], (1, 1, 4, 5, 5)),
    "ZeroPad3d": (lambda: nn.ZeroPad3d(1), [(1, 1, 2, 3, 3)], (1, 1, 4, 5, 5)),
    "CircularPad1d": (lambda: nn.CircularPad1d(1), [(1, 2, 3)], (1, 2, 5)),
    "CircularPad2d": (lambda: nn.CircularPad2d(1), [(1, 2, 3, 3)], (1, 2, 5, 5)),
    "CircularPad3d": (lambda: nn.CircularPad3d(1), [(1, 1, 2, 3, 3)], (1, 1, 4, 5, 5)),
    "SoftMarginLoss": (nn.SoftMarginLoss, [(4, 3), (4, 3)], ()),
    "MultiLabelSoftMarginLoss": (nn.MultiLabelSoftMarginLoss, [(4, 3), (4, 3, "prob")], ()),
    "MultiMarginLoss": (nn.MultiMarginLoss, [(4, 3), (4, "int")], ()),
    "MultiLabelMarginLoss": (nn.MultiLabelMarginLoss, [(4, 3), (4, 3, "int")], ()),
    "HingeEmbeddingLoss": (nn.HingeEmbeddingLoss, [(4, 3), (4, 3)], ()),
    "GaussianNLLLoss": (nn.GaussianNLLLoss, [(4, 3), (4, 3), (4, 3, "prob")], ()),
    "PoissonNLLLoss": (nn.PoissonNLLLoss, [(4, 3), (4, 3, "prob")], ()),
    "TripletMarginWithDistanceLoss": (nn.TripletMarginWithDistanceLoss,
                                      [(4, 3), (4, 3), (4, 3)], ()),
    "CTCLoss": (lambda: _OnFixedTargets(nn.CTCLoss()), [(6, 2, 4)], ()),
    # the lazy layers: the input size from the first call
    "LazyLinear": (lambda: nn.LazyLinear(3), [(2, 5)], (2, 3)),
    "LazyConv1d": (lambda: nn.LazyConv1d(3, 2), [(1, 2, 5)], (1, 3, 4)),
    "LazyConv2d": (lambda: nn.LazyConv2d(3, 3, padding=1), [(1, 2, 4, 4)], (1, 3, 4, 4)),
    "LazyConv3d": (lambda: nn.LazyConv3d(3, 1), [(1, 2, 2, 2, 2)], (1, 3, 2, 2, 2)),
    "LazyConvTranspose1d": (lambda: nn.LazyConvTranspose1d(3, 3), [(1, 2, 5)], (1, 3, 7)),
    "LazyConvTranspose2d": (lambda: nn.LazyConvTranspose2d(3, 2, stride=2), [(1, 2, 3, 3)],
                            (1, 3, 6, 6)),
    "LazyBatchNorm1d": (nn.LazyBatchNorm1d, [(4, 3)], (4, 3)),
    "LazyBatchNorm2d": (nn.LazyBatchNorm2d, [(2, 3, 2, 2)], (2, 3, 2, 2)),
    "LazyBatchNorm3d": (nn.LazyBatchNorm3d, [(2, 3, 2, 2, 2)], (2, 3, 2, 2, 2)),
    "LazyInstanceNorm1d": (nn.LazyInstanceNorm1d, [(2, 3, 4)], (2, 3, 4)),
    "LazyInstanceNorm2d": (nn.LazyInstanceNorm2d, [(2, 3, 2, 3)], (2, 3, 2, 3)),
    "LazyInstanceNorm3d": (nn.LazyInstanceNorm3d, [(1, 2, 2, 3, 3)], (1, 2, 2, 3, 3)),
    # 3-D pooling and transposed convs, torch's older and single-process names
    "ConvTranspose3d": (lambda: nn.ConvTranspose3d(2, 3, 2, stride=2), [(1, 2, 2, 3, 2)],
                        (1, 3, 4, 6, 4)),
    "LazyConvTranspose3d": (lambda: nn.LazyConvTranspose3d(3, 2), [(1, 2, 2, 3, 2)],
                            (1, 3, 3, 4, 3)),
    "AdaptiveMaxPool3d": (lambda: nn.AdaptiveMaxPool3d((1, 2, 2)), [(1, 2, 3, 4, 4)],
                          (1, 2, 1, 2, 2)),
    "LPPool3d": (lambda: nn.LPPool3d(2, 2), [(1, 2, 4, 4, 4)], (1, 2, 2, 2, 2)),
    "MaxUnpool3d": (lambda: nn.MaxUnpool3d(2), [(1, 2, 2, 2, 2), (1, 2, 2, 2, 2, "int")],
                    (1, 2, 4, 4, 4)),
    "NLLLoss2d": (nn.NLLLoss2d, [(2, 3, 2, 2), (2, 2, 2, "int")], ()),
    "SyncBatchNorm": (lambda: nn.SyncBatchNorm(3), [(2, 3, 2, 2)], (2, 3, 2, 2)),
    "DataParallel": (lambda: nn.DataParallel(nn.Linear(4, 2)), [(3, 4)], (3, 2)),
    "AdaptiveLogSoftmaxWithLoss": (lambda: nn.AdaptiveLogSoftmaxWithLoss(4, 6, [2, 4]),
                                   [(3, 4), (3, "int")], (3,)),
})
NOT_LAYERS = {"Module", "ModuleDict", "ModuleList", "ParameterDict", "ParameterList",
              "RNNBase", "RNNCellBase"}


class _OnFixedTargets(nn.Module):
    """A CTC loss of the log-softmax of its one input (T, N, C) at fixed targets."""

    def __init__(self, loss):
        super().__init__()
        self.loss = loss

    def forward(self, x):
        targets = dg.tensor([[1, 2, 2], [3, 1, 0]])
        return self.loss(x.log_softmax(2), targets, [6, 5], [3, 2])


def _input(spec):
    *shape, kind = spec if isinstance(spec[-1], str) else (*spec, "float")
    if kind == "int":
        return dg.randint(0, 3, tuple(shape))
    x = dg.rand(*shape)
    return x if kind == "prob" else x * 4 - 2


def test_every_module_class_has_a_smoke_test():
    exported = {n for n in dir(nn) if isinstance(getattr(nn, n), type)
                and issubclass(getattr(nn, n), nn.Module)}
    assert exported - NOT_LAYERS == set(LAYERS)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer(name):
    make, inputs, out_shape = LAYERS[name]
    dg.manual_seed(0)
    out = make()(*[_input(spec) for spec in inputs])
    if isinstance(out, tuple):   # RNNs and attention return (output, state or weights)
        out = out[0]
    assert tuple(out.shape) == out_shape
    assert np.isfinite(out.detach().numpy()).all()


def test_containers():
    seq = nn.ModuleList([nn.Linear(2, 2)])
    seq.append(nn.ReLU())
    named = nn.ModuleDict({"a": nn.Tanh()})
    params = nn.ParameterList([nn.Parameter(dg.ones(1))])
    pdict = nn.ParameterDict({"w": nn.Parameter(dg.zeros(2))})
    assert (len(seq), list(named), len(params), list(pdict)) == (2, ["a"], 1, ["w"])
    assert issubclass(nn.LSTM, nn.RNNBase) and issubclass(nn.GRUCell, nn.RNNCellBase)


def test_functional():
    x = dg.tensor([[-1.0, 0.0, 2.0]])
    assert values(F.relu(x)) == [[0.0, 0.0, 2.0]]
    assert math.isclose(float(F.cross_entropy(dg.zeros(1, 4), dg.tensor([2]))), math.log(4),
                        rel_tol=1e-6)
    assert values(F.one_hot(dg.tensor([1]), 3)) == [[0, 1, 0]]
    assert float(F.mse_loss(x, x)) == 0.0


@pytest.mark.parametrize("name,args,check", [
    ("constant_", (0.5,), lambda w: (w == 0.5).all()),
    ("ones_", (), lambda w: (w == 1).all()),
    ("zeros_", (), lambda w: (w == 0).all()),
    ("eye_", (), lambda w: (w == np.eye(3, 4)).all()),
    ("uniform_", (-0.1, 0.1), lambda w: (abs(w) <= 0.1).all()),
    ("normal_", (), lambda w: w.std() > 0),
    ("trunc_normal_", (), lambda w: (abs(w) <= 2).all()),
    ("xavier_uniform_", (), lambda w: (abs(w) <= math.sqrt(6 / 7)).all()),
    ("xavier_normal_", (), lambda w: w.std() > 0),
    ("kaiming_uniform_", (), lambda w: (abs(w) <= math.sqrt(6 / 4)).all()),
    ("kaiming_normal_", (), lambda w: w.std() > 0),
    ("orthogonal_", (), lambda w: np.allclose(w @ w.T, np.eye(3), atol=1e-5)),
])
def test_init(name, args, check):
    w = dg.empty(3, 4)
    assert getattr(nn.init, name)(w, *args) is w
    assert check(w.numpy())
    assert nn.init.calculate_gain("relu") == math.sqrt(2)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_optimizer_step_lowers_the_loss(name):
    w = nn.Parameter(dg.tensor([2.0, -3.0]))
    opt = getattr(dg.optim, name)([w], lr=0.1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[2] < losses[0]


SCHEDULERS = {   # one step from lr=1.0 -> the learning rate torch gives
    "LambdaLR": (lambda s, o: s.LambdaLR(o, lambda e: 0.5 ** e), 0.5),
    "MultiplicativeLR": (lambda s, o: s.MultiplicativeLR(o, lambda e: 0.5), 0.5),
    "StepLR": (lambda s, o: s.StepLR(o, step_size=1, gamma=0.5), 0.5),
    "MultiStepLR": (lambda s, o: s.MultiStepLR(o, milestones=[1], gamma=0.25), 0.25),
    "ConstantLR": (lambda s, o: s.ConstantLR(o, factor=0.5, total_iters=2), 0.5),
    "LinearLR": (lambda s, o: s.LinearLR(o, start_factor=0.5, total_iters=2), 0.75),
    "ExponentialLR": (lambda s, o: s.ExponentialLR(o, gamma=0.5), 0.5),
    "PolynomialLR": (lambda s, o: s.PolynomialLR(o, total_iters=2, power=1.0), 0.5),
    "CosineAnnealingLR": (lambda s, o: s.CosineAnnealingLR(o, T_max=2), 0.5),
    "SequentialLR": (lambda s, o: s.SequentialLR(
        o, [s.ConstantLR(o, factor=0.5, total_iters=5), s.ExponentialLR(o, gamma=0.5)],
        milestones=[3]), 0.5),
    "ChainedScheduler": (lambda s, o: s.ChainedScheduler(
        [s.StepLR(o, 1, gamma=0.5), s.ExponentialLR(o, gamma=0.5)]), 0.25),
    "OneCycleLR": (lambda s, o: s.OneCycleLR(o, max_lr=1.0, total_steps=4, pct_start=0.5,
                                             div_factor=2, anneal_strategy="linear"), 1.0),
    # a metric that stops improving: the second step halves the rate
    "CosineAnnealingWarmRestarts": (lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=2),
                                    0.5),
    "CyclicLR": (lambda s, o: s.CyclicLR(o, 0.0, 1.0, step_size_up=2), 0.5),
    "ReduceLROnPlateau": (lambda s, o: s.ReduceLROnPlateau(o, factor=0.5, patience=0), 0.5),
}


def test_every_scheduler_has_a_smoke_test():
    names = set(dg.optim.lr_scheduler.__all__) - {"LRScheduler"}
    assert names == set(SCHEDULERS)
    assert all(issubclass(getattr(dg.optim.lr_scheduler, n), dg.optim.lr_scheduler.LRScheduler)
               for n in names - {"ReduceLROnPlateau"})


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_lr_scheduler(name):
    make, lr = SCHEDULERS[name]
    opt = dg.optim.SGD([nn.Parameter(dg.ones(1))], lr=1.0)
    sched = make(dg.optim.lr_scheduler, opt)
    opt.step()
    if name == "ReduceLROnPlateau":
        sched.step(1.0)
        sched.step(1.0)
    else:
        sched.step()
    assert math.isclose(opt.param_groups[0]["lr"], lr)


def test_clip_grad_norm_():
    w = nn.Parameter(dg.zeros(2))
    w.grad = dg.tensor([3.0, 4.0])
    total = nn.utils.clip_grad_norm_([w], max_norm=1.0)
    assert math.isclose(float(total), 5.0)
    assert np.allclose(values(w.grad), [0.6, 0.8], atol=1e-5)


def test_data():
    class Squares(dg.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return i * i

    assert [Squares()[i] for i in range(4)] == [0, 1, 4, 9]
    ds = dg.utils.data.TensorDataset(dg.arange(5), dg.arange(5) * 10)
    batches = list(dg.utils.data.DataLoader(ds, batch_size=2))
    assert len(batches) == 3
    assert values(batches[0][1]) == [0, 10] and values(batches[2][0]) == [4]


def test_save_and_load(tmp_path):
    state = {"w": dg.tensor([1.0, 2.0]), "n": 3}
    dg.save(state, tmp_path / "state.dg")
    back = dg.load(tmp_path / "state.dg")
    assert values(back["w"]) == [1.0, 2.0] and back["n"] == 3


def test_utils_checkpoint():
    from dualgraph.utils.checkpoint import checkpoint
    x = dg.tensor([2.0], requires_grad=True)
    checkpoint(lambda t: t * t, x).sum().backward()
    assert values(x.grad) == [4.0]


def test_amp():
    with dg.amp.autocast(dtype=dg.bfloat16):
        assert (dg.ones(2, 2) @ dg.ones(2, 2)).dtype == dg.bfloat16
    assert dg.amp.GradScaler().scale(dg.tensor(1.0)).item() > 1


# -- dynamic -> static ---------------------------------------------------------------------

def test_compile_graph_code_explain():
    f = dg.compile(lambda x: (x * 2).relu().sum())
    assert float(f(dg.tensor([1.0, -2.0, 3.0]))) == 8.0
    assert "relu" in str(f.graph)
    assert "def " in f.code
    assert "1 graph" in f.explain()


def test_compile_a_training_step():
    model = nn.Linear(2, 1)
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    x, y = dg.ones(4, 2), dg.zeros(4, 1)

    @dg.compile
    def step():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses = [float(step()) for _ in range(3)]
    assert losses[2] < losses[0]


def test_jit_trace():
    f = dg.jit.trace(lambda x: x + 1, dg.ones(2))
    assert values(f(dg.zeros(2))) == [1.0, 1.0]
    assert "add" in str(f.graph)


@dg.jit.to_static
def _sign_scale(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def test_jit_to_static():
    assert values(_sign_scale(dg.ones(2))) == [2.0, 2.0]
    assert values(_sign_scale(-dg.ones(2))) == [-2.0, -2.0]


def test_cond_and_while_loop():
    out = dg.cond(dg.tensor(False), lambda a: a + 1, lambda a: a - 1, (dg.ones(2),))
    assert values(out) == [0.0, 0.0]
    i, s = dg.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 2),
                         (dg.tensor(0), dg.tensor(1.0)))
    assert (int(i), float(s)) == (3, 8.0)


def test_static_program():
    program = dg.static.Program()
    with program:
        x = dg.static.placeholder("x", (None, 2), dg.float32)
        y = (x * 3).sum()
    session = dg.static.Session(program)
    assert float(session.run(y, {"x": np.ones((4, 2), np.float32)})) == 24.0
    assert float(session.run([y], {x: np.ones((1, 2), np.float32)})[0]) == 6.0


# -- graphs, export, tools -----------------------------------------------------------------

def test_graph(tmp_path):
    f = dg.compile(lambda x: x * 2 + 1)
    f(dg.ones(3))
    graph = f.graph
    assert isinstance(graph, dg.graph.Graph)
    assert str(graph).startswith("graph(%x: f32[3])")
    assert graph.to_dot().startswith("digraph")
    assert "%x: f32[3]" in open(graph.to_html(tmp_path / "g.html")).read()
    assert "optimised" in open(f.show(tmp_path / "f.html")).read()
    assert values(graph(dg.tensor([1.0, 2.0, 3.0]))[0]) == [3.0, 5.0, 7.0]
    graph.save(tmp_path / "g.json")
    loaded = dg.graph.load(tmp_path / "g.json")
    assert str(loaded) == str(graph)


def test_onnx(tmp_path):
    dg.onnx.export(lambda x: x * 2, (dg.ones(2),), tmp_path / "m.onnx")
    assert values(dg.onnx.load(tmp_path / "m.onnx")(dg.ones(2))) == [2.0, 2.0]
    assert "imported" in open(dg.onnx.to_html(tmp_path / "m.onnx", tmp_path / "m.html")).read()


# -- the PyTorch names programs use (issue 24; thorough tests: test_torch_names.py) ----------

def test_devices_and_cpu_only_queries():
    x = dg.zeros(2, device=dg.device("cpu"))
    assert x.device == dg.device("cpu") and x.cpu() is x and x.to("cpu") is x
    assert not dg.cuda.is_available() and dg.cuda.device_count() == 0
    assert not dg.accelerator.is_available() and not dg.backends.mps.is_available()
    assert dg.backends.cudnn.enabled and dg.backends.cuda.matmul.allow_tf32 is False
    with pytest.raises(ValueError, match="not available"):
        x.cuda()


def test_torch_tensor_methods():
    x = dg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert f"{x.sum():.1f}" == "10.0" and x.stride() == (2, 1) and x.is_contiguous()
    assert values(x.new_zeros(2)) == [0.0, 0.0] and values(x.new_ones(1)) == [1.0]
    assert values(x.new_full((1,), 7.0)) == [7.0] and values(x.new_tensor([5])) == [5.0]
    assert tuple(x.new_empty(3).shape) == (3,) and x.type_as(dg.tensor([1])).dtype == dg.int64
    assert values(dg.zeros(2).copy_(dg.tensor([1.0, 2.0]))) == [1.0, 2.0]
    y = dg.zeros(2)
    assert values(y.lerp_(dg.ones(2), 0.5).addcmul_(y, y).addcdiv_(y, dg.ones(2))) == [1.5] * 2
    assert values(dg.lerp(dg.zeros(1), dg.ones(1), 0.25)) == [0.25]
    assert values(dg.addcmul(dg.ones(1), dg.ones(1), dg.ones(1), value=2)) == [3.0]
    assert values(dg.addcdiv(dg.ones(1), dg.ones(1), dg.full((1,), 2.0))) == [1.5]
    assert values(x.where(x > 2, 0.0)) == [[0.0, 0.0], [3.0, 4.0]]
    assert values(dg.tensor([1, 2]).repeat_interleave(2)) == [1, 1, 2, 2]
    assert values(dg.repeat_interleave(dg.tensor([1, 2]), 2)) == [1, 1, 2, 2]
    assert values(dg.arange(4.0).unfold(0, 2, 2)) == [[0.0, 1.0], [2.0, 3.0]]
    assert values(dg.unique(dg.tensor([2, 1, 2]))) == [1, 2]
    assert 0 <= dg.empty(3).uniform_().min().item() and dg.empty(3).normal_().shape == (3,)
    assert set(dg.empty(9).bernoulli_(0.5).tolist()) <= {0.0, 1.0}
    assert values(dg.bernoulli(dg.ones(2))) == [1.0, 1.0]
    assert tuple(dg.normal(0.0, 1.0, size=(2,)).shape) == (2,)
    assert tuple(dg.randint(5, (3,)).shape) == (3,)


def test_torch_namespace_functions(monkeypatch):
    a = dg.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert values(dg.addmm(dg.ones(2), a, a)) == [[2.0, 1.0], [1.0, 2.0]]
    assert values(dg.baddbmm(dg.zeros(1, 2, 2), a[None], a[None])) == [values(a)]
    assert math.isclose(dg.atan2(dg.tensor(1.0), dg.tensor(1.0)).item(), math.pi / 4,
                        rel_tol=1e-6)
    assert math.isclose(dg.erfc(dg.tensor(0.0)).item(), 1.0)
    assert values(dg.nan_to_num(dg.tensor([float("nan"), 1.0]))) == [0.0, 1.0]
    assert values(dg.diag(dg.tensor([1.0, 2.0]))) == [[1.0, 0.0], [0.0, 2.0]]
    assert values(dg.diagonal(dg.eye(2))) == [1.0, 1.0]
    assert tuple(dg.tensordot(dg.ones(2, 3), dg.ones(3, 4), dims=1).shape) == (2, 4)
    assert dg.sinh(dg.tensor(0.0)).item() == 0.0 and dg.cosh(dg.tensor(0.0)).item() == 1.0
    assert dg.ones(1).type() == "dualgraph.FloatTensor" and dg.ones(1).new(2).shape == (2,)
    assert dg.empty(3).exponential_().min().item() >= 0
    assert set(dg.empty(5).random_(2).tolist()) <= {0.0, 1.0}
    assert dg.ones(2, 3).nelement() == 6 and dg.ones(2, 3).ndimension() == 2
    assert dg.finfo(dg.float32).eps == 2.0 ** -23 and dg.iinfo(dg.int32).max == 2 ** 31 - 1
    assert dg.is_floating_point(dg.ones(1)) and dg.initial_seed() >= 0
    assert dg.allclose(a, a + 1e-9) and dg.equal(a, a.clone()) and values(
        dg.isclose(a, a)) == [[True, True]] * 2
    assert dg.is_tensor(a) and dg.numel(a) == 4
    # (set_num_threads sets DUALGRAPH_NUM_THREADS: the fixture puts it back afterwards)
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", str(dg.get_num_threads()))
    dg.set_num_threads(dg.get_num_threads())
    with dg.inference_mode():
        assert not dg.is_grad_enabled()
    assert dg.LongTensor([1]).dtype == dg.int64 and isinstance(dg.ones(1), dg.FloatTensor)
    assert dg.DoubleTensor(2).dtype == dg.float64 and dg.IntTensor([1]).dtype == dg.int32
    assert dg.HalfTensor([1]).dtype == dg.float16 and dg.BoolTensor([1]).dtype == dg.bool
    assert dg.BFloat16Tensor([1]).dtype == dg.bfloat16
    dg.set_float32_matmul_precision(dg.get_float32_matmul_precision())
    dg.set_printoptions(precision=2)
    assert repr(dg.tensor([1.2345])) == "tensor([1.23])"
    dg.set_printoptions(profile="default")
    assert not dg.jit.is_scripting() and not dg.onnx.is_in_onnx_export()


@pytest.mark.parametrize("name", ["Adadelta", "Adamax", "NAdam", "RAdam", "Rprop", "ASGD"])
def test_more_optimizers(name):
    w = dg.tensor([1.0, -2.0], requires_grad=True)
    opt = getattr(dg.optim, name)([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    assert abs(w[0].item()) < 1.0 and "step" in opt.state_dict()["state"][0]


def test_lbfgs():
    w = dg.tensor([1.0, -2.0], requires_grad=True)
    opt = dg.optim.LBFGS([w])

    def closure():
        opt.zero_grad()
        loss = ((w - 3) ** 2).sum()
        loss.backward()
        return loss
    opt.step(closure)
    assert np.allclose(values(w), [3.0, 3.0], atol=1e-4)


def test_torch_module_paths():
    from dualgraph.nn.modules.linear import Linear
    from dualgraph.utils.data.dataloader import DataLoader
    assert Linear is nn.Linear and DataLoader is dg.utils.data.DataLoader


def test_profiler():
    with dg.profiler.profile() as prof:
        dg.ones(2) * 2
    table = prof.table()
    assert "mul" in table and "# of Calls" in table


# -- distributed ---------------------------------------------------------------------------

def test_distributed():
    dist = dg.distributed
    assert all(callable(getattr(dist, n)) for n in (
        "init_process_group", "get_rank", "get_world_size", "all_reduce", "broadcast",
        "all_gather", "barrier"))
    assert dist.pipeline is not None


def test_distributed_data_parallel():
    assert issubclass(dg.nn.parallel.DistributedDataParallel, nn.Module)


def test_distributed_sampler():
    sampler = dg.utils.data.DistributedSampler(range(4), num_replicas=2, rank=0,
                                               shuffle=False)
    assert list(sampler) == [0, 2]
