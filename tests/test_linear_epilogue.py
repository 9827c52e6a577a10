"""The ``linear_epilogue`` rule and op: a linear layer with its activation and residual add
compiled as one op must equal the eager model and torch's, on shapes outside the suite
(odd widths, batch 1 and 3, sequences of 1, 7 and 129 tokens), and the rule must leave
alone what it may not take."""
import numpy as np
import pytest

import dualgraph as dg
from dualgraph.ops.epilogue import LINEAR_EPILOGUE
from dualgraph.ops.opdef import REGISTRY

torch = pytest.importorskip("torch")

ACTIVATIONS = [("GELU", {}), ("GELU", {"approximate": "tanh"}), ("ReLU", {}), ("ReLU6", {}),
               ("SiLU", {}), ("Sigmoid", {}), ("Hardswish", {}), ("Hardsigmoid", {}),
               ("Identity", {})]


def branch(lib, width, hidden, act, kwargs, residual, bias=True):
    """``act(linear(x))`` with a residual added before the activation, after it, or none."""
    nn = lib.nn

    class Branch(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(width, hidden, bias=bias)
            self.act = getattr(nn, act)(**kwargs)

        def forward(self, x, r):
            if residual == "before":
                return self.act(r + self.fc(x))
            y = self.act(self.fc(x))
            return y + r if residual == "after" else y
    return Branch()


def run_all(make, x, r, dtype=np.float32):
    """(compiled dualgraph under no_grad, eager dualgraph, torch) outputs, same weights;
    and the compiled graph's op names. ``linear_packed`` (which would take the epilogue
    onto its packed product: tests/test_linear_packed.py) is off, so that the op this
    file tests is the one that runs."""
    reference = make(torch).to(getattr(torch, np.dtype(dtype).name))
    model = make(dg).double() if dtype == np.float64 else make(dg)
    model.load_state_dict({k: dg.tensor(v.detach().numpy())
                           for k, v in reference.state_dict().items()})
    compiled = dg.compile(model, passes={"linear_packed": False})
    with dg.no_grad():
        got = compiled(dg.tensor(x), dg.tensor(r)).numpy()
        eager = model(dg.tensor(x), dg.tensor(r)).numpy()
    with torch.no_grad():
        want = reference(torch.tensor(x), torch.tensor(r)).numpy()
    ops = [n.op.name for n in compiled._last.executable.graph.nodes]
    return got, eager, want, ops


@pytest.mark.parametrize("act,kwargs", ACTIVATIONS, ids=[f"{a}{k}" for a, k in ACTIVATIONS])
@pytest.mark.parametrize("residual", [None, "before", "after"])
@pytest.mark.parametrize("rows", [(1, 1), (1, 7), (3, 129)], ids=str)
def test_linear_with_activation_and_residual_equals_eager_and_torch(act, kwargs, residual,
                                                                   rows):
    rng = np.random.default_rng(sum(rows))
    width, hidden = 37, 45 if residual is None else 37
    x = rng.normal(0, 2, rows + (width,)).astype(np.float32)
    r = rng.normal(0, 1, rows + (hidden,)).astype(np.float32)
    got, eager, want, ops = run_all(
        lambda lib: branch(lib, width, hidden, act, kwargs, residual), x, r)
    assert ("linear_epilogue" in ops) == (residual is not None or act != "Identity"), ops
    np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_big_products_take_the_numba_rows_loop_and_float64_the_numpy_path():
    """A product of 129 x 3 x 1030 (above the loops' threshold) and one in float64; a
    linear without bias gets a zero bias."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 129, 67)).astype(np.float32)
    r = rng.normal(size=(3, 129, 1030)).astype(np.float32)
    make = lambda lib: branch(lib, 67, 1030, "GELU", {}, "after", bias=False)   # noqa: E731
    got, eager, want, ops = run_all(make, x, r)
    assert "linear_epilogue" in ops
    np.testing.assert_array_equal(got, eager)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    got, eager, want, ops = run_all(make, x.astype(np.float64), r.astype(np.float64),
                                    np.float64)
    assert "linear_epilogue" in ops and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_relu_alone_of_a_2d_linear_stays_linear_relu():
    """``linear_relu`` applies a batch-1 product's relu as it writes the rows: a 2-D linear
    and its relu are left to it; a 3-D one's relu takes the epilogue."""
    rng = np.random.default_rng(4)
    for shape, op in (((1, 37), "linear_relu"), ((5, 37), "linear_relu"),
                      ((2, 5, 37), "linear_epilogue")):
        x, r = rng.normal(size=shape).astype(np.float32), np.zeros(1, np.float32)
        got, eager, want, ops = run_all(lambda lib: branch(lib, 37, 45, "ReLU", {}, None),
                                        x, r)
        assert op in ops, ops
        # (rows > 1: ``weights_kn`` makes the product NN; OpenBLAS's AVX-512 kernels round
        # an NN and an NT product differently in the last place, its Haswell ones do not)
        np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_product_read_elsewhere_keeps_its_linear():
    """``linear`` whose output something else reads too (here: returned) is not fused, nor
    is a training step's (the gelu's input is saved for its gradient)."""
    def fn(x, w, b):
        y = dg.nn.functional.linear(x, w, b)
        return dg.nn.functional.gelu(y), y
    x, w, b = (dg.tensor(np.random.default_rng(0).normal(size=s).astype(np.float32))
               for s in ((4, 8), (6, 8), (6,)))
    compiled = dg.compile(fn)
    got = compiled(x, w, b)
    ops = [n.op.name for n in compiled._last.executable.graph.nodes]
    assert "linear_epilogue" not in ops and "linear" in ops
    for g, e in zip(got, fn(x, w, b)):
        np.testing.assert_array_equal(g.numpy(), e.numpy())

    model = branch(dg, 8, 6, "GELU", {}, None)
    step = dg.compile(lambda x, r: model(x, r).square().sum().backward())
    step(x, dg.tensor(np.zeros((4, 6), np.float32)))
    assert "linear_epilogue" not in [n.op.name for n in step._last.executable.graph.nodes]


def test_the_op_equals_its_decomposition_and_checks_the_residual():
    rng = np.random.default_rng(5)
    x, w, b, r = (rng.normal(size=s).astype(np.float32)
                  for s in ((2, 7, 9), (11, 9), (11,), (2, 7, 11)))
    for act, at in [("gelu_tanh", "before"), ("silu", "after"), ("clamp", "before")]:
        attrs = dict(act=act, bounds=(-1.0, 2.0), residual_at=at)
        got = REGISTRY["linear_epilogue"].kernel(x, w, b, r, **attrs)
        want = LINEAR_EPILOGUE.decomposition(*(dg.tensor(a) for a in (x, w, b, r)), **attrs)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="residual of shape"):
        LINEAR_EPILOGUE.infer(x, w, b, r[:, :3], act="none", bounds=(0, 0),
                              residual_at="before")


