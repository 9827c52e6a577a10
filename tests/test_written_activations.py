"""Activations written out, made the forms the epilogues take (passes/simplify.py): the
exact GELU, ``x * 0.5 * (1 + erf(x / sqrt 2))`` (by hand, and by torch's ONNX export below
opset 20), as ``gelu``, and its tanh form (GPT-2's NewGELU) as ``gelu_tanh``; hard-swish as MobileNetV3 ports write it, ``x * relu6(x + 3) / 6``,
as ``x * hardsigmoid(x)``. Compiled == eager == torch, in the orders and spellings code
writes, and near-misses left alone."""
import math
import os
import tempfile

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)
FORMS = {
    "exporter": lambda m, x: x * (m.erf(x / 1.4142135) + 1.0) * 0.5,
    "by hand": lambda m, x: 0.5 * x * (1.0 + m.erf(x / math.sqrt(2.0))),
    "scaled": lambda m, x: x * 0.5 * (1 + m.erf(x * (1 / math.sqrt(2)))),
}


@pytest.mark.parametrize("form", FORMS)
def test_a_written_out_gelu_after_a_linear_is_its_epilogue(form):
    x = RNG.standard_normal((6, 32)).astype(np.float32) * 3
    w = RNG.standard_normal((48, 32)).astype(np.float32) * 0.3
    write = FORMS[form]

    def f(m, functional):
        return lambda x, w: write(m, functional.linear(x, w))
    compiled = dg.compile(f(dg, dg.nn.functional))
    got = compiled(dg.tensor(x), dg.tensor(w)).numpy()
    eager = f(dg, dg.nn.functional)(dg.tensor(x), dg.tensor(w)).numpy()
    want = f(torch, torch.nn.functional)(torch.tensor(x), torch.tensor(w)).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "act='gelu'" in compiled.code, compiled.code   # (the linear's epilogue)


def test_near_misses_stay_as_written():
    x = RNG.standard_normal((4, 9)).astype(np.float32)
    for f in (lambda x: x * 0.49 * (1 + dg.erf(x / math.sqrt(2))),
              lambda x: 0.5 * x * (1 + dg.erf(x / 2.0)),
              lambda x: 0.5 * x * (2 + dg.erf(x / math.sqrt(2)))):
        compiled = dg.compile(f)
        np.testing.assert_allclose(compiled(dg.tensor(x)).numpy(), f(dg.tensor(x)).numpy(),
                                   rtol=1e-6, atol=1e-7)
        assert "-> gelu(x)" not in compiled.explain(), compiled.explain()


def test_the_far_negative_tail_is_closer_to_the_true_value_than_the_written_form():
    # the written form's 1 + erf cancels to 0 below about -5.9 (torch's float32 gelu too);
    # gelu's loop computes Phi through erfc: within float32 absolute rounding of the
    # written form, and a few ulp of the true x * Phi(x)
    x = np.array([-12.0, -7.0, -6.0, -5.0, -1e-8, 0.0, 3.0, np.inf, -np.inf, np.nan],
                 np.float32)
    compiled = dg.compile(lambda v: FORMS["by hand"](dg, v))
    got = compiled(dg.tensor(x)).numpy()
    assert "-> gelu(x)" in compiled.explain()
    written = FORMS["by hand"](dg, dg.tensor(x)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(written))
    np.testing.assert_allclose(got[:-3], written[:-3], rtol=1e-6, atol=1e-6)
    exact = [float(v) * 0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in x[:-3]]
    np.testing.assert_allclose(got[:-3], exact, rtol=1e-5, atol=1e-40)


def test_an_export_of_f_gelu_loads_with_gelu_in_the_products_epilogue():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 16)).eval()
    x = RNG.standard_normal((3, 7, 32)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "mlp.onnx")
        torch.onnx.export(model, (torch.tensor(x),), path, dynamo=False, input_names=["x"],
                          opset_version=17)   # (Gelu is an ONNX op from opset 20)
        loaded = dg.onnx.load(path)
        got = loaded(dg.tensor(x))
    got = got[0] if isinstance(got, (tuple, list)) else got
    with torch.no_grad():
        want = model(torch.tensor(x)).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    assert "act='gelu'" in loaded.code, loaded.code


