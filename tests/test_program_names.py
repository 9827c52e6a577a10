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
            if ours[i].grad is None and theirs[i].grad is None:   # (an unused input)
                continue
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
    # bicubic: four taps clamped at the borders, sources left unclamped below 0
    ((2, 3, 4, 5), dict(scale_factor=2, mode="bicubic")),
    ((2, 3, 4, 5), dict(scale_factor=1.7, mode="bicubic", align_corners=True)),
    ((2, 3, 6, 5), dict(size=(3, 8), mode="bicubic")),
    ((1, 2, 5, 2), dict(size=(1, 1), mode="bicubic", align_corners=True)),
    ((1, 2, 3, 4, 2), dict(size=(2, 5, 3), mode="nearest")),
    # integer factors: a broadcast view copied once, its gradient a sum of a few slices
    # (big enough for that kernel), mixed with index_select where a dim is not a multiple
    ((2, 3, 40, 30), dict(scale_factor=2, mode="nearest")),
    ((2, 3, 40, 30), dict(scale_factor=(3, 1), mode="nearest-exact")),
    ((2, 3, 40, 30), dict(size=(80, 45), mode="nearest")),
    ((1, 2, 30, 7), dict(size=(90, 13), mode="nearest-exact")),
    ((2, 64, 20), dict(scale_factor=4, mode="nearest")),
    ((1, 2, 3, 4, 2), dict(scale_factor=(2, 1, 3), mode="nearest")),
    # antialias (round 13: super-resolution's low-resolution inputs made by shrinking):
    # PIL's filters stretched by the scale, cut at the borders and renormalised
    ((2, 3, 13, 17), dict(size=(5, 4), mode="bilinear", antialias=True)),
    ((2, 3, 13, 17), dict(scale_factor=0.37, mode="bicubic", antialias=True)),
    ((2, 3, 13, 17), dict(size=(6, 9), mode="bicubic", antialias=True, align_corners=True)),
    ((2, 3, 13, 17), dict(scale_factor=(0.5, 2.5), mode="bilinear", antialias=True)),
    ((1, 2, 13, 17), dict(size=(30, 2), mode="bicubic", antialias=True)),
    ((1, 2, 13, 17), dict(scale_factor=0.3, mode="bilinear", antialias=True,
                          recompute_scale_factor=True)),
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
    with pytest.raises(ValueError, match="'bicubic' expects 4-d input"):
        F.interpolate(dg.zeros(1, 2, 3), scale_factor=2, mode="bicubic")
    with pytest.raises(NotImplementedError, match="'lanczos' is not supported"):
        F.interpolate(x, scale_factor=2, mode="lanczos")
    with pytest.raises(ValueError, match="align_corners is only for the linear modes"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(ValueError, match="Anti-alias option restricted to bilinear and bicubic"):
        F.interpolate(x, scale_factor=0.5, mode="nearest", antialias=True)


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
        up = up + F.interpolate(x, size=(6, 6), mode="bicubic")
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


# -- distributions -------------------------------------------------------------------------
def _dists(lib, logits, loc, scale):
    D = lib.distributions
    return [D.Categorical(logits=logits), D.Categorical(probs=lib.softmax(logits, -1) * 3),
            D.Bernoulli(logits=loc), D.Bernoulli(probs=lib.sigmoid(loc)), D.Normal(loc, scale),
            D.Independent(D.Normal(loc, scale), 1)]


def test_distributions_match_torch():
    """log_prob, entropy, mean/variance and kl_divergence with their gradients."""
    logits, loc = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    scale = RNG.uniform(0.5, 2.0, (3, 4))
    value = {"Categorical": np.array([0, 3, 1]), "Bernoulli": (loc > 0).astype(np.float64),
             "Normal": RNG.standard_normal((3, 4)), "Independent": RNG.standard_normal((3, 4))}
    used = [[0], [0], [1], [1], [1, 2], [1, 2]]     # the inputs each distribution reads

    def stat(lib, k, what, lg, lc, sc):
        d = _dists(lib, lg, lc, sc)[k]
        if what == "kl":
            return lib.distributions.kl_divergence(d, _dists(lib, lg * 0.5, lc + 1.0, sc * 1.5)[k])
        if what == "log_prob":
            v = value[type(d).__name__]
            return d.log_prob(lib.tensor(v) if lib is dg else torch.tensor(v))
        return d.entropy() if what == "entropy" else getattr(d, what)

    for k in range(6):
        whats = ["log_prob", "entropy", "kl"] + (["mean", "variance", "stddev"] if k >= 2 else [])
        for what in whats:
            compare(lambda lib, f, *xs: stat(lib, k, what, *xs), logits, loc, scale,
                    grads=used[k])


def test_distribution_samples_and_shapes():
    dg.manual_seed(0)
    probs = dg.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    c = dg.distributions.Categorical(probs=probs)
    draws = c.sample((2000,))
    assert draws.shape == (2000, 2) and draws.dtype == dg.int64
    assert (draws[:, 0] == 1).all().item() and set(draws[:, 1].tolist()) == {0, 2}
    assert abs((draws[:, 1] == 2).float().mean().item() - 0.5) < 0.05
    n = dg.distributions.Normal(dg.zeros(3), dg.ones(3) * 2.0)
    assert n.sample((4,)).shape == (4, 3) and n.batch_shape == (3,)
    x = n.rsample((5000,))
    assert abs(x.std().item() - 2.0) < 0.1
    ind = dg.distributions.Independent(n, 1)
    assert (ind.batch_shape, ind.event_shape) == ((), (3,))
    b = dg.distributions.Bernoulli(probs=dg.tensor([0.0, 1.0]))
    assert b.sample().tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="either probs or logits"):
        dg.distributions.Categorical()
    with pytest.raises(NotImplementedError, match="rsample"):
        c.rsample()


