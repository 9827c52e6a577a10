"""CNN inference's whole-graph costs (issue 26): the kernels codegen fits to a node's
static shapes (a 1x1 convolution with its epilogue, a mean over trailing dims), each
compiled result checked against eager dualgraph and torch on odd shapes, with the cases
the fitting must leave to the op's kernel."""
import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

ACTS = {"none": (lambda v: v, lambda v: v), "relu": (F.relu, TF.relu),
        "relu6": (F.relu6, TF.relu6), "silu": (F.silu, TF.silu),
        "hardswish": (F.hardswish, TF.hardswish), "gelu": (F.gelu, TF.gelu),
        "sigmoid": (dg.sigmoid, torch.sigmoid)}


def _arrays(rng, *shapes):
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _both(fn, arrays):
    """``fn`` compiled (twice: the first call traces) and eager on dualgraph tensors."""
    compiled = dg.compile(fn)
    tensors = [dg.tensor(a) for a in arrays]
    with dg.no_grad():
        compiled(*tensors)
        got = compiled(*tensors).numpy()
        eager = fn(*tensors).numpy()
    return compiled, got, eager


def conv_layer(lib, f, residual_at, **conv):
    """``f(conv2d(x, wt, b, **conv))`` in ``lib`` with the residual ``r`` added before or
    after ``f`` (``residual_at``) or not at all: ``run(x, wt, b, r)``."""
    def run(x, wt, b, r):
        y = lib.nn.functional.conv2d(x, wt, b, **conv)
        y = y + r if residual_at == "before" else y
        y = f(y)
        return y + r if residual_at == "after" else y
    return run


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("residual_at", [None, "before", "after"])
@pytest.mark.parametrize("shape", [(1, 7, 5, 3), (3, 6, 1, 1), (2, 5, 17, 19)])
def test_1x1_conv_epilogue_fitted_to_its_shapes(act, residual_at, shape):
    """A 1x1 conv with bias, activation and residual (every placement): one GEMM and one
    plane loop bound as ``conv1x1_<act>``, equal to eager and to torch."""
    rng = np.random.default_rng(0)
    n, c, h, w = shape
    x, wt, b, r = _arrays(rng, shape, (4, c, 1, 1), (4,), (n, 4, h, w))
    ours, theirs = ACTS[act]
    compiled, got, eager = _both(conv_layer(dg, ours, residual_at), [x, wt, b, r])
    want = conv_layer(torch, theirs, residual_at)(*map(torch.tensor, (x, wt, b, r))).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if act != "none" or residual_at:
        assert "= conv1x1_" in compiled.code, compiled.code


