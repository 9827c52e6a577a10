"""3-D convolution and pooling, ``unfold``/``fold``, ``affine_grid`` and ``grid_sample``
(issue 24) against torch by value and gradient (float64), with finite differences, and
compiled == eager."""
from __future__ import annotations

import numpy as np
import pytest

import dualgraph as dg
from test_program_names import compare

RNG = np.random.default_rng(3)


def _x(*shape):
    return RNG.standard_normal(shape)


CONV3D = [
    ((2, 4, 5, 6, 7), (3, 4, 3, 3, 3), {}),
    ((2, 4, 5, 6, 7), (6, 2, 2, 3, 1), dict(stride=(2, 1, 2), padding=1, groups=2)),
    ((1, 3, 7, 5, 6), (2, 3, 3, 2, 3), dict(dilation=(2, 1, 1), padding=(2, 0, 1))),
    ((1, 2, 4, 5, 5), (3, 2, 2, 3, 3), dict(padding="same")),
    ((2, 4, 4, 4), (2, 2, 3, 3, 3), dict(padding="valid")),      # unbatched
]


@pytest.mark.parametrize("xs,ws,kw", CONV3D)
@pytest.mark.parametrize("bias", [False, True])
def test_conv3d_matches_torch(xs, ws, kw, bias):
    arrays = [_x(*xs), _x(*ws)] + ([_x(ws[0])] if bias else [])
    compare(lambda lib, F, x, w, *b: F.conv3d(x, w, *b, **kw), *arrays)


POOL3D = [
    (2, {}), ((3, 2, 2), dict(stride=(2, 1, 2), padding=(1, 1, 0))),
    (3, dict(stride=2, padding=1, ceil_mode=True)), ((2, 3, 2), dict(stride=1)),
]


@pytest.mark.parametrize("kernel,kw", POOL3D)
def test_max_pool3d_matches_torch(kernel, kw):
    compare(lambda lib, F, x: F.max_pool3d(x, kernel, **kw), _x(2, 3, 6, 7, 5))
    compare(lambda lib, F, x: F.max_pool3d(x, kernel, dilation=(1, 2, 1), **kw),
            _x(3, 7, 8, 6))


@pytest.mark.parametrize("kernel,kw", POOL3D)
@pytest.mark.parametrize("extra", [{}, dict(count_include_pad=False),
                                   dict(divisor_override=5)])
def test_avg_pool3d_matches_torch(kernel, kw, extra):
    compare(lambda lib, F, x: F.avg_pool3d(x, kernel, **kw, **extra), _x(2, 3, 6, 7, 5))


@pytest.mark.parametrize("size", [2, (3, None, 2), (1, 1, 1), (4, 3, 5)])
def test_adaptive_avg_pool3d_matches_torch(size):
    compare(lambda lib, F, x: F.adaptive_avg_pool3d(x, size), _x(2, 3, 6, 7, 5))


UNFOLD = [(2, {}), ((2, 3), dict(stride=2, padding=1)), (3, dict(dilation=2, padding=(2, 1))),
          ((3, 2), dict(stride=(1, 2), dilation=(1, 2)))]


@pytest.mark.parametrize("kernel,kw", UNFOLD)
def test_unfold_and_fold_match_torch(kernel, kw):
    cols = compare(lambda lib, F, x: F.unfold(x, kernel, **kw), _x(2, 3, 7, 8))
    compare(lambda lib, F, c: F.fold(c, (7, 8), kernel, **kw), _x(*cols.shape))
    compare(lambda lib, F, x: lib.nn.Fold((7, 8), kernel, **kw)(lib.nn.Unfold(kernel, **kw)(x)),
            _x(2, 3, 7, 8))


def test_fold_rejects_columns_that_do_not_fit():
    with pytest.raises(ValueError, match=r"fold: input of shape \(1, 8, 10\) does not fit "
                                         r"output_size \(4, 4\)"):
        dg.nn.functional.fold(dg.zeros(1, 8, 10), (4, 4), 2)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size", [(2, 3, 5, 4), (2, 1, 3, 4, 5)])
