"""Saved captured graphs are self-contained models (capture/freeze.py).

``traced.graph.save(path)`` freezes the tensors the function reads (parameters, buffers,
closure tensors) into constants holding their values at save time, and keeps only the
function's outputs, so ``dg.graph.load(path)`` runs with the real inputs alone;
``save(path, freeze=False)`` keeps them as inputs. Checked against eager, against a fresh
process and against the ONNX export of the same module.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import dualgraph as dg
from dualgraph import nn
from dualgraph.graph import GraphError

ROOT = pathlib.Path(__file__).resolve().parent.parent


def model_and_closure():
    """A module with parameters, and a function that also closes over a tensor ``w``."""
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
    w = dg.tensor([2.0, -0.5])

    def f(x):
        return model(x) * w + 1.0
    return model, w, f


def eager(fn, *args):
    with dg.no_grad():
        return fn(*args).numpy()


def test_traced_function_saves_its_closure_and_parameters(tmp_path):
    model, w, f = model_and_closure()
    x = dg.randn(4, 3)
    traced = dg.jit.trace(f, x)
    assert len(traced.graph.inputs) == 6     # x, 4 parameters, w: bound at every call
    assert len(traced.graph.outputs) > 1     # the result, then values saved for backward
    path = tmp_path / "f.json"
    traced.graph.save(path)
    loaded = dg.graph.load(path)
    assert [v.name for v in loaded.inputs] == ["x"]
    assert sorted(v.name for v in loaded.constants) == [
        "model.0.bias", "model.0.weight", "model.2.bias", "model.2.weight", "w"]
    x2 = dg.randn(4, 3)
    (got,) = loaded(x2)
    np.testing.assert_allclose(got, eager(f, x2), rtol=1e-6, atol=1e-6)


def test_traced_module_loads_in_a_fresh_process(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.BatchNorm1d(4)).eval()
    with dg.no_grad():   # running statistics that are not the defaults
        model[2].running_mean.add_(dg.tensor([0.5, -1.0, 2.0, 0.0]))
        model[2].running_var.mul_(dg.tensor([4.0, 0.25, 1.0, 9.0]))
    x = dg.randn(6, 3)
    traced = dg.jit.trace(model, x)
    path = tmp_path / "m.json"
    traced.save(path)     # (Compiled.save is graph.save)
    np.save(tmp_path / "x.npy", x.numpy())
    script = ("import sys, numpy as np, dualgraph as dg\n"
              "g = dg.graph.load(sys.argv[1])\n"
              "np.save(sys.argv[3], g(np.load(sys.argv[2]))[0])\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "x.npy"),
                    str(tmp_path / "y.npy")], env=env, check=True, capture_output=True)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), eager(model, x),
                               rtol=1e-5, atol=1e-6)


def test_saved_graph_holds_the_values_at_save_time(tmp_path):
    model, w, f = model_and_closure()
    x = dg.randn(4, 3)
    traced = dg.jit.trace(f, x)
    before = eager(f, x)
    traced.graph.save(tmp_path / "a.json")
    frozen = traced.graph.frozen()
    with dg.no_grad():
        model[0].weight.mul_(3.0)
        w.add_(1.0)
    after = eager(f, x)
    assert not np.allclose(before, after)
    np.testing.assert_allclose(dg.graph.load(tmp_path / "a.json")(x)[0], before, rtol=1e-6)
    np.testing.assert_allclose(frozen(x)[0], before, rtol=1e-6)   # a copy, not a view
    traced.graph.save(tmp_path / "b.json")                          # saved again: new values
    np.testing.assert_allclose(dg.graph.load(tmp_path / "b.json")(x)[0], after, rtol=1e-6)
    np.testing.assert_allclose(traced(x).detach().numpy(), after, rtol=1e-6)


def test_unfrozen_save_keeps_parameters_as_inputs(tmp_path):
    model, w, f = model_and_closure()
    x = dg.randn(4, 3)
    compiled = dg.compile(f)
    compiled(x)
    compiled.graph.save(tmp_path / "u.json", freeze=False)
    loaded = dg.graph.load(tmp_path / "u.json")
    assert [v.name for v in loaded.inputs] == [
        "x", "model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias", "w"]
    assert len(loaded.outputs) == 1 and not loaded.constants
    params = [p.detach().numpy() for p in model.parameters()]
    (got,) = loaded(x.numpy(), *params, np.array([1.0, 1.0], np.float32))
    with dg.no_grad():
        w.fill_(1.0)
    np.testing.assert_allclose(got, eager(f, x), rtol=1e-6, atol=1e-6)


def test_a_function_that_updates_state_saves_only_unfrozen(tmp_path):
    bn = nn.BatchNorm1d(3)    # training mode: the call updates the running statistics
    x = dg.randn(8, 3) * 2 + 1
    traced = dg.jit.trace(bn, x)
    with pytest.raises(GraphError, match=r"updates num_batches_tracked, running_mean, "
                                         r"running_var, which.*freeze=False"):
        traced.graph.save(tmp_path / "bn.json")
    assert not os.path.exists(tmp_path / "bn.json")
    traced.graph.save(tmp_path / "bn.json", freeze=False)
    loaded = dg.graph.load(tmp_path / "bn.json")
    names = [v.name for v in loaded.inputs]
    assert names[0] == "input" and sorted(names[1:]) == [   # (the others in order of use)
        "bias", "num_batches_tracked", "running_mean", "running_var", "weight"]
    state = dict(bn.state_dict())
    y, count, mean, var = loaded(x.numpy(), *(state[n].detach().numpy()
                                              for n in names[1:]))
    out = eager(bn, x)     # updates bn's statistics as the graph's outputs say
    np.testing.assert_allclose(y, out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean, bn.running_mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(var, bn.running_var.numpy(), rtol=1e-6)
    assert int(count) == 2 == int(bn.num_batches_tracked.numpy())   # (the trace's call, then)


def test_a_retyped_parameter_must_be_traced_again_before_saving(tmp_path):
    model = nn.Linear(2, 2)
    traced = dg.jit.trace(model, dg.ones(1, 2))
    model.double()
    with pytest.raises(GraphError, match=r"weight is now f64\[2,2\] but was traced as "
                                         r"f32\[2,2\]"):
        traced.graph.save(tmp_path / "l.json")


def test_saved_graph_agrees_with_the_onnx_export(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model, w, f = model_and_closure()
    x = dg.randn(4, 3)
    dg.onnx.export(f, (x,), tmp_path / "f.onnx")
    dg.jit.trace(f, x).graph.save(tmp_path / "f.json")
    session = ort.InferenceSession(str(tmp_path / "f.onnx"),
                                   providers=["CPUExecutionProvider"])
    (from_onnx,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    (from_graph,) = dg.graph.load(tmp_path / "f.json")(x)
    np.testing.assert_allclose(from_graph, from_onnx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(from_graph, eager(f, x), rtol=1e-6, atol=1e-6)
