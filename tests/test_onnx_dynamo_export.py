"""Models exported by torch's default ONNX exporter (``dynamo=True``: torch.export and
onnxscript, what ``torch.onnx.export`` writes since torch 2.9), loaded by ``dg.onnx.load``.

Its graphs differ from the TorchScript exporter's (``dynamo=False``, the other ONNX tests):
opset 18+, dynamic dims computed by ``Shape``/``Slice``/``Concat`` chains, causal masks as
``Trilu``/``Where``, ``ReduceMean`` for global pooling, ``Resize`` to sizes whose batch entry is
read back from the input's shape. Each model is exported with a dynamic batch (and sequence,
where it has one); the import must match torch at the exported shape and at others. A
``Resize`` along a dynamic height is imported per input shape.
"""
from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import pytest

import dualgraph as dg

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")
nn, F = torch.nn, torch.nn.functional


class ConvNet(nn.Module):
    """Conv-BN-ReLU, a max pool with ceil_mode, a residual block, a strided 1x1, adaptive
    pooling and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(),
                                   nn.Conv2d(16, 16, 3, 1, 1), nn.BatchNorm2d(16))
        self.down = nn.Conv2d(16, 24, 1, 2)
        self.head = nn.Linear(24, 5)

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = self.down(F.relu(x + self.block(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class MobileBlock(nn.Module):
    """An inverted residual: 1x1 expand with hard-swish, depthwise 5x5 with SiLU, a
    squeeze-and-excitation gate, a 1x1 projection with BatchNorm, a residual."""

    def __init__(self):
        super().__init__()
        self.expand, self.dw = nn.Conv2d(8, 32, 1), nn.Conv2d(32, 32, 5, 1, 2, groups=32)
        self.squeeze, self.excite = nn.Conv2d(32, 8, 1), nn.Conv2d(8, 32, 1)
        self.project, self.bn = nn.Conv2d(32, 8, 1), nn.BatchNorm2d(8)

    def forward(self, x):
        y = F.silu(self.dw(F.hardswish(self.expand(x))))
        gate = torch.sigmoid(self.excite(F.relu(self.squeeze(y.mean((2, 3), keepdim=True)))))
        return x + self.bn(self.project(y * gate))


class Block(nn.Module):
    """A pre-norm transformer block: one QKV product split into heads, causal
    ``scaled_dot_product_attention``, a tanh-GELU feed-forward."""

    def __init__(self, width=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 64), nn.GELU(approximate="tanh"),
                                nn.Linear(64, width))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.norm1(x)).split(d, -1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


class Encoder(nn.Module):
    """Token and position embeddings, a padding mask into ``nn.TransformerEncoderLayer``,
    masked mean pooling."""

    def __init__(self):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(50, 32, padding_idx=0), nn.Embedding(64, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.out = nn.Linear(32, 3)

    def forward(self, ids):
        pad = ids == 0
        h = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]).unsqueeze(0))
        h = self.layer(h, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.out((h * keep).sum(1) / keep.sum(1).clamp(min=1.0))


class UpsampleNet(nn.Module):
    """A strided conv with GroupNorm and GELU, a transposed conv, bilinear interpolation to
    the input's size (``Resize`` to sizes), skips cropped and concatenated."""

    def __init__(self):
        super().__init__()
        self.down, self.norm = nn.Conv2d(3, 8, 3, 2, 1), nn.GroupNorm(2, 8)
        self.up, self.fuse = nn.ConvTranspose2d(8, 8, 2, 2), nn.Conv2d(11, 4, 3, padding=1)

    def forward(self, x):
        y = F.gelu(self.norm(self.down(x)))
        u = self.up(y)
        z = F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)
        h, w = u.shape[2], u.shape[3]
        return self.fuse(torch.cat([u + z[:, :, :h, :w], x[:, :, :h, :w]], 1))


