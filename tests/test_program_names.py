"""Names that third-party PyTorch programs use, found while writing the programs of
tests/torch_programs/ (issue 24): resampling (``F.interpolate``, ``nn.Upsample``,
``pixel_shuffle``), padding layers, metric-learning losses and distances, and
``torch.distributions``; each against torch by value and gradient (float64), and
compiled == eager."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dualgraph as dg
import dualgraph.nn.functional as F

RNG = np.random.default_rng(0)


def compare(fn, *arrays, atol=1e-10, rtol=1e-8, grads=None):
    """``fn(lib, functional, *tensors)`` with dualgraph and torch: the output, and the
    gradients of the floating inputs for a random cotangent."""
    grads = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if grads is None else grads
    ours = [dg.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    theirs = [torch.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    out, ref = fn(dg, F, *ours), fn(torch, TF, *theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=atol,
                               rtol=rtol)
    if grads:
        cotangent = RNG.standard_normal(tuple(ref.shape))
        (out * dg.tensor(cotangent)).sum().backward()
        (ref * torch.tensor(cotangent)).sum().backward()
        for i in grads:
            np.testing.assert_allclose(ours[i].grad.numpy(), theirs[i].grad.numpy(),
                                       atol=atol, rtol=rtol, err_msg=f"gradient of input {i}")
    return out


# -- resampling ----------------------------------------------------------------------------
INTERPOLATIONS = [
    ((1, 2, 5), dict(scale_factor=2, mode="nearest")),
    ((1, 2, 5), dict(size=7, mode="linear")),
    ((1, 2, 5), dict(size=3, mode="linear", align_corners=True)),
    ((2, 3, 4, 5), dict(scale_factor=2, mode="nearest")),
    ((2, 3, 4, 5), dict(size=(3, 7), mode="nearest")),
    ((2, 3, 4, 5), dict(size=(7, 3), mode="nearest-exact")),
    ((2, 3, 4, 5), dict(scale_factor=2, mode="bilinear", align_corners=False)),
    ((2, 3, 4, 5), dict(scale_factor=1.7, mode="bilinear")),
    ((2, 3, 4, 5), dict(scale_factor=(1.5, 0.5), mode="bilinear", recompute_scale_factor=True)),
    ((2, 3, 4, 5), dict(size=(9, 2), mode="bilinear", align_corners=True)),
    ((2, 3, 4, 5), dict(size=(1, 1), mode="bilinear", align_corners=True)),
    ((2, 3, 6, 4), dict(size=(3, 2), mode="area")),
    ((1, 2, 3, 4, 2), dict(scale_factor=2, mode="trilinear")),
    ((1, 2, 3, 4, 2), dict(size=(2, 5, 3), mode="nearest")),
]


@pytest.mark.parametrize("shape,kwargs", INTERPOLATIONS)
def test_interpolate_matches_torch(shape, kwargs):
    compare(lambda lib, f, x: f.interpolate(x, **kwargs), RNG.standard_normal(shape))


def test_upsample_layers_match_torch():
    x = RNG.standard_normal((1, 2, 3, 4))
    for ours, theirs in [(dg.nn.Upsample(scale_factor=2, mode="bilinear"),
                          torch.nn.Upsample(scale_factor=2, mode="bilinear")),
                         (dg.nn.UpsamplingNearest2d(size=(5, 6)),
                          torch.nn.UpsamplingNearest2d(size=(5, 6))),
                         (dg.nn.UpsamplingBilinear2d(scale_factor=2),
                          torch.nn.UpsamplingBilinear2d(scale_factor=2))]:
        np.testing.assert_allclose(ours(dg.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(),
                                   atol=1e-12)
        assert repr(ours) == repr(theirs)


def test_interpolate_errors_say_what_to_do():
    x = dg.zeros(1, 2, 3, 3)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="'linear' expects 3-d input"):
        F.interpolate(x, scale_factor=2, mode="linear")
    with pytest.raises(NotImplementedError, match="'bicubic' is not supported"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="align_corners is only for the linear modes"):
        F.interpolate(x, scale_factor=2, align_corners=True)


@pytest.mark.parametrize("shape,r", [((2, 8, 3, 4), 2), ((18, 2, 2), 3), ((2, 2, 4, 2, 3), 2)])
def test_pixel_shuffle_and_unshuffle_match_torch(shape, r):
    x = RNG.standard_normal(shape)
    y = compare(lambda lib, f, t: f.pixel_shuffle(t, r), x)
    compare(lambda lib, f, t: f.pixel_unshuffle(t, r), y.detach().numpy())
    assert repr(dg.nn.PixelShuffle(r)) == repr(torch.nn.PixelShuffle(r))
    with pytest.raises(ValueError, match="divisible"):
        F.pixel_shuffle(dg.zeros(1, 3, 2, 2), 2)


@pytest.mark.parametrize("name,args", [("ReflectionPad2d", (2,)), ("ReflectionPad1d", ((1, 2),)),
                                       ("ReplicationPad2d", ((1, 0, 2, 1),)),
                                       ("ReplicationPad1d", (1,)), ("ZeroPad2d", ((0, 1, 2, 0),)),
                                       ("ZeroPad1d", (2,)), ("ConstantPad2d", (1, 3.5)),
                                       ("ConstantPad1d", ((2, 1), -1.0))])
def test_padding_layers_match_torch(name, args):
    ours, theirs = getattr(dg.nn, name)(*args), getattr(torch.nn, name)(*args)
    compare(lambda lib, f, x: (ours if lib is dg else theirs)(x),
            RNG.standard_normal((2, 3, 4, 5) if name.endswith("2d") else (3, 4, 5)))
    assert repr(ours) == repr(theirs)


def test_resampling_compiled_matches_eager():
    """A decoder stage of a U-Net: upsample, pad, concatenate the skip, pixel-shuffle."""
    def block(x, skip):
        up = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        up = dg.nn.ReflectionPad2d((0, 1, 0, 1))(up)
        return F.pixel_shuffle(dg.cat([up, skip], dim=1), 2).sum(dim=1)

    x = dg.tensor(RNG.standard_normal((2, 4, 3, 3)).astype(np.float32), requires_grad=True)
    skip = dg.tensor(RNG.standard_normal((2, 4, 7, 7)).astype(np.float32))
    want = block(x, skip)
    want.sum().backward()
    grad, x.grad = x.grad.numpy().copy(), None
    got = dg.compile(block)(x, skip)
    got.sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-5, atol=1e-6)


# -- metric learning -----------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_metric_learning_losses_match_torch(reduction):
    a, b, c = (RNG.standard_normal((5, 4)) for _ in range(3))
    sign = np.array([1.0, -1.0, 1.0, -1.0, -1.0])
    compare(lambda lib, f, x, y, t: f.margin_ranking_loss(x, y, t, 0.2, reduction=reduction),
            a[:, 0], b[:, 0], sign, grads=[0, 1])
    compare(lambda lib, f, x, y, t: f.cosine_embedding_loss(x, y, t, 0.1, reduction=reduction),
            a, b, sign, grads=[0, 1])
    for swap in (False, True):
        compare(lambda lib, f, x, y, z: f.triplet_margin_loss(x, y, z, 0.5, 1.5, swap=swap,
                                                              reduction=reduction), a, b, c)


def test_metric_learning_layers_match_torch():
    a, b, c = (RNG.standard_normal((5, 4)) for _ in range(3))
    sign = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
    pairs = [("TripletMarginLoss", dict(margin=0.3), (a, b, c)),
             ("CosineEmbeddingLoss", dict(margin=0.2), (a, b, sign)),
             ("MarginRankingLoss", dict(margin=0.1), (a[:, 0], b[:, 0], sign)),
             ("PairwiseDistance", dict(p=1.0, keepdim=True), (a, b)),
             ("CosineSimilarity", dict(dim=0), (a, b))]
    for name, kwargs, arrays in pairs:
        compare(lambda lib, f, *xs: getattr(lib.nn, name)(**kwargs)(*xs), *arrays,
                grads=[0, 1])