@pytest.mark.parametrize("groups,bias", [(1, False), (1, True), (3, True)])
def test_plain_1x1_conv_fitted(groups, bias):
    """``conv2d`` alone (grouped, with and without bias) is fitted too: ``conv1x1``."""
    rng = np.random.default_rng(1)
    x, wt, b = _arrays(rng, (2, 6, 5, 7), (9, 6 // groups, 1, 1), (9,))
    fn = (lambda x, w, b: F.conv2d(x, w, b, groups=groups)) if bias else \
        (lambda x, w, b: F.conv2d(x, w, groups=groups) * 1.0)
    compiled, got, eager = _both(fn, [x, wt, b])
    want = TF.conv2d(torch.tensor(x), torch.tensor(wt), torch.tensor(b) if bias else None,
                     groups=groups).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "= conv1x1(" in compiled.code, compiled.code


def test_convs_that_are_not_pointwise():
    """A padded 1x1 conv and a 3x3 conv are not fitted as 1x1 convs (the 3x3 with an
    epilogue runs its tiles' kernel, fitted: ``conv_tiles_<act>``), a strided unpadded
    one is (``kernels/conv_pointwise.py``); a float64 conv keeps the op's kernel."""
    rng = np.random.default_rng(2)
    x, w1, w3, b = _arrays(rng, (1, 4, 9, 9), (4, 4, 1, 1), (4, 4, 3, 3), (4,))
    fn = lambda x, w1, w3, b: F.relu(F.conv2d(F.relu(F.conv2d(x, w1, b, stride=2)), w3, b,
                                              padding=1)) + F.conv2d(x, w1, padding=1)[..., 1:6, 1:6]
    compiled, got, eager = _both(fn, [x, w1, w3, b])
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    assert compiled.code.count("= conv1x1_relu(") == 1, compiled.code
    assert compiled.code.count("= conv_tiles_relu(") == 1, compiled.code
    x64 = [a.astype(np.float64) for a in (x, w1, b)]
    compiled, got, eager = _both(lambda x, w, b: F.relu(F.conv2d(x, w, b)), x64)
    np.testing.assert_allclose(got, eager, rtol=1e-12)
    assert "conv1x1" not in compiled.code and "conv_tiles" not in compiled.code


@pytest.mark.parametrize("batch", [1, 3])
def test_depthwise_conv_epilogue_fitted(batch):
    """A depthwise conv with its hard-swish and a residual: the direct loop, fitted
    (``conv_direct_hardswish``), equal to eager and to torch."""
    x, w, b = _arrays(np.random.default_rng(8), (batch, 6, 9, 11), (6, 1, 3, 3), (6,))
    run = lambda lib, F: lambda x, w, b: F.hardswish(F.conv2d(x, w, b, 2, 1, groups=6))
    compiled, got, eager = _both(run(dg, F), [x, w, b])
    want = run(torch, TF)(*map(torch.tensor, (x, w, b))).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "= conv_direct_hardswish(" in compiled.code, compiled.code


@pytest.mark.parametrize("shape,dims,keepdim", [
    ((2, 5, 7, 3), (2, 3), True), ((1, 9, 1, 1), (-2, -1), False), ((4, 33), (1,), True),
    ((3, 2, 5), (0, 1, 2), False)])
def test_mean_over_trailing_dims_fitted(shape, dims, keepdim):
    """``mean`` over an input's trailing dims (global average pooling) runs one row loop
    (``row_means``); values as eager's and torch's."""
    (x,) = _arrays(np.random.default_rng(3), shape)
    fn = lambda x: dg.mean(x, dim=dims, keepdim=keepdim)
    compiled, got, eager = _both(fn, [x])
    want = torch.mean(torch.tensor(x), dim=dims, keepdim=keepdim).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert "= row_means(" in compiled.code, compiled.code


@pytest.mark.parametrize("shape,dims", [((2, 37, 9, 11), (2, 3)), ((1, 3, 7, 1), (2, 3)),
                                        ((100_003,), (0,)), ((3, 129), (1,)),
                                        ((2, 5, 61, 67), (1, 2, 3))])
def test_fitted_mean_has_eager_bits(shape, dims):
    """The fitted mean sums as NumPy's ``mean`` does (pairwise, blocks of 8 sums): a
    compiled global pool or loss mean is eager's to the bit, also over 100003 elements
    (a left-to-right float32 sum would differ, and lose accuracy there)."""
    (x,) = _arrays(np.random.default_rng(5), shape)
    x = x + np.float32(3)
    compiled, got, eager = _both(lambda x: dg.mean(x, dim=dims), [x])
    np.testing.assert_array_equal(got, eager)
    assert "= row_means(" in compiled.code, compiled.code


def test_mean_not_over_trailing_dims_or_of_a_view():
    """A mean over a leading dim keeps the kernel; a mean of a transposed view (not
    contiguous) is fitted and reads the view correctly."""
    (x,) = _arrays(np.random.default_rng(4), (3, 4, 5))
    compiled, got, eager = _both(lambda x: dg.mean(x, dim=(0,)), [x])
    np.testing.assert_allclose(got, eager, rtol=1e-6)
    assert "row_means" not in compiled.code
    compiled, got, eager = _both(lambda x: dg.mean(x.permute(2, 0, 1), dim=(1, 2)), [x])
    np.testing.assert_allclose(got, x.mean(axis=(0, 1)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-6)
    assert "= row_means(" in compiled.code, compiled.code


def fire(lib, cin=5, squeeze=3, expand=4, tail=None):
    """SqueezeNet's fire module: a 1x1 squeeze, then 1x1 and 3x3 expansions joined along
    the channels; ``tail(lib, e1, e3, cat)`` may change what is returned."""
    nn = lib.nn

    class Fire(nn.Module):
        def __init__(self):
            super().__init__()
            self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
            self.e1 = nn.Conv2d(squeeze, expand, 1)
            self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU6())

        def forward(self, x):
            s = self.squeeze(x)
            e1, e3 = self.e1(s), self.e3(s)
            cat = lib.cat([e1, e3], 1)
            return cat if tail is None else tail(lib, e1, e3, s)
    return Fire()


def _fire_pair(tail=None):
    model, reference = fire(dg, tail=tail).eval(), fire(torch, tail=tail).eval()
    rng = np.random.default_rng(5)
    state = {k: rng.standard_normal(v.shape).astype(np.float32) * 0.5
             for k, v in reference.state_dict().items()}
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    return model, reference


def compiled_eager_torch(model, reference, x):
    """``model`` compiled (called twice: the second call takes the fast path) and eager
    under ``no_grad``, and torch's ``reference``, on the array ``x``: ``(compiled, got,
    eager, want)``."""
    compiled = dg.compile(model)
    with dg.no_grad():
        for _ in range(2):
            got = compiled(dg.tensor(x)).numpy()
        eager = model(dg.tensor(x)).numpy()
    with torch.no_grad():
        want = reference(torch.tensor(x)).numpy()
    return compiled, got, eager, want


def _ops(compiled):
    return [n.op.name for n in compiled.optimized_graph.nodes]


@pytest.mark.parametrize("batch,size", [(1, 9), (3, 7), (2, 1)])
def test_cat_of_convs_written_in_place(batch, size):
    """A fire module's cat of two conv results becomes one conv2d_cat (each conv writes
    its channels of the output: in place, or through a fresh array for convs this small),
    equal to eager and to torch."""
    model, reference = _fire_pair()
    (x,) = _arrays(np.random.default_rng(6), (batch, 5, size, size))
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "conv2d_cat" in _ops(compiled) and "cat" not in _ops(compiled), _ops(compiled)


@pytest.mark.parametrize("tail,why", [
    (lambda lib, e1, e3, s: lib.cat([e1, e3], 1) + e1.sum(), "a member read elsewhere"),
    (lambda lib, e1, e3, s: lib.cat([e1, e3], 2), "along another dim"),
    (lambda lib, e1, e3, s: lib.cat([e1, s, e3], 1), "an input not made by a conv"),
    (lambda lib, e1, e3, s: lib.cat([e1, e1], 1), "one conv joined twice")])
def test_cat_that_must_stay(tail, why):
    """Where the precondition fails the cat stays, and the values are torch's."""
    model, reference = _fire_pair(tail)
    (x,) = _arrays(np.random.default_rng(7), (1, 5, 6, 6))
    compiled, got, _, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "cat" in _ops(compiled) and "conv2d_cat" not in _ops(compiled), (why, _ops(compiled))


def onnx_round_trip(reference, x, path: str, **tolerance) -> list:
    """torch's export of ``reference`` loaded with ``dg.onnx.load``: its output on ``x``
    checked against torch's, and the op names of its optimised graph."""
    pytest.importorskip("onnx")
    torch.onnx.export(reference, (x,), path, dynamo=False, input_names=["x"])
    loaded = dg.onnx.load(path)
    got = loaded(dg.tensor(x.numpy())).numpy()
    with torch.no_grad():
        np.testing.assert_allclose(got, reference(x).numpy(), **tolerance)
    return [n.op.name for n in loaded.executable.graph.nodes]


def test_cat_of_convs_in_an_onnx_import(tmp_path):
    """torch's export of fire modules, loaded with ``dg.onnx.load``, takes the rule too."""
    ops = onnx_round_trip(_fire_pair()[1], torch.randn(1, 5, 8, 8), str(tmp_path / "f.onnx"),
                          rtol=1e-5, atol=1e-5)
    assert "conv2d_cat" in ops and "cat" not in ops, ops