class GatedFeedForward(nn.Module):
    """RMSNorm written out, a SwiGLU feed-forward with a residual, log-softmax by
    ``logsumexp``."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(32) + 0.5)
        self.gate, self.up = nn.Linear(32, 48, bias=False), nn.Linear(32, 48, bias=False)
        self.down = nn.Linear(48, 32, bias=False)

    def forward(self, x):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        y = x + self.down(F.silu(self.gate(n)) * self.up(n))
        return y - torch.logsumexp(y, -1, keepdim=True)


class NearestUpsample(nn.Module):
    """Nearest upsampling by a scale factor (``Resize`` by scales), then a conv."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def images(shape, rng):
    return rng.standard_normal(shape).astype(np.float32)


def token_ids(shape, rng):
    ids = rng.integers(1, 50, shape)
    ids[0, max(1, shape[1] - 3):] = 0          # the first row padded at its end
    return ids


BATCH, SEQ = "batch", "seq"
CASES = {   # model: (example input, its dims made dynamic, other shapes to run)
    "convnet": (ConvNet, images, (2, 3, 33, 31), (BATCH,), [(1, 3, 33, 31), (3, 3, 33, 31)]),
    "mobile_block": (MobileBlock, images, (2, 8, 9, 11), (BATCH,), [(1, 8, 9, 11), (4, 8, 9, 11)]),
    "block": (Block, images, (2, 10, 32), (BATCH, SEQ), [(3, 7, 32), (1, 1, 32)]),
    "encoder": (Encoder, token_ids, (2, 12), (BATCH, SEQ), [(3, 5), (1, 12)]),
    "upsample": (UpsampleNet, images, (2, 3, 16, 20), (BATCH,), [(1, 3, 16, 20)]),
    "gated_ff": (GatedFeedForward, images, (2, 6, 32), (BATCH, SEQ), [(5, 3, 32)]),
    "nearest": (NearestUpsample, images, (2, 4, 5, 6), (BATCH,), [(3, 4, 5, 6)]),
}


def build(cls):
    torch.manual_seed(0)
    model = cls().eval()
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model


def dynamic_dims(dims) -> dict:
    return {i: torch.export.Dim(name, max=64 if name == SEQ else None)
            for i, name in enumerate(dims)}


def export(model, x, dynamic: dict, path):
    """``model`` exported by the dynamo exporter with the input dims ``dynamic`` (``{axis:
    torch.export.Dim}``) dynamic."""
    logging.disable(logging.WARNING)            # (its progress lines and torchvision notes)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(model, (torch.tensor(x),), dynamo=True,
                                        dynamic_shapes=(dynamic,), verbose=False)
    finally:
        logging.disable(logging.NOTSET)
    program.save(path)


@pytest.mark.parametrize("name", CASES)
def test_the_import_matches_torch_at_dynamic_shapes(name, tmp_path):
    cls, make, shape, dims, others = CASES[name]
    rng = np.random.default_rng(0)
    model = build(cls)
    path = os.path.join(tmp_path, f"{name}.onnx")
    export(model, make(shape, rng), dynamic_dims(dims), path)
    loaded = dg.onnx.load(path)
    for s in [shape] + others:
        x = make(s, rng)
        with torch.no_grad():
            want = model(torch.tensor(x)).numpy()
        got = np.asarray(loaded(dg.tensor(x)).numpy())
        assert got.shape == want.shape, (name, s)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"{name} at input shape {s}")


def test_resizing_a_dynamic_dim_imports_the_model_per_input_shape(tmp_path):
    """Resize's weights are computed when loading: where it resizes a dynamic dim (the
    height here), the model is imported once per input shape it is called with."""
    model = build(NearestUpsample)
    path = os.path.join(tmp_path, "spatial.onnx")
    rng = np.random.default_rng(0)
    export(model, images((2, 4, 5, 6), rng), {0: torch.export.Dim("batch"),
                                              2: torch.export.Dim("height", max=64)}, path)
    loaded = dg.onnx.load(path)
    for shape in [(2, 4, 5, 6), (1, 4, 9, 6), (3, 4, 5, 6), (2, 4, 5, 6)]:
        x = images(shape, rng)
        with torch.no_grad():
            want = model(torch.tensor(x)).numpy()
        np.testing.assert_allclose(np.asarray(loaded(dg.tensor(x)).numpy()), want,
                                   rtol=1e-5, atol=1e-5)
    assert len(loaded.cache) == 3
    assert "imported per input shape; 3 imported" in repr(loaded)