@pytest.mark.parametrize("act", ["Sigmoid", "SiLU"])
def test_a_saturated_sigmoid_is_accurate_relative_to_its_value(act):
    """Pre-activations of about -20 to -45 through the rows loop: sigmoid's tiny values
    to a relative ulp or two, as eager and torch give them, not 0 (a
    binary cross-entropy takes their log)."""
    rng = np.random.default_rng(5)
    x = -np.abs(rng.normal(size=(3, 129, 67))).astype(np.float32) * 4
    r = np.zeros((3, 129, 1030), np.float32)
    make = lambda lib: branch(lib, 67, 1030, act, {}, None)   # noqa: E731
    reference = make(torch)
    with torch.no_grad():
        reference.fc.weight.copy_(torch.rand(1030, 67) * 0.1)
        reference.fc.bias.fill_(-20.0)
    got, eager, want, ops = run_all(lambda lib: reference if lib is torch else make(lib), x, r)
    assert "linear_epilogue" in ops and np.abs(want).min() > 0
    assert np.log(np.abs(want)).max() < -18   # (where the tanh form gave 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=0)
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=0)


@pytest.mark.parametrize("act,kwargs", ACTIVATIONS, ids=[f"{a}{k}" for a, k in ACTIVATIONS])
@pytest.mark.parametrize("residual", [None, "before", "after"])
@pytest.mark.parametrize("lead", [(1,), (1, 1)], ids=str)
def test_a_batch_1_product_runs_fitted_and_equals_eager_and_torch(act, kwargs, residual, lead):
    """A one-row float32 product big enough for the matrix-vector loop (97 inputs, 131 or
    97 outputs) is bound fitted (``matvec_<act>``: the plan and the rows loop worked out
    once), with every activation and residual, on a 2-D and a 3-D input, for two calls."""
    rng = np.random.default_rng(len(lead))
    width, hidden = 97, 131 if residual is None else 97
    reference = branch(torch, width, hidden, act, kwargs, residual)
    model = branch(dg, width, hidden, act, kwargs, residual)
    model.load_state_dict({k: dg.tensor(v.detach().numpy())
                           for k, v in reference.state_dict().items()})
    compiled = dg.compile(model, passes={"linear_packed": False})
    for _ in range(2):
        x = rng.normal(0, 2, lead + (width,)).astype(np.float32)
        r = rng.normal(0, 1, lead + (hidden,)).astype(np.float32)
        with dg.no_grad():
            got = compiled(dg.tensor(x), dg.tensor(r)).numpy()
            eager = model(dg.tensor(x), dg.tensor(r)).numpy()
        with torch.no_grad():
            want = reference(torch.tensor(x), torch.tensor(r)).numpy()
        np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    fused = residual is not None or act != "Identity"
    assert ("matvec_" in compiled._last.executable.code) == fused


def test_the_fitted_batch_1_product_equals_the_kernel_into_out_and_from_a_strided_row():
    """The fitted kernel of ``linear_epilogue`` against the op's own kernel: into a given
    ``out`` and into a fresh array, from a row that is a strided view; a float64 product
    and a product of several rows get no fitted kernel."""
    rng = np.random.default_rng(6)
    x, w, b, r = (rng.normal(size=s).astype(np.float32)
                  for s in ((1, 200), (75, 100), (75,), (1, 75)))
    row = x[:, ::2]
    attrs = dict(act="hardswish", bounds=(-np.inf, np.inf), residual_at="before")
    name, run = LINEAR_EPILOGUE.specialise(row, w, b, r, **attrs)
    assert name == "matvec_hardswish"
    want = LINEAR_EPILOGUE.kernel(row, w, b, r, **attrs)
    out = np.full((1, 75), np.nan, np.float32)
    assert run(row, w, b, r, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(run(row, w, b, r), want, rtol=1e-6, atol=1e-6)
    assert LINEAR_EPILOGUE.specialise(row.astype(np.float64), w.astype(np.float64),
                                      b.astype(np.float64), r.astype(np.float64),
                                      **attrs) is None
    assert LINEAR_EPILOGUE.specialise(np.ones((2, 100), np.float32), w, b,
                                      np.ones((2, 75), np.float32), **attrs) is None