def test_affine_grid_matches_torch(size, align):
    k = len(size) - 2
    compare(lambda lib, F, t: F.affine_grid(t, size, align_corners=align), _x(2, k, k + 1))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_matches_torch(mode, padding, align):
    grid = RNG.uniform(-1.4, 1.4, (2, 5, 6, 2))   # (some positions outside the image)
    compare(lambda lib, F, x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding,
                                               align_corners=align),
            _x(2, 3, 4, 7), grid, grads=[0] if mode == "nearest" else [0, 1])


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_of_volumes_matches_torch(mode, padding, align):
    grid = RNG.uniform(-1.3, 1.3, (2, 3, 4, 5, 3))   # (N, Do, Ho, Wo, xyz), some outside
    compare(lambda lib, F, x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding,
                                               align_corners=align),
            _x(2, 2, 4, 5, 6), grid, grads=[0, 1] if mode == "bilinear" else [0])


def test_volume_warp_through_affine_grid_matches_torch():
    """A 3-D spatial transformer (VoxelMorph-style warping of a volume)."""
    def warp(lib, F, x, theta):
        return F.grid_sample(x, F.affine_grid(theta, (1, 2, 5, 4, 6), align_corners=True),
                             align_corners=True)
    theta = np.array([[[0.9, 0.1, 0.0, 0.05], [0.0, 1.1, 0.1, 0.0], [0.1, 0.0, 0.95, -0.1]]])
    compare(warp, _x(1, 2, 5, 4, 6), theta)


def test_grid_sample_through_affine_grid_matches_torch():
    def warp(lib, F, x, theta):
        return F.grid_sample(x, F.affine_grid(theta, (2, 3, 6, 5), align_corners=False),
                             align_corners=False, padding_mode="border")
    theta = np.array([[[0.9, 0.2, 0.1], [-0.1, 1.1, 0.05]], [[1.2, 0.0, -0.2], [0.3, 0.8, 0.0]]])
    compare(warp, _x(2, 3, 6, 5), theta)


def test_gradcheck():
    def tensors(*shapes):
        return tuple(dg.tensor(_x(*s), requires_grad=True) for s in shapes)
    assert dg.autograd.gradcheck(lambda x, w: dg.nn.functional.conv3d(x, w, padding=1),
                                 tensors((1, 2, 3, 4, 3), (2, 2, 2, 3, 2)))
    x, = tensors((1, 2, 4, 5))
    grid = dg.tensor(RNG.uniform(-0.9, 0.9, (1, 3, 2, 2)), requires_grad=True)
    assert dg.autograd.gradcheck(lambda x, g: dg.nn.functional.grid_sample(
        x, g, padding_mode="reflection", align_corners=False), (x, grid))


def test_bad_arguments_raise_clear_errors():
    F = dg.nn.functional
    with pytest.raises(ValueError, match=r"expected theta of shape \(2, 2, 3\)"):
        F.affine_grid(dg.zeros(2, 3, 4), (2, 1, 4, 4))
    with pytest.raises(ValueError, match="'bilinear', 'nearest' or 'bicubic'"):
        F.grid_sample(dg.zeros(1, 1, 4, 4), dg.zeros(1, 2, 2, 2), mode="cubic")
    with pytest.raises(ValueError, match=r"grid \(N, Ho, Wo, 2\)"):
        F.grid_sample(dg.zeros(1, 1, 4, 4), dg.zeros(2, 2, 2, 2))
    with pytest.raises(ValueError, match=r"grid \(N, Do, Ho, Wo, 3\)"):
        F.grid_sample(dg.zeros(1, 1, 4, 4, 4), dg.zeros(1, 2, 2, 2, 2))
    with pytest.raises(ValueError, match=r"has 3 channels, but the weight"):
        F.conv3d(dg.zeros(1, 3, 4, 4, 4), dg.zeros(2, 2, 1, 1, 1))