def test_policy_gradient_loss_compiled_matches_eager():
    """An actor-critic update: log_prob of the taken actions, entropy, a Normal's log_prob."""
    logits = dg.tensor(RNG.standard_normal((5, 3)).astype(np.float32), requires_grad=True)
    actions = dg.tensor([0, 2, 1, 1, 0])

    def loss(logits, actions):
        d = dg.distributions.Categorical(logits=logits)
        g = dg.distributions.Normal(logits[:, 0], dg.exp(logits[:, 1]))
        return -(d.log_prob(actions) * 0.3).sum() - 0.01 * d.entropy().mean() \
            - g.log_prob(logits[:, 2]).mean()

    want = loss(logits, actions)
    want.backward()
    grad, logits.grad = logits.grad.numpy().copy(), None
    got = dg.compile(loss)(logits, actions)
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    np.testing.assert_allclose(logits.grad.numpy(), grad, rtol=1e-5, atol=1e-6)


# -- small names ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "NAdam"])
def test_optimizers_accept_torchs_implementation_choices(name):
    """nanoGPT-style ``AdamW(groups, lr=..., fused=use_fused)``: how torch runs the update,
    the same update here; a user's subclass keeps its own signature."""
    w = dg.nn.Parameter(dg.ones(3))
    opt = getattr(dg.optim, name)([w], lr=0.1, foreach=False, fused=False, capturable=False)
    assert opt.param_groups[0]["lr"] == 0.1
    with pytest.raises(NotImplementedError, match="differentiable=True"):
        getattr(dg.optim, name)([w], lr=0.1, differentiable=True)

    class Mine(dg.optim.SGD):
        def __init__(self, params, foreach="mine"):
            super().__init__(params, lr=0.5)
            self.mine = foreach
    assert Mine([w], foreach=3).mine == 3


def test_index_with_a_range_matches_torch():
    """``log_probs[range(batch), actions]`` (policy-gradient code)."""
    x = RNG.standard_normal((4, 3))
    idx = np.array([2, 0, 1, 1])
    compare(lambda lib, f, t, i: t[range(4), i], x, idx)


def test_softmax_without_dim_picks_torchs_implicit_dim():
    """Old programs call ``F.log_softmax(x)``; torch warns and picks dim 1 for 2-d input."""
    x = RNG.standard_normal((2, 3, 4))
    for lib, f in ((dg, F), (torch, TF)):
        with pytest.warns(UserWarning, match="Implicit dimension choice"):
            y = f.log_softmax(lib.tensor(x))
        if lib is dg:
            ours = y.numpy()
    np.testing.assert_allclose(ours, y.numpy(), atol=1e-12)
    compare(lambda lib, f, t: f.softmax(t, dim=1, _stacklevel=5), x)