HARD_SWISHES = {
    "relu6": lambda f, y: y * f.relu6(y + 3) / 6,
    "hardtanh": lambda f, y: y * f.hardtanh(y + 3.0, 0.0, 6.0) / 6.0,
    "clamp": lambda f, y: y * (y + 3).clamp(0, 6) / 6,
}


@pytest.mark.parametrize("form", HARD_SWISHES)
def test_a_written_out_hard_swish_after_a_conv_is_its_epilogue(form):
    x = RNG.standard_normal((2, 16, 11, 9)).astype(np.float32) * 2
    w = RNG.standard_normal((24, 16, 3, 3)).astype(np.float32) * 0.2
    write = HARD_SWISHES[form]

    def f(functional):
        return lambda x, w: write(functional, functional.conv2d(x, w, padding=1))
    compiled = dg.compile(f(dg.nn.functional))
    got = compiled(dg.tensor(x), dg.tensor(w)).numpy()
    eager = f(dg.nn.functional)(dg.tensor(x), dg.tensor(w)).numpy()
    want = f(torch.nn.functional)(torch.tensor(x), torch.tensor(w)).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert "hard-swish" in compiled.explain(), compiled.explain()


def test_a_hard_swish_near_miss_stays_as_written():
    x = RNG.standard_normal((3, 20)).astype(np.float32) * 4
    for f in (lambda y: y * dg.nn.functional.relu6(y + 3) / 5,
              lambda y: y * dg.nn.functional.relu6(y + 2) / 6,
              lambda y: (y + 0) * (y * 1.5 + 3).clamp(0, 6) / 6):
        compiled = dg.compile(f)
        np.testing.assert_allclose(compiled(dg.tensor(x)).numpy(), f(dg.tensor(x)).numpy(),
                                   rtol=1e-6, atol=1e-6)
        assert "hard-swish" not in compiled.explain(), compiled.explain()


TANH_GELUS = {
    "pow": lambda m, x: 0.5 * x * (1.0 + m.tanh(math.sqrt(2.0 / math.pi)
                                                * (x + 0.044715 * m.pow(x, 3.0)))),
    "products": lambda m, x: x * 0.5 * (1 + m.tanh((x + 0.044715 * x * x * x)
                                                   * 0.7978845608)),
}


@pytest.mark.parametrize("form", TANH_GELUS)
def test_a_written_out_tanh_gelu_after_a_linear_is_its_epilogue(form):
    x = RNG.standard_normal((5, 24)).astype(np.float32) * 2
    w = RNG.standard_normal((40, 24)).astype(np.float32) * 0.3
    write = TANH_GELUS[form]

    def f(m, functional):
        return lambda x, w: write(m, functional.linear(x, w))
    compiled = dg.compile(f(dg, dg.nn.functional))
    got = compiled(dg.tensor(x), dg.tensor(w)).numpy()
    eager = f(dg, dg.nn.functional)(dg.tensor(x), dg.tensor(w)).numpy()
    want = torch.nn.functional.gelu(torch.tensor(x) @ torch.tensor(w).T,
                                    approximate="tanh").numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "act='gelu_tanh'" in compiled.code, compiled.code


def test_a_tanh_gelu_near_miss_and_an_export_of_it():
    x = RNG.standard_normal((4, 9)).astype(np.float32)
    near = lambda v: 0.5 * v * (1 + dg.tanh(0.7978845608 * (v + 0.04 * v * v * v)))
    compiled = dg.compile(near)
    np.testing.assert_allclose(compiled(dg.tensor(x)).numpy(), near(dg.tensor(x)).numpy(),
                               rtol=1e-6, atol=1e-7)
    assert "gelu_tanh(x)" not in compiled.explain(), compiled.explain()
    model = torch.nn.Sequential(torch.nn.Linear(9, 32), torch.nn.GELU(approximate="tanh"))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "tanh_gelu.onnx")
        torch.onnx.export(model.eval(), (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"], opset_version=17)
        loaded = dg.onnx.load(path)
        got = loaded(dg.tensor(x))
    got = got[0] if isinstance(got, (tuple, list)) else got
    with torch.no_grad():
        np.testing.assert_allclose(got.numpy(), model(torch.tensor(x)).numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert "act='gelu_tanh'" in loaded.code, loaded.code
