"""Real models through ONNX with a dynamic batch axis, both ways.

Models written in torch (a ResNet, a MobileNet-style CNN, a transformer encoder, LSTM and
GRU taggers) are exported by ``torch.onnx.export`` with a dynamic batch axis, loaded by
``dg.onnx.load`` and compared with onnxruntime running the same file, at two batch sizes.
Models written in dualgraph (the same architectures, and an LSTM with projections, which
torch's exporter refuses) are exported by ``dg.onnx.export`` with a dynamic batch, loaded back
by ``dg.onnx.load`` and compared with dualgraph eager (and onnxruntime), at two batch sizes.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from test_onnx_deploy import randomise_batch_norms, resnet18  # noqa: E402

BATCHES = (2, 5)


def mobilenet(lib, width=8, classes=10):
    """MobileNetV3's parts at a small width: depthwise convs, BatchNorm, hard-swish, a
    squeeze-and-excite gate, global pooling, in torch.nn or dualgraph.nn."""
    class SqueezeExcite(lib.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1, self.fc2 = lib.nn.Conv2d(c, c // 2, 1), lib.nn.Conv2d(c // 2, c, 1)

        def forward(self, x):
            s = lib.nn.functional.adaptive_avg_pool2d(x, 1)
            return x * lib.nn.functional.hardsigmoid(self.fc2(self.fc1(s).relu()))

    def block(cin, cout, stride):
        return lib.nn.Sequential(
            lib.nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
            lib.nn.BatchNorm2d(cin), lib.nn.Hardswish(), SqueezeExcite(cin),
            lib.nn.Conv2d(cin, cout, 1, bias=False), lib.nn.BatchNorm2d(cout))
    return lib.nn.Sequential(
        lib.nn.Conv2d(3, width, 3, 2, 1, bias=False), lib.nn.BatchNorm2d(width),
        lib.nn.Hardswish(), block(width, 2 * width, 2), block(2 * width, 2 * width, 1),
        lib.nn.AdaptiveAvgPool2d(1), lib.nn.Flatten(), lib.nn.Linear(2 * width, classes))


def encoder(lib, vocab=50, d=16, classes=4):
    """A BERT-style classifier: token and position embeddings, two transformer encoder
    layers, mean pooling, a linear head."""
    class Encoder(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens, self.positions = lib.nn.Embedding(vocab, d), lib.nn.Embedding(12, d)
            layer = lib.nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True)
            self.layers = lib.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = lib.nn.Linear(d, classes)

        def forward(self, ids):
            where = lib.arange(ids.shape[1])
            return self.head(self.layers(self.tokens(ids) + self.positions(where)).mean(1))
    return Encoder()


def tagger(lib, kind, vocab=50, tags=5, **options):
    """A sequence tagger: embeddings, a recurrent layer (batch first), per-step log-softmax
    over the tags."""
    class Tagger(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = lib.nn.Embedding(vocab, 8)
            self.rnn = getattr(lib.nn, kind)(8, 12, batch_first=True, **options)
            width = (options.get("proj_size") or 12) * (1 + options.get("bidirectional", 0))
            self.out = lib.nn.Linear(width, tags)

        def forward(self, ids):
            return self.out(self.rnn(self.embed(ids))[0]).log_softmax(-1)
    return Tagger()


def image(b):
    return np.random.default_rng(b).standard_normal((b, 3, 32, 32)).astype(np.float32)


def tokens(b):
    return np.random.default_rng(b).integers(0, 50, (b, 7)).astype(np.int64)


TORCH_MODELS = {
    "resnet18": (lambda: resnet18(torch.nn), image),
    "mobilenet": (lambda: mobilenet(torch), image),
    "encoder": (lambda: encoder(torch), tokens),
    "lstm_tagger": (lambda: tagger(torch, "LSTM", num_layers=2, bidirectional=True), tokens),
    "gru_tagger": (lambda: tagger(torch, "GRU"), tokens),
    "gru_tagger_two_layers": (lambda: tagger(torch, "GRU", num_layers=2, bidirectional=True),
                              tokens),
}


def _randomise_torch_batch_norms(model):
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)


@pytest.mark.parametrize("name", sorted(TORCH_MODELS))
def test_torch_exported_model_loads_and_matches_onnxruntime(name):
    torch.manual_seed(0)
    make, data = TORCH_MODELS[name]
    model = make().eval()
    _randomise_torch_batch_norms(model)
    if name == "encoder":   # (eval mode takes torch's fused encoder, which has no ONNX
        model.train()       # export; its dropout is 0)
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(data(2)),), buffer, dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                          training=torch.onnx.TrainingMode.PRESERVE)
    proto = onnx.load_from_string(buffer.getvalue())
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    loaded = dg.onnx.load(proto)
    assert loaded.graph.inputs[0].shape[0] == dg.shapes.Sym("batch")   # (one graph for both)
    for b in BATCHES:
        x = data(b)
        want = session.run(None, {"x": x})[0]
        got = loaded(x).numpy()
        assert got.shape == want.shape
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


DG_MODELS = {
    "resnet18": (lambda: resnet18(nn), image),
    "mobilenet": (lambda: mobilenet(dg), image),
    "encoder": (lambda: encoder(dg), tokens),
    "gru_tagger": (lambda: tagger(dg, "GRU", num_layers=2, bidirectional=True), tokens),
    "lstm_tagger": (lambda: tagger(dg, "LSTM"), tokens),
    "lstm_tagger_with_projections": (
        lambda: tagger(dg, "LSTM", proj_size=4, num_layers=2, bidirectional=True), tokens),
}


@pytest.mark.parametrize("name", sorted(DG_MODELS))
def test_dualgraph_model_exports_with_a_dynamic_batch_and_loads_back(name, tmp_path):
    dg.manual_seed(0)
    make, data = DG_MODELS[name]
    model = make()
    randomise_batch_norms(model)
    model.eval()
    proto = dg.onnx.export(model, (dg.tensor(data(2)),), tmp_path / "m.onnx",
                           input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    loaded = dg.onnx.load(tmp_path / "m.onnx")
    for b in BATCHES:
        x = data(b)
        with dg.no_grad():
            want = model(dg.tensor(x)).numpy()
        scale = np.abs(want).max()
        for got in (loaded(x).numpy(), session.run(None, {"x": x})[0]):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


def test_lstm_with_projections_matches_torch_through_onnx(tmp_path):
    # torch's exporter refuses an LSTM with proj_size; dualgraph's writes a Scan per layer
    # and direction. torch's layer, its weights loaded into dualgraph's, is the oracle.
    reference = torch.nn.LSTM(6, 10, proj_size=4, num_layers=2, bidirectional=True,
                              batch_first=True).eval()
    layer = nn.LSTM(6, 10, proj_size=4, num_layers=2, bidirectional=True, batch_first=True)
    layer.load_state_dict({k: dg.tensor(v.detach().numpy())
                           for k, v in reference.state_dict().items()})
    layer.eval()
    proto = dg.onnx.export(layer, (dg.randn(2, 5, 6),), tmp_path / "m.onnx",
                           input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    loaded = dg.onnx.load(proto)
    for b in BATCHES:
        x = np.random.default_rng(b).standard_normal((b, 5, 6)).astype(np.float32)
        with torch.no_grad():
            out, (h, c) = reference(torch.from_numpy(x))
        want = [out.numpy(), h.numpy(), c.numpy()]
        for got in (session.run(None, {"x": x}), [t.numpy() for t in loaded(x)]):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