def test_linalg_norms_sparse_meshgrid_cdist_match_torch():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((5, 4))
    compare(lambda lib, f, t: lib.linalg.vector_norm(t, 3, dim=1), a)
    compare(lambda lib, f, t: lib.linalg.matrix_norm(t), a)
    compare(lambda lib, f, t: lib.linalg.norm(t), a)
    compare(lambda lib, f, t: lib.linalg.norm(t, dim=0), a)
    compare(lambda lib, f, t, u: lib.cdist(t, u), a, b)
    compare(lambda lib, f, t, u: lib.cdist(t, u, p=1.0), a, b)
    for indexing in ("ij", "xy"):
        for ours, theirs in zip(dg.meshgrid(dg.arange(3), dg.arange(4), dg.arange(2),
                                            indexing=indexing),
                                torch.meshgrid(torch.arange(3), torch.arange(4),
                                               torch.arange(2), indexing=indexing)):
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    idx, val = np.array([[0, 2, 2, 1], [1, 0, 0, 3]]), RNG.standard_normal(4)
    for size in (None, (4, 5)):
        extra = () if size is None else (size,)
        ours = dg.sparse_coo_tensor(dg.tensor(idx), dg.tensor(val), *extra)
        theirs = torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(val), *extra)
        np.testing.assert_allclose(ours.to_dense().numpy(), theirs.to_dense().numpy())
        rhs = RNG.standard_normal((ours.shape[1], 2))
        np.testing.assert_allclose(dg.sparse.mm(ours, dg.tensor(rhs)).numpy(),
                                   torch.sparse.mm(theirs, torch.tensor(rhs)).numpy(),
                                   atol=1e-12)
    assert dg.version.cuda is None and dg.version.__version__ == dg.__version__


def test_weighted_random_sampler_and_gumbel_softmax():
    counts = np.bincount(list(dg.utils.data.WeightedRandomSampler(
        dg.tensor([1.0, 0.0, 3.0]), 4000, generator=dg.Generator().manual_seed(0))), minlength=3)
    assert counts[1] == 0 and abs(counts[2] / 4000 - 0.75) < 0.03
    drawn = list(dg.utils.data.WeightedRandomSampler([1.0, 1.0, 0.0, 2.0], 3, replacement=False))
    assert sorted(drawn) == [0, 1, 3]
    with pytest.raises(ValueError, match="only 3 weights are > 0"):
        dg.utils.data.WeightedRandomSampler([1.0, 1.0, 0.0, 2.0], 4, replacement=False)
    logits = dg.tensor(RNG.standard_normal((4, 5)), requires_grad=True)
    y = F.gumbel_softmax(logits, tau=0.5, hard=True)
    assert (y.sum(-1) == 1).all().item() and ((y == 0) | (y == 1)).all().item()
    (y * dg.arange(5.0)).sum().backward()
    assert logits.grad is not None and float(logits.grad.abs().sum()) > 0
    soft = F.gumbel_softmax(logits, tau=2.0)
    np.testing.assert_allclose(soft.sum(-1).detach().numpy(), 1.0, rtol=1e-12)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, side):
    seqs = [RNG.standard_normal((n, 3)) for n in (2, 5, 1)]
    ours = dg.nn.utils.rnn.pad_sequence([dg.tensor(s, requires_grad=True) for s in seqs],
                                        batch_first=batch_first, padding_value=-1.0,
                                        padding_side=side)
    theirs = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs],
                                             batch_first=batch_first, padding_value=-1.0,
                                             padding_side=side)
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.numpy())


def test_bincount_searchsorted_bucketize_match_torch():
    """A confusion matrix (``bincount(n * target + pred, minlength=n * n)``) and bucketing,
    as evaluation code writes them; searchsorted traces (compiled == eager)."""
    x = RNG.integers(0, 6, 20)
    w = RNG.uniform(0, 1, 20)
    for kwargs in ({}, {"minlength": 9}):
        np.testing.assert_array_equal(dg.bincount(dg.tensor(x), **kwargs).numpy(),
                                      torch.bincount(torch.tensor(x), **kwargs).numpy())
    ours = dg.bincount(dg.tensor(x), weights=dg.tensor(w.astype(np.float32)))
    theirs = torch.bincount(torch.tensor(x), weights=torch.tensor(w.astype(np.float32)))
    assert ours.dtype == dg.float32 and theirs.dtype == torch.float32
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="non-negative"):
        dg.bincount(dg.tensor([-1, 2]))
    seq = np.sort(RNG.integers(0, 10, (3, 6)), axis=1).astype(np.float64)
    vals = RNG.integers(-1, 11, (3, 4)).astype(np.float64)
    for right in (False, True):
        want = torch.searchsorted(torch.tensor(seq), torch.tensor(vals), right=right).numpy()
        np.testing.assert_array_equal(
            dg.searchsorted(dg.tensor(seq), dg.tensor(vals), right=right).numpy(), want)
        compiled = dg.compile(lambda s, v, right=right: dg.searchsorted(s, v, right=right))
        np.testing.assert_array_equal(compiled(dg.tensor(seq), dg.tensor(vals)).numpy(), want)
        np.testing.assert_array_equal(
            dg.bucketize(dg.tensor(vals), dg.tensor(seq[0]), right=right).numpy(),
            torch.bucketize(torch.tensor(vals), torch.tensor(seq[0]), right=right).numpy())
    assert dg.searchsorted(dg.tensor(seq[0]), dg.tensor(vals[0]), out_int32=True).dtype == \
        dg.int32


