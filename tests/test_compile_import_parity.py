"""A model written as torch-style code and ``dg.compile``d, and the same model exported by
torch to ONNX and loaded with ``dg.onnx.load``, optimise to the same program.

The two front ends write the same idioms differently: torch's tracer records
``hardswish``/``hardsigmoid``, ``flatten``, ``dropout``, a bias-less ``linear`` and
RMSNorm's ``pow``/``mean``/``rsqrt`` as ops of ours, while the export writes ``HardSwish``,
``HardSigmoid``, ``Flatten``, ``Gemm``/``MatMul`` (the weight transposed), ``Pow``,
``ReduceMean``, ``Sqrt`` and ``Reciprocal``, a folded BatchNorm's constants, and ``Gather``
for an embedding. A lowering rule whose precondition matches one form and not the other
makes the same model slower through one path: here both paths must give the same
sequence of optimised ops, and both must give torch's values (and eager's).
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import dualgraph as dg

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")


def head_block(lib, cin=12, hidden=24, classes=10):
    """Conv-BN-hardswish, a depthwise conv, squeeze-and-excitation gated by hardsigmoid, a
    1x1 projection with a residual, then global pooling, flatten, linear-hardswish,
    dropout and the classifier's linear (MobileNetV3's idioms, at widths of no model)."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, cin, 3, 2, 1, bias=False),
                                      nn.BatchNorm2d(cin), nn.Hardswish())
            self.dw = nn.Sequential(nn.Conv2d(cin, cin, 5, 1, 2, groups=cin, bias=False),
                                    nn.BatchNorm2d(cin), nn.Hardswish())
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, 4, 1), nn.ReLU(),
                                    nn.Conv2d(4, cin, 1), nn.Hardsigmoid())
            self.project = nn.Sequential(nn.Conv2d(cin, cin, 1, bias=False),
                                         nn.BatchNorm2d(cin))
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                      nn.Linear(cin, hidden), nn.Hardswish(),
                                      nn.Dropout(0.2), nn.Linear(hidden, classes))

        def forward(self, x):
            h = self.stem(x)
            d = self.dw(h)
            return self.head(h + self.project(d * self.se(d)))
    return Block()


def rms_block(lib, vocab=50, width=24, hidden=40):
    """An embedding, RMSNorm written as T5 writes it (mean of squares, ``rsqrt``, a
    weight), bias-less linears with a ReLU between and a residual."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(vocab, width)
            self.weight = nn.Parameter(lib.ones(width))
            self.wi = nn.Linear(width, hidden, bias=False)
            self.wo = nn.Linear(hidden, width, bias=False)

        def forward(self, ids):
            x = self.tokens(ids)
            h = self.weight * (x * lib.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
            return x + self.wo(lib.relu(self.wi(h)))
    return Block()


def same_models(build, seed=0):
    """The block built with torch and with dualgraph, one random state (BatchNorm
    statistics not the initial ones), both in eval mode."""
    reference = build(torch).eval()
    rng = np.random.default_rng(seed)
    state = {}
    for k, v in reference.state_dict().items():
        if v.dtype == torch.int64:   # (num_batches_tracked)
            state[k] = v.numpy()
        elif k.endswith("running_var"):
            state[k] = rng.uniform(0.5, 2.0, v.shape).astype(np.float32)
        else:
            state[k] = (rng.standard_normal(v.shape) * 0.5).astype(np.float32)
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model = build(dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    return reference, model


def ops(graph) -> list[str]:
    return [n.op.name for n in graph.nodes]


def both_paths(reference, model, x, tmp_path):
    """(the compiled module's optimised ops and result, the import's), after checking
    each against torch and the compiled module against eager."""
    path = os.path.join(str(tmp_path), "block.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")     # (the exporter's deprecation note)
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
        want = reference(torch.tensor(x)).numpy()
    compiled = dg.compile(model)
    with dg.no_grad():
        got = compiled(dg.tensor(x)).numpy()
        eager = model(dg.tensor(x)).numpy()
    loaded = dg.onnx.load(path)
    imported = np.asarray(loaded(dg.tensor(x)).numpy())
    scale = 1e-4 * max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=scale)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=scale)
    np.testing.assert_allclose(imported, want, rtol=1e-4, atol=scale)
    return ops(compiled.optimized_graph), ops(loaded.executable.graph)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("batch,size", [(1, 19), (3, 14)])
def test_a_cnn_head_optimises_to_the_same_ops_compiled_and_imported(batch, size, tmp_path):
    reference, model = same_models(head_block)
    x = np.random.default_rng(1).standard_normal((batch, 3, size, size)).astype(np.float32)
    compiled, imported = both_paths(reference, model, x, tmp_path)
    assert compiled == imported
    assert "hardswish" not in compiled and "dropout" not in compiled   # (fused, dropped)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("batch", [1, 3])
def test_rms_norm_and_bias_less_linears_optimise_to_the_same_ops(batch, tmp_path):
    reference, model = same_models(rms_block)
    ids = np.random.default_rng(2).integers(0, 50, (batch, 7)).astype(np.int64)
    compiled, imported = both_paths(reference, model, ids, tmp_path)
    assert compiled == imported
    assert "rms_norm" in compiled