def test_a_3d_cnn_step_and_a_warp_compile_equal_to_eager():
    results = []
    x = dg.tensor(_x(2, 2, 3, 4, 4).astype(np.float32))
    for compiled in (False, True):
        dg.manual_seed(0)
        net = dg.nn.Sequential(dg.nn.Conv3d(2, 4, 3, padding=1), dg.nn.BatchNorm3d(4),
                               dg.nn.ReLU(), dg.nn.MaxPool3d(2), dg.nn.AvgPool3d(1),
                               dg.nn.AdaptiveAvgPool3d(1), dg.nn.Flatten(), dg.nn.Linear(4, 3))
        loc = dg.nn.Linear(3, 6)
        opt = dg.optim.SGD(list(net.parameters()) + list(loc.parameters()), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            theta = loc(x.mean((1, 3, 4))).reshape(-1, 2, 3)   # (N, 2, 3) from the input
            planes = x.reshape(x.shape[0], -1, 4, 4)
            warped = dg.nn.functional.grid_sample(
                planes, dg.nn.functional.affine_grid(theta, planes.shape))
            loss = dg.nn.functional.cross_entropy(net(warped.reshape(x.shape)), y)
            loss.backward()
            opt.step()
            return loss
        step = dg.compile(step) if compiled else step
        losses = [step(x, dg.tensor([0, 2])).item() for _ in range(3)]
        results.append((losses, [p.detach().numpy().copy() for p in net.parameters()]))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5)
    for a, b in zip(results[1][1], results[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_bicubic_grid_sample_compiles_equal_to_eager(padding):
    x = _x(2, 3, 5, 6).astype(np.float32)
    grid = RNG.uniform(-1.3, 1.3, (2, 4, 3, 2)).astype(np.float32)

    def sample(x, g):
        out = dg.nn.functional.grid_sample(x, g, mode="bicubic", padding_mode=padding,
                                           align_corners=True)
        return out, dg.autograd.grad((out * out).sum(), [x, g])
    results = []
    for fn in (sample, dg.compile(sample)):
        out, grads = fn(dg.tensor(x, requires_grad=True), dg.tensor(grid, requires_grad=True))
        results.append([out.detach().numpy()] + [g.numpy() for g in grads])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_in_place_relu_after_max_pool_matches_torch():
    """Max pooling's gradient reads its indices, not its values (``saved_outputs``), so
    ``nn.ReLU(inplace=True)`` after ``nn.MaxPool2d`` differentiates, as in torch."""
    compare(lambda lib, F, x: F.relu(F.max_pool2d(x * 1, 2), inplace=True), _x(2, 3, 6, 6))
    compare(lambda lib, F, x: (x * 1).max(1).values.relu_(), _x(3, 4))


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv3d_layer_padding_modes_match_torch(mode):
    import torch
    ref = torch.nn.Conv3d(2, 3, 3, padding=1, padding_mode=mode).double()
    ours = dg.nn.Conv3d(2, 3, 3, padding=1, padding_mode=mode, dtype=dg.float64)
    ours.load_state_dict({k: dg.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    assert repr(ours) == repr(ref)
    compare(lambda lib, F, x: (ours if lib is dg else ref)(x), _x(1, 2, 4, 5, 6))


def test_linspace_is_torchs_bit_for_bit_in_float32():
    """torch's CPU linspace: a float32 step, the first half from the start and the second
    from the end, each by a fused multiply-add (NumPy's float64 values, rounded, were an ulp
    off at many points)."""
    import torch
    for start, end in [(-1, 1), (0, 1), (-3.3, 7.1), (2, -5), (1e-3, 5e4)]:
        for steps in [0, 1, 2, 3, 7, 11, 13, 16, 17, 33, 100, 257]:
            want = torch.linspace(start, end, steps).numpy()
            np.testing.assert_array_equal(dg.linspace(start, end, steps).numpy(), want)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("size", [(2, 3, 13, 11), (1, 2, 7, 9), (3, 1, 5, 6)])
def test_identity_warp_gradient_matches_torch(size, padding):
    """At the identity (where spatial transformers start) every grid point of
    ``align_corners=False`` lies on a pixel centre, a kink of bilinear sampling: torch's
    grid is its linspace's and its pixel position a fused multiply-add, and which side of
    the centre a point falls on decides theta's gradient. Before, dualgraph's grid was an
    ulp off at 13 x 11 and gave another gradient."""
    import torch
    rng = np.random.default_rng(2)
    x = rng.normal(size=size).astype(np.float32)
    w = rng.normal(size=size).astype(np.float32)
    theta = np.tile(np.eye(2, 3, dtype=np.float32), (size[0], 1, 1))
    got = {}
    for lib in (torch, dg):
        th = lib.tensor(theta, requires_grad=True)
        grid = lib.nn.functional.affine_grid(th, size, align_corners=False)
        out = lib.nn.functional.grid_sample(lib.tensor(x), grid, padding_mode=padding,
                                            align_corners=False)
        (out * lib.tensor(w)).sum().backward()
        got[lib] = grid.detach().numpy(), th.grad.numpy()
    np.testing.assert_array_equal(got[dg][0], got[torch][0])
    np.testing.assert_allclose(got[dg][1], got[torch][1], rtol=1e-5, atol=1e-5)
