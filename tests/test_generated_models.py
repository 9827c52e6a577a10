"""Differential test of ``dg.compile`` on generated models, trained and run for inference.

A grammar draws a model from the layers real code stacks: for images convolutions (plain,
strided, grouped, depthwise, 1x1), BatchNorm and GroupNorm, pooling, upsampling, Dropout
with p = 0, activations and residual blocks; for sequences (floats, or token ids through
an Embedding) Linear layers, LayerNorm, multi-head self-attention (with a causal or a
padding mask), Transformer encoder layers (post- and pre-norm), GRU and LSTM, a Conv1d
over time and residual blocks. A head pools to a vector and classifies.

Two copies with the same weights train for three steps (cross-entropy; SGD with momentum,
Nesterov and weight decay, Adam, AdamW or RMSprop; sometimes ``clip_grad_norm_``;
``zero_grad``/``backward``/``step`` in one function), one eagerly and one under
``dg.compile``: losses, parameters and buffers (BatchNorm's running statistics) must agree
(float64: rtol 1e-7). Then both run in eval mode under ``no_grad``, where compiling
freezes the weights and applies the inference rules (BatchNorm folding, conv and linear
epilogues, attention fusion): the logits must agree (float32, rtol 1e-4). A failing
model prints its description; ``DG_MODEL_EXAMPLES`` sets how many, from seed
``DG_MODEL_FIRST`` (CI: 16 from 0, seeded; a campaign on new seeds sets both).
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F

EXAMPLES = int(os.environ.get("DG_MODEL_EXAMPLES", "16"))
FIRST = int(os.environ.get("DG_MODEL_FIRST", "0"))
CLASSES = 3
OPTIMIZERS = [("SGD", {"lr": 0.05, "momentum": 0.9}), ("Adam", {"lr": 0.01}),
              ("AdamW", {"lr": 0.01, "weight_decay": 0.1}), ("RMSprop", {"lr": 0.01}),
              ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3})]
ACTS = ["ReLU", "GELU", "SiLU", "Tanh", "Hardswish", "LeakyReLU", "ReLU6", None]


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class SelfAttention(nn.Module):
    """Multi-head self-attention over (N, T, D) with an optional mask."""

    def __init__(self, d, heads, mask):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mask = mask

    def forward(self, x):
        t = x.shape[1]
        if self.mask == "causal":
            mask = dg.ones(t, t).triu(1).bool()
            return self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        if self.mask == "padding":
            pad = dg.arange(t).unsqueeze(0).expand(x.shape[0], t) >= t - 1
            return self.attn(x, x, x, key_padding_mask=pad, need_weights=False)[0]
        return self.attn(x, x, x, need_weights=False)[0]


class Recurrent(nn.Module):
    def __init__(self, kind, d, hidden):
        super().__init__()
        self.rnn = getattr(nn, kind)(d, hidden, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


class TimeConv(nn.Module):
    """A Conv1d over time on (N, T, D), as (N, D, T)."""

    def __init__(self, d):
        super().__init__()
        self.conv = nn.Conv1d(d, d, 3, padding=1)

    def forward(self, x):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class Head(nn.Module):
    def __init__(self, width, pool_dims):
        super().__init__()
        self.pool_dims = pool_dims
        self.fc = nn.Linear(width, CLASSES)

    def forward(self, x):
        return self.fc(x.mean(dim=self.pool_dims))


def activation(name):
    return getattr(nn, name)() if name else nn.Identity()


def image_layers(r, description):
    channels, layers, size = 3, [], 8
    for _ in range(r.randint(2, 5)):
        kind = r.choice(["conv", "conv", "depthwise", "grouped", "pointwise", "residual",
                         "pool", "norm", "upsample"])
        if kind in ("conv", "depthwise", "grouped", "pointwise"):
            cout = {"depthwise": channels, "grouped": 2 * r.choice([2, 3])}.get(
                kind, r.choice([4, 6, 8]))
            groups = {"depthwise": channels, "grouped": 2 if channels % 2 == 0 else 1}.get(
                kind, 1)
            k = 1 if kind == "pointwise" else r.choice([3, 5])
            stride = r.choice([1, 1, 2]) if size > 4 else 1
            layers.append(nn.Conv2d(channels, cout, k, stride, k // 2, groups=groups,
                                    bias=r.random() < 0.5))
            size = (size + 2 * (k // 2) - k) // stride + 1
            channels = cout
            if r.random() < 0.6:
                layers.append(nn.BatchNorm2d(channels))
            layers.append(activation(r.choice(ACTS)))
            description.append(f"{kind} {k}x{k}/{stride} -> {channels}")
        elif kind == "residual":
            layers.append(Residual(nn.Sequential(
                nn.Conv2d(channels, channels, 3, 1, 1), nn.BatchNorm2d(channels),
                activation(r.choice(ACTS)), nn.Conv2d(channels, channels, 1))))
            description.append("residual block")
        elif kind == "pool" and size >= 4:
            layers.append(r.choice([nn.MaxPool2d(2), nn.AvgPool2d(2)]))
            size //= 2
            description.append(type(layers[-1]).__name__)
        elif kind == "norm" and channels % 2 == 0:
            layers.append(nn.GroupNorm(2, channels))
            description.append("GroupNorm")
        elif kind == "upsample" and size <= 8:
            layers.append(nn.Upsample(scale_factor=2, mode=r.choice(["nearest", "bilinear"])))
            size *= 2
            description.append("Upsample")
        if r.random() < 0.2:
            layers.append(nn.Dropout(0.0))
    return layers, channels, (2, 3), (3, 8, 8)


def sequence_layers(r, description, d):
    layers = []
    for _ in range(r.randint(2, 4)):
        kind = r.choice(["linear", "norm", "attention", "encoder", "rnn", "conv", "residual"])
        if kind == "linear":
            layers += [nn.Linear(d, d), activation(r.choice(ACTS))]
        elif kind == "norm":
            layers.append(nn.LayerNorm(d))
        elif kind == "attention":
            mask = r.choice([None, "causal", "padding"])
            layers.append(SelfAttention(d, r.choice([1, 2, 4]), mask))
            kind += f" ({mask} mask)"
        elif kind == "encoder":
            first = r.random() < 0.5
            layers.append(nn.TransformerEncoderLayer(d, 2, 2 * d, dropout=0.0,
                                                     batch_first=True, norm_first=first,
                                                     activation=r.choice(["relu", "gelu"])))
            kind += " (pre-norm)" if first else " (post-norm)"
        elif kind == "rnn":
            rnn = r.choice(["GRU", "LSTM"])
            layers.append(Recurrent(rnn, d, d))
            kind = rnn
        elif kind == "conv":
            layers.append(TimeConv(d))
        else:
            layers.append(Residual(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d),
                                                 nn.GELU(), nn.Linear(2 * d, d))))
        description.append(kind)
    return layers


def draw(seed: int):
    """(make, input shape, kind, description): ``make()`` builds the model afresh."""
    r = random.Random(seed)
    kind = r.choice(["image", "sequence", "tokens"])
    state = r.getstate()

    def make():
        r.setstate(state)
        description = [kind]
        if kind == "image":
            layers, width, pool, shape = image_layers(r, description)
        else:
            d = r.choice([8, 12, 16])
            layers = [nn.Embedding(11, d)] if kind == "tokens" else []
            layers += sequence_layers(r, description, d)
            width, pool, shape = d, (1,), (5,) if kind == "tokens" else (5, d)
        return nn.Sequential(*layers, Head(width, pool)), shape, description
    return make


def inputs(kind_shape, seed, batch, tokens, dtype):
    rng = np.random.default_rng(seed)
    if tokens:
        return dg.tensor(rng.integers(0, 11, (batch,) + kind_shape))
    return dg.tensor(rng.standard_normal((batch,) + kind_shape), dtype=dtype)


def twin_models(seed, dtype):
    make = draw(seed)
    dg.manual_seed(seed)
    eager_model, shape, description = make()
    dg.manual_seed(seed)
    compiled_model, _, _ = make()
    for model in (eager_model, compiled_model):
        model.to(dtype)
    compiled_model.load_state_dict(eager_model.state_dict())
    return eager_model, compiled_model, shape, " / ".join(description)


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_training_steps_match_eager(seed):
    eager_model, compiled_model, shape, description = twin_models(seed, dg.float64)
    tokens = description.startswith("tokens")
    r = random.Random(seed)
    optimizer, clip = r.choice(OPTIMIZERS), r.random() < 0.3
    description += f" / {optimizer[0]}" + (" / clip_grad_norm_" if clip else "")
    steps = []
    for model in (eager_model, compiled_model):
        opt = getattr(dg.optim, optimizer[0])(model.parameters(), **optimizer[1])

        def step(x, y, model=model, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            return loss

        steps.append(step)
    steps[1] = dg.compile(steps[1])
    for call in range(3):
        x = inputs(shape, call, 4, tokens, dg.float64)
        y = dg.tensor(np.random.default_rng(call).integers(0, CLASSES, 4))
        losses = [float(step(x, y)) for step in steps]
        np.testing.assert_allclose(losses[1], losses[0], rtol=1e-7,
                                   err_msg=f"step {call}: loss\n{description}")
    assert_compiled_whole(steps[1], description)
    eager_state, compiled_state = eager_model.state_dict(), compiled_model.state_dict()
    for name, value in eager_state.items():
        np.testing.assert_allclose(compiled_state[name].numpy(), value.numpy(), rtol=1e-7,
                                   atol=1e-9, err_msg=f"{name}\n{description}")


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_inference_matches_eager(seed):
    eager_model, compiled_model, shape, description = twin_models(seed, dg.float32)
    tokens = description.startswith("tokens")
    # running statistics that are not the initial ones, so folding BatchNorm matters
    with dg.no_grad():
        for call in range(2):
            eager_model(inputs(shape, 10 + call, 4, tokens, dg.float32))
    compiled_model.load_state_dict(eager_model.state_dict())
    eager_model.eval()
    compiled_model.eval()
    compiled = dg.compile(compiled_model)
    with dg.no_grad():
        for call, batch in enumerate([1, 4, 4]):
            x = inputs(shape, 20 + call, batch, tokens, dg.float32)
            np.testing.assert_allclose(compiled(x).numpy(), eager_model(x).numpy(),
                                       rtol=1e-4, atol=1e-5,
                                       err_msg=f"call {call}\n{description}")
    assert_compiled_whole(compiled, description)


def assert_compiled_whole(compiled, description):
    """The calls ran as graphs, without a break (not eagerly: the test would be void)."""
    summary = compiled.explain().splitlines()[0]
    assert "0 graph break(s)" in summary and " 0 graph(s)" not in summary, \
        f"{summary}\n{description}"


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_onnx_export_and_import_match_eager(seed, tmp_path):
    """The eval-mode model exported to ONNX (dynamic batch) runs in onnxruntime, and comes
    back through ``dg.onnx.load``, with eager's logits."""
    ort = pytest.importorskip("onnxruntime")
    eager_model, _, shape, description = twin_models(seed, dg.float32)
    eager_model.eval()
    tokens = description.startswith("tokens")
    path = str(tmp_path / "model.onnx")
    example = inputs(shape, 30, 2, tokens, dg.float32)
    dg.onnx.export(eager_model, (example,), path, input_names=["x"], output_names=["y"],
                   dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    imported = dg.onnx.load(path)
    with dg.no_grad():
        for call, batch in enumerate([2, 5]):
            x = inputs(shape, 40 + call, batch, tokens, dg.float32)
            expected = eager_model(x).numpy()
            got = session.run(None, {"x": x.numpy()})[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5,
                                       err_msg=f"onnxruntime, batch {batch}\n{description}")
            loaded = imported(x)
            loaded = loaded[0] if isinstance(loaded, (tuple, list)) else loaded
            np.testing.assert_allclose(loaded.numpy(), expected, rtol=1e-4, atol=1e-5,
                                       err_msg=f"dg.onnx.load, batch {batch}\n{description}")


@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES, 2))
def test_autocast_inference_matches_eager(seed):
    """Under ``dg.autocast`` (bfloat16, torch's per-op policy) the compiled eval model
    computes what eager computes: each op in the dtype the policy gives it."""
    eager_model, compiled_model, shape, description = twin_models(seed, dg.float32)
    tokens = description.startswith("tokens")
    for model in (eager_model, compiled_model):
        model.eval()
    compiled = dg.compile(compiled_model)
    with dg.no_grad(), dg.autocast("cpu", dtype=dg.bfloat16):
        for call in range(2):
            x = inputs(shape, 50 + call, 3, tokens, dg.float32)
            expected, got = eager_model(x), compiled(x)
            assert got.dtype == expected.dtype, description
            np.testing.assert_allclose(got.float().numpy(), expected.float().numpy(),
                                       rtol=2e-2, atol=2e-2,
                                       err_msg=f"call {call}\n{description}")
    assert_compiled_whole(compiled, description)