def test_searchsorted_with_a_sorter_matches_torch():
    """``sorter=`` (the indices that sort an unsorted sequence, as calibration code passes
    ``argsort`` of its reference scores): positions in the sorted order, both sides, 1-d and
    batched, eager and compiled; a sorter of another shape or dtype is refused as torch's."""
    seq = RNG.normal(size=(3, 7)).astype(np.float32)
    seq[0, 2] = seq[0, 5]   # (ties: the sides differ)
    vals = np.concatenate([RNG.normal(size=(3, 4)), seq[:, :2]], 1).astype(np.float32)
    for side in ("left", "right"):
        for s, v in ((seq, vals), (seq[0], vals[1])):
            sorter = np.argsort(s, axis=-1, kind="stable")
            want = torch.searchsorted(torch.tensor(s), torch.tensor(v), side=side,
                                      sorter=torch.tensor(sorter)).numpy()
            got = dg.searchsorted(dg.tensor(s), dg.tensor(v), side=side,
                                  sorter=dg.tensor(sorter))
            compiled = dg.compile(lambda a, b, c, side=side: dg.searchsorted(
                a, b, side=side, sorter=c))(dg.tensor(s), dg.tensor(v), dg.tensor(sorter))
            np.testing.assert_array_equal(got.numpy(), want)
            np.testing.assert_array_equal(compiled.numpy(), want)
    with pytest.raises(RuntimeError, match="same size"):
        dg.searchsorted(dg.tensor(seq), dg.tensor(vals), sorter=dg.tensor([0, 1]))



@pytest.mark.parametrize("shape,size", [((2, 3, 7, 5), (3, 2)), ((2, 3, 8, 6), 2),
                                        ((3, 7, 5), (None, 3)), ((2, 3, 5, 5), 1)])
def test_adaptive_max_pool_matches_torch(shape, size):
    x = RNG.standard_normal(shape)
    compare(lambda lib, f, t: f.adaptive_max_pool2d(t, size), x)
    compare(lambda lib, f, t: lib.nn.AdaptiveMaxPool2d(size)(t), x)
    compare(lambda lib, f, t: f.adaptive_max_pool1d(t.flatten(-2), 4), x)


@pytest.mark.parametrize("shape,size", [((2, 3, 7, 5), (3, 2)), ((2, 3, 8, 6), 2),
                                        ((3, 7, 5), (None, 3)), ((1, 2, 5, 5), 5),
                                        ((2, 2, 9, 9), (4, None))])
def test_adaptive_max_pool_returns_torch_indices(shape, size):
    """Values (and their gradient) and flat H*W indices as torch's, ties included (the
    first maximum in row-major order), eager and compiled; the indices pick the values."""
    x = RNG.standard_normal(shape)
    x[..., 0, 1] = x[..., 0, 0]
    values = compare(lambda lib, f, t: f.adaptive_max_pool2d(t, size, return_indices=True)[0],
                     x)
    indices = F.adaptive_max_pool2d(dg.tensor(x), size, return_indices=True)[1]
    want = TF.adaptive_max_pool2d(torch.tensor(x), size, return_indices=True)[1]
    assert indices.dtype == dg.int64
    np.testing.assert_array_equal(indices.numpy(), want.numpy())
    pool = dg.compile(lambda t: F.adaptive_max_pool2d(t, size, return_indices=True))
    got_values, got_indices = pool(dg.tensor(x))
    np.testing.assert_array_equal(got_values.numpy(), values.detach().numpy())
    np.testing.assert_array_equal(got_indices.numpy(), want.numpy())
    module_values, module_indices = dg.nn.AdaptiveMaxPool2d(size, return_indices=True)(
        dg.tensor(x))
    np.testing.assert_array_equal(module_indices.numpy(), want.numpy())
    flat = x.reshape(x.shape[:-2] + (-1,))
    np.testing.assert_array_equal(np.take_along_axis(
        flat, want.numpy().reshape(want.shape[:-2] + (-1,)), -1).reshape(want.shape),
        module_values.numpy())
    line = x.reshape(x.shape[:-2] + (-1,))
    got = F.adaptive_max_pool1d(dg.tensor(line), 4, return_indices=True)
    expected = TF.adaptive_max_pool1d(torch.tensor(line), 4, return_indices=True)
    for ours, theirs in zip(got, expected):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
