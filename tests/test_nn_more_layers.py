"""The less common layers and losses of ``torch.nn`` (EmbeddingBag, LocalResponseNorm,
ChannelShuffle, LPPool, MaxUnpool, RReLU, alpha dropout, the margin and likelihood losses,
3-d and circular padding, the in-place functional activations) against PyTorch: forward
values and the gradients of every floating input in float64, the modules' printed forms,
compiled against eager, and the errors for bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dualgraph as dg
import dualgraph.nn.functional as F

RNG = np.random.default_rng(0)


def normal(*shape):
    return RNG.standard_normal(shape)


def compare(fn, *arrays, grads=None, atol=1e-10, rtol=1e-8):
    """``fn(lib, functional, *tensors)`` with dualgraph and torch on the same arrays: the
    outputs and the gradients of the floating inputs (or of those in ``grads``) agree."""
    grads = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if grads is None else grads
    ours = [dg.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    theirs = [torch.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    out, ref = fn(dg, F, *ours), fn(torch, TF, *theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=atol, rtol=rtol)
    if grads:
        cotangent = normal(*ref.shape)
        (out * dg.tensor(cotangent)).sum().backward()
        (ref * torch.tensor(cotangent)).sum().backward()
        for i in grads:
            np.testing.assert_allclose(ours[i].grad.numpy(), theirs[i].grad.numpy(),
                                       atol=atol, rtol=rtol, err_msg=f"gradient of input {i}")
    return out


# -- embedding bags ------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_with_offsets(mode, padding_idx):
    """Bags of 1-D input split at offsets: an empty bag in the middle, a bag that is only
    padding, repeated indices (their gradients add)."""
    weight = normal(7, 4)
    indices = np.array([1, 2, 4, 4, 2, 2, 0, 6, 3])
    offsets = np.array([0, 3, 3, 4, 6])
    compare(lambda lib, f, w, i, o: f.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx),
            weight, indices, offsets)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_a_2d_input(mode):
    compare(lambda lib, f, w, i: f.embedding_bag(i, w, mode=mode, padding_idx=0),
            normal(6, 3), RNG.integers(0, 6, (4, 5)))


def test_embedding_bag_include_last_offset_and_per_sample_weights():
    weight, indices = normal(5, 3), np.array([0, 1, 2, 3, 4, 1, 1])
    offsets = np.array([0, 2, 5, 6])   # three bags; the position after 6 belongs to none
    compare(lambda lib, f, w, i, o, s: f.embedding_bag(
        i, w, o, mode="sum", per_sample_weights=s, include_last_offset=True),
        weight, indices, offsets, normal(7))


def test_embedding_bag_module_matches_torch():
    torch.manual_seed(0)
    theirs = torch.nn.EmbeddingBag(9, 4, mode="max", padding_idx=1)
    ours = dg.nn.EmbeddingBag(9, 4, mode="max", padding_idx=1)
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()})
    assert repr(ours) == repr(theirs)
    indices, offsets = np.array([1, 3, 5, 7, 1]), np.array([0, 1, 4])
    np.testing.assert_allclose(
        ours(dg.tensor(indices), dg.tensor(offsets)).detach().numpy(),
        theirs(torch.tensor(indices), torch.tensor(offsets)).detach().numpy(), rtol=1e-6)
    assert float(np.abs(ours.weight.detach().numpy()[1]).max()) == 0.0   # the padding row
    bag = dg.nn.EmbeddingBag.from_pretrained(dg.tensor(normal(3, 2)), mode="sum")
    assert not bag.weight.requires_grad and repr(bag) == "EmbeddingBag(3, 2, mode='sum')"


def test_embedding_bag_compiled_matches_eager():
    bag = dg.nn.EmbeddingBag(8, 3, mode="mean")
    indices, offsets = dg.tensor([0, 5, 5, 7, 2, 1]), dg.tensor([0, 2, 2, 5])

    def step(i, o):
        out = bag(i, o)
        out.square().sum().backward()
        return out

    eager = step(indices, offsets).detach().numpy()
    eager_grad = bag.weight.grad.numpy().copy()
    bag.weight.grad = None
    compiled = dg.compile(step)
    np.testing.assert_allclose(compiled(indices, offsets).detach().numpy(), eager, rtol=1e-6)
    np.testing.assert_allclose(bag.weight.grad.numpy(), eager_grad, rtol=1e-6)


def test_embedding_bag_errors():
    weight = dg.tensor(normal(4, 2))
    with pytest.raises(ValueError, match="offsets must be None"):
        F.embedding_bag(dg.tensor([[0, 1]]), weight, dg.tensor([0]))
    with pytest.raises(ValueError, match="needs 1-D offsets"):
        F.embedding_bag(dg.tensor([0, 1]), weight)
    with pytest.raises(NotImplementedError, match="only supported for mode='sum'"):
        F.embedding_bag(dg.tensor([0, 1]), weight, dg.tensor([0]),
                        per_sample_weights=dg.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="mode must be"):
        F.embedding_bag(dg.tensor([0, 1]), weight, dg.tensor([0]), mode="median")


# -- normalisation, channels, pooling ------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 7, 5), (2, 6, 3, 4), (1, 5, 2, 3, 2)])
@pytest.mark.parametrize("size", [1, 2, 5])
def test_local_response_norm(shape, size):
    compare(lambda lib, f, x: f.local_response_norm(x, size, alpha=0.3, beta=0.6, k=1.5),
            normal(*shape))


def test_channel_shuffle():
    x = normal(2, 6, 3, 2)
    compare(lambda lib, f, x: f.channel_shuffle(x, 3) if lib is dg else
            torch.nn.ChannelShuffle(3)(x), x)
    with pytest.raises(ValueError, match="divisible by groups=4"):
        F.channel_shuffle(dg.tensor(x), 4)


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("stride,ceil_mode", [(None, False), (2, True), (1, False)])
def test_lp_pool(norm_type, stride, ceil_mode):
    x = np.abs(normal(2, 3, 7, 6)) + 0.1   # (torch's gradient at 0 is nan for p < 1)
    compare(lambda lib, f, x: f.lp_pool2d(x, norm_type, (3, 2), stride, ceil_mode), x)
    compare(lambda lib, f, x: f.lp_pool1d(x, norm_type, 3, stride, ceil_mode), x[:, :, 0])


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("output_size", [None, "bigger"])
def test_max_unpool(dims, output_size):
    shape = (2, 3, 8) if dims == 1 else (2, 3, 6, 4)
    x = normal(*shape)
    pool = {1: TF.max_pool1d, 2: TF.max_pool2d}[dims]
    _, idx = pool(torch.tensor(x), 2, return_indices=True)
    size = None if output_size is None else tuple(n + 1 for n in shape[2:])

    def unpool(lib, f, x, indices):
        pooled = (lib.sin(x) * 2)
        pooled = {1: f.max_pool1d, 2: f.max_pool2d}[dims](pooled, 2)
        return {1: f.max_unpool1d, 2: f.max_unpool2d}[dims](pooled, indices, 2,
                                                            output_size=size)
    compare(unpool, x, idx.numpy())
    with pytest.raises(ValueError, match="invalid output_size"):
        {1: F.max_unpool1d, 2: F.max_unpool2d}[dims](dg.zeros(*idx.shape), dg.tensor(
            idx.numpy()), 2, output_size=tuple(n + 2 for n in shape[2:]))
    module = {1: dg.nn.MaxUnpool1d, 2: dg.nn.MaxUnpool2d}[dims](2)
    reference = {1: torch.nn.MaxUnpool1d, 2: torch.nn.MaxUnpool2d}[dims](2)
    assert repr(module) == repr(reference)


# -- activations and dropout ---------------------------------------------------------------------
def test_rrelu_eval_is_leaky_relu_with_the_mean_slope_and_training_draws_in_range():
    x = normal(4, 5)
    compare(lambda lib, f, x: f.rrelu(x, 0.1, 0.3), x)
    out = F.rrelu(dg.tensor(x), 0.1, 0.3, training=True).numpy()
    slope = out[x < 0] / x[x < 0]
    assert ((slope >= 0.1) & (slope <= 0.3)).all() and slope.std() > 0
    assert (out[x >= 0] == x[x >= 0]).all()
    assert repr(dg.nn.RReLU(0.1, 0.3)) == repr(torch.nn.RReLU(0.1, 0.3))


@pytest.mark.parametrize("name", ["relu_", "leaky_relu_", "elu_", "hardtanh_", "selu_",
                                  "celu_"])
def test_in_place_functional_activations(name):
    x = normal(3, 4)
    ours, theirs = dg.tensor(x), torch.tensor(x)
    assert getattr(F, name)(ours) is ours
    getattr(TF, name)(theirs)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
    t = dg.tensor(x)
    F.threshold_(t, 0.2, -1.0)
    np.testing.assert_array_equal(t.numpy(), TF.threshold(torch.tensor(x), 0.2, -1.0).numpy())


@pytest.mark.parametrize("fn", ["alpha_dropout", "feature_alpha_dropout"])
def test_alpha_dropout_keeps_selu_statistics(fn):
    """Standard-normal input keeps mean 0 and variance 1 (what alpha dropout is for); the
    dropped entries (a fraction p) all take one value, in whole channels for the feature
    form; eval mode is the identity."""
    dg.manual_seed(0)
    x = dg.tensor(RNG.standard_normal((400, 50, 2)))
    out = getattr(F, fn)(x, 0.3, training=True).numpy()
    assert abs(out.mean()) < 0.02 and abs(out.var() - 1) < 0.03
    alpha = 1.7580993408473766
    a = 1 / np.sqrt((alpha ** 2 * 0.3 + 1) * 0.7)
    dropped = np.isclose(out, alpha * a * (0.3 - 1), rtol=0, atol=1e-12)
    assert abs(dropped.mean() - 0.3) < 0.02
    kept = x.numpy()[~dropped] * a + alpha * a * 0.3   # scaled and shifted
    np.testing.assert_allclose(out[~dropped], kept, rtol=1e-12)
    if fn == "feature_alpha_dropout":
        assert (dropped == dropped[..., :1]).all()
    assert getattr(F, fn)(x, 0.3, training=False) is x


def test_dropout3d_drops_whole_channels():
    dg.manual_seed(1)
    out = F.dropout3d(dg.ones(4, 6, 2, 3, 2), 0.5).numpy()
    per_channel = out.reshape(4, 6, -1)
    assert ((per_channel == 0).all(-1) | (per_channel == 2).all(-1)).all()
    assert (per_channel == 0).any() and (per_channel == 2).any()


@pytest.mark.parametrize("name,lambd", [("hardshrink", 0.5), ("softshrink", 0.3)])
def test_shrink_modules(name, lambd):
    cls = {"hardshrink": "Hardshrink", "softshrink": "Softshrink"}[name]
    x = normal(3, 4)
    np.testing.assert_allclose(getattr(dg.nn, cls)(lambd)(dg.tensor(x)).numpy(),
                               getattr(torch.nn, cls)(lambd)(torch.tensor(x)).numpy())
    assert repr(getattr(dg.nn, cls)(lambd)) == repr(getattr(torch.nn, cls)(lambd))


def test_softmax2d():
    compare(lambda lib, f, x: (dg.nn.Softmax2d() if lib is dg else torch.nn.Softmax2d())(x),
            normal(2, 3, 4, 2))


# -- losses --------------------------------------------------------------------------------------
REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_soft_and_multilabel_soft_margin_losses(reduction):
    x, signs = normal(4, 5), np.sign(normal(4, 5))
    compare(lambda lib, f, x, y: f.soft_margin_loss(x, y, reduction=reduction), x, signs,
            grads=[0])
    labels = (normal(4, 5) > 0).astype(np.float64)
    compare(lambda lib, f, x, y, w: f.multilabel_soft_margin_loss(x, y, w, reduction=reduction),
            x, labels, np.abs(normal(5)), grads=[0])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p,margin", [(1, 1.0), (2, 0.5)])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss(reduction, p, margin, weighted):
    x, y = normal(5, 4), RNG.integers(0, 4, 5)
    w = np.abs(normal(4)) if weighted else None
    if weighted:
        compare(lambda lib, f, x, y, w: f.multi_margin_loss(x, y, p, margin, w,
                                                            reduction=reduction), x, y, w,
                grads=[0])
    else:
        compare(lambda lib, f, x, y: f.multi_margin_loss(x, y, p, margin,
                                                         reduction=reduction), x, y)
    compare(lambda lib, f, x, y: f.multi_margin_loss(x, y), normal(4), np.array(2))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss(reduction):
    x = normal(3, 5)
    target = np.array([[3, 0, -1, 1, 4], [1, 2, 3, 4, 0], [-1, 2, 1, 0, 0]])
    compare(lambda lib, f, x, y: f.multilabel_margin_loss(x, y, reduction=reduction), x, target)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_hinge_embedding_loss(reduction):
    compare(lambda lib, f, x, y: f.hinge_embedding_loss(x, y, 0.7, reduction=reduction),
            normal(4, 3), np.sign(normal(4, 3)), grads=[0])


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("custom", [False, True])
def test_triplet_margin_with_distance_loss(swap, custom):
    def loss(lib, f, a, p, n):
        distance = (lambda u, v: 1.0 - f.cosine_similarity(u, v)) if custom else None
        return f.triplet_margin_with_distance_loss(a, p, n, distance_function=distance,
                                                   margin=0.8, swap=swap)
    compare(loss, normal(5, 3), normal(5, 3), normal(5, 3))


@pytest.mark.parametrize("var_shape", ["same", "one fewer", "last 1"])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gaussian_nll_loss(var_shape, full, reduction):
    var = {"same": (4, 3), "one fewer": (4,), "last 1": (4, 1)}[var_shape]
    v = np.abs(normal(*var)) + 0.1
    v.flat[0] = 1e-9   # clamped at eps for the value; the gradient passes unclamped
    compare(lambda lib, f, x, t, v: f.gaussian_nll_loss(x, t, v, full, 1e-6, reduction),
            normal(4, 3), normal(4, 3), v, grads=[0, 2], rtol=1e-7)


def test_gaussian_nll_loss_errors():
    x = dg.tensor(normal(4, 3))
    with pytest.raises(ValueError, match="fits neither"):
        F.gaussian_nll_loss(x, x, dg.ones(3, 4))
    with pytest.raises(ValueError, match="negative"):
        F.gaussian_nll_loss(x, x, -dg.ones(4, 3))


@pytest.mark.parametrize("log_input", [False, True])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_poisson_nll_loss(log_input, full, reduction):
    rate = normal(4, 3) if log_input else np.abs(normal(4, 3)) + 0.1
    counts = RNG.integers(0, 5, (4, 3)).astype(np.float64)
    compare(lambda lib, f, x, t: f.poisson_nll_loss(x, t, log_input, full, reduction=reduction),
            rate, counts, grads=[0])


@pytest.mark.parametrize("name,args", [
    ("SoftMarginLoss", ()), ("MultiLabelSoftMarginLoss", ()), ("MultiMarginLoss", ()),
    ("MultiLabelMarginLoss", ()), ("HingeEmbeddingLoss", ()), ("GaussianNLLLoss", ()),
    ("PoissonNLLLoss", ()), ("TripletMarginWithDistanceLoss", ()), ("LocalResponseNorm", (3,)),
    ("ChannelShuffle", (2,)), ("LPPool2d", (2, 3)), ("LPPool1d", (1.5, 2, 1)),
    ("InstanceNorm3d", (4,)), ("Dropout3d", ()), ("AlphaDropout", (0.2,)),
    ("FeatureAlphaDropout", ()), ("ZeroPad3d", (1,)), ("ConstantPad3d", (1, 2.0)),
    ("CircularPad2d", (1,)), ("ReflectionPad3d", (1,)), ("ReplicationPad3d", (2,)),
    ("Softmax2d", ()),
])
def test_module_prints_as_torchs(name, args):
    assert repr(getattr(dg.nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))


@pytest.mark.parametrize("name,pad", [("ZeroPad3d", (1, 0, 2, 1, 0, 1)),
                                      ("ReflectionPad3d", 1), ("ReplicationPad3d", 2),
                                      ("CircularPad1d", (2, 1)), ("CircularPad2d", 1),
                                      ("CircularPad3d", 1)])
def test_padding_modules(name, pad):
    shape = (1, 2, 4) if name.endswith("1d") else (2, 3, 4) if name.endswith("2d") else \
        (1, 2, 3, 4, 3)
    compare(lambda lib, f, x: getattr(lib.nn, name)(pad)(x), normal(*shape))


def test_instance_norm3d():
    compare(lambda lib, f, x: lib.nn.InstanceNorm3d(3, affine=False)(x), normal(2, 3, 2, 3, 4),
            atol=1e-9, rtol=1e-7)


def test_new_losses_compiled_match_eager():
    """A step mixing the new losses, compiled, against eager (values and gradients)."""
    x = dg.tensor(normal(4, 5), requires_grad=True)
    y = dg.tensor(RNG.integers(0, 5, 4))
    labels = dg.tensor((normal(4, 5) > 0).astype(np.float64))

    def step(x):
        loss = (F.multi_margin_loss(x, y, p=2) + F.multilabel_soft_margin_loss(x, labels)
                + F.poisson_nll_loss(x, labels, full=True)
                + F.local_response_norm(x[None, :, :, None], 3).sum())
        loss.backward()
        return loss

    eager = step(x).item()
    eager_grad = x.grad.numpy().copy()
    x.grad = None
    compiled = dg.compile(step)(x).item()
    assert compiled == pytest.approx(eager, rel=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), eager_grad, rtol=1e-10)
