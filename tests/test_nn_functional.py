"""``dg.nn.functional`` against ``torch.nn.functional``: losses (every reduction, class
weights, ignore_index, label smoothing, probability targets, layouts), normalisations,
dropout, embedding and the activations the op families lack; forward values and the
gradients of every floating input, in float64."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import dualgraph as dg
import dualgraph.nn.functional as F

RNG = np.random.default_rng(0)


def normal(*shape):
    return RNG.standard_normal(shape)


def classes(high, *shape):
    return RNG.integers(0, high, shape)


def probs(*shape):
    return RNG.uniform(0.05, 0.95, shape)


def distribution(*shape, dim=1):
    p = RNG.uniform(0.1, 1.0, shape)
    return p / p.sum(dim, keepdims=True)


def compare(fn, *arrays, atol=1e-10, rtol=1e-8, grads=None):
    """Run ``fn(lib, functional, *tensors)`` with dualgraph and torch on the same arrays;
    compare the outputs and the gradients of the floating inputs (or those in ``grads``)."""
    grads = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if grads is None else grads
    ours = [dg.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    theirs = [torch.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    out = fn(dg, F, *ours)
    ref = fn(torch, TF, *theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=atol,
                               rtol=rtol)
    if grads:
        cotangent = normal(*ref.shape)
        (out * dg.tensor(cotangent)).sum().backward()
        (ref * torch.tensor(cotangent)).sum().backward()
        for i in grads:
            assert ours[i].grad is not None, f"no gradient for input {i}"
            np.testing.assert_allclose(ours[i].grad.numpy(), theirs[i].grad.numpy(),
                                       atol=atol, rtol=rtol, err_msg=f"gradient of input {i}")
    return out


# -- names ---------------------------------------------------------------------------------------
TORCH_F_NAMES = [
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "layer_norm",
    "batch_norm", "group_norm", "instance_norm", "rms_norm", "normalize", "dropout",
    "dropout1d", "dropout2d", "embedding", "linear", "bilinear", "one_hot", "pad", "relu",
    "relu6", "gelu", "silu", "mish", "softplus", "leaky_relu", "elu", "selu", "celu", "tanh",
    "sigmoid", "hardtanh", "hardsigmoid", "hardswish", "softmax", "log_softmax", "softmin",
    "logsigmoid", "prelu", "glu", "softsign", "tanhshrink", "threshold", "hardshrink",
    "softshrink", "cosine_similarity", "pairwise_distance", "conv1d", "conv2d",
    "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d", "avg_pool1d",
    "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
]


@pytest.mark.parametrize("name", TORCH_F_NAMES)
def test_torch_names_resolve(name):
    assert hasattr(TF, name), name   # the list is torch's
    assert callable(getattr(F, name)), name


# -- cross entropy and nll -----------------------------------------------------------------------
REDUCTIONS = ["none", "mean", "sum"]
LAYOUTS = {"NC": (6, 5), "C": (5,), "NCHW": (3, 5, 2, 4)}


def _targets(shape, ignore=None):
    t = classes(shape[0] if len(shape) == 1 else shape[1],
                *(() if len(shape) == 1 else (shape[0],) + shape[2:]))
    if ignore is not None and t.ndim:
        t.flat[::3] = ignore
    return t


@pytest.mark.parametrize("target", ["indices", "probabilities"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy(target, layout, reduction, weighted, smoothing):
    """Targets as class indices (some ignored, where there is a batch dim) or as class
    probabilities (which get a gradient too)."""
    shape = LAYOUTS[layout]
    x = normal(*shape)
    if target == "indices":
        t, grads = _targets(shape, -100 if layout != "C" else None), [0]
    else:
        t, grads = distribution(*shape, dim=0 if layout == "C" else 1), [0, 1]
    w = RNG.uniform(0.5, 2.0, 5)

    def fn(lib, f, x, t, w):
        return f.cross_entropy(x, t, w if weighted else None, reduction=reduction,
                               label_smoothing=smoothing)
    compare(fn, x, t, w, grads=grads)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_custom_ignore_index(reduction):
    x, t = normal(8, 4), classes(4, 8)
    compare(lambda lib, f, x, t: f.cross_entropy(x, t, ignore_index=2, reduction=reduction,
                                                 label_smoothing=0.1), x, t)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    logp = np.log(distribution(7, 4))
    t = classes(4, 7)
    t[2] = -100
    w = RNG.uniform(0.5, 2.0, 4)
    compare(lambda lib, f, x, t, w: f.nll_loss(x, t, w if weighted else None,
                                               reduction=reduction), logp, t, w, grads=[0])


def test_nll_loss_image_layout_and_ignore_index():
    logp = np.log(distribution(2, 3, 4, 5))
    t = classes(3, 2, 4, 5)
    compare(lambda lib, f, x, t: f.nll_loss(x, t, ignore_index=1), logp, t)


def test_cross_entropy_on_class_indices_is_one_op_forward_and_backward():
    """(N, C) logits with class indices and nothing else: the fused op, eager and compiled
    (one node each way); with class weights, the composite of log-softmax and gathers."""
    x = dg.tensor(normal(6, 5).astype(np.float32), requires_grad=True)
    t = dg.tensor(classes(5, 6))
    assert repr(F.cross_entropy(x, t).grad_fn).startswith("<CrossEntropyBackward: cross_entropy(")

    def step(x, t, weight=None):
        loss = F.cross_entropy(x, t, weight)
        loss.backward()
        return loss
    compiled = dg.compile(step)
    compiled(x, t)
    names = [n.op.name for n in compiled.graph.nodes]
    assert names.count("cross_entropy") == names.count("cross_entropy_backward") == 1
    assert "log_softmax" not in names
    compiled(x, t, dg.ones(5))
    assert "log_softmax" in [n.op.name for n in compiled.graph.nodes]


def test_cross_entropy_errors():
    x = dg.randn(4, 3)
    with pytest.raises(ValueError, match=r"expected a target of class indices of shape \(4,\)"
                                         r", got \(5,\)"):
        F.cross_entropy(x, dg.tensor([0, 1, 2, 0, 1]))
    with pytest.raises(IndexError, match="Target 3 is out of bounds for 3 classes"):
        F.cross_entropy(x, dg.tensor([0, 1, 3, 0]))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(x, dg.tensor([0, 1, 2, 0]), reduction="avg")
    with pytest.raises(ValueError, match="weight tensor should be defined"):
        F.cross_entropy(x, dg.tensor([0, 1, 2, 0]), weight=dg.ones(2))
    with pytest.raises(ValueError, match="class-probability targets must have the input's"):
        F.cross_entropy(x, dg.rand(4, 2))
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, dg.tensor([0, 1, 2, 0]), label_smoothing=1.5)


def test_legacy_reduction_flags():
    x, t = normal(4, 3), classes(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for size_average, reduce in [(False, None), (None, False), (True, True)]:
            compare(lambda lib, f, x, t: f.cross_entropy(x, t, size_average=size_average,
                                                         reduce=reduce), x, t)
    with pytest.warns(UserWarning, match="size_average and reduce"):
        F.mse_loss(dg.zeros(2), dg.zeros(2), size_average=False)


# -- regression losses ---------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("loss", ["mse_loss", "l1_loss", "huber_loss"])
@pytest.mark.parametrize("weighted", [False, True])
def test_regression_losses(loss, reduction, weighted):
    x, y, w = normal(4, 5), normal(4, 5), RNG.uniform(0.1, 2, (4, 5))
    y[0, 0] = x[0, 0] + 0.5   # inside the quadratic zone of huber
    compare(lambda lib, f, x, y, w: getattr(f, loss)(
        x, y, reduction=reduction, **({"weight": w} if weighted else {})), x, y, w,
        grads=[0, 1])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 2.0])
def test_smooth_l1_loss(reduction, beta):
    x, y = normal(6, 3), normal(6, 3)
    compare(lambda lib, f, x, y: f.smooth_l1_loss(x, y, reduction=reduction, beta=beta), x, y)


@pytest.mark.parametrize("delta", [0.3, 1.0, 3.0])
def test_huber_loss_delta(delta):
    x, y = normal(6, 3), normal(6, 3)
    compare(lambda lib, f, x, y: f.huber_loss(x, y, delta=delta), x, y)


def test_regression_loss_broadcast_warns():
    with pytest.warns(UserWarning, match="target size"):
        out = F.mse_loss(dg.zeros(3, 2), dg.ones(2))
    assert out.item() == 1.0


# -- binary cross entropy ------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    p, t, w = probs(5, 3), probs(5, 3), RNG.uniform(0.5, 2, 3)
    compare(lambda lib, f, p, t, w: f.binary_cross_entropy(
        p, t, w if weighted else None, reduction=reduction), p, t, w, grads=[0, 1])


def test_binary_cross_entropy_clamps_logs_at_minus_100():
    p = np.array([0.0, 1.0, 0.0, 1.0, 0.5])
    t = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    out = compare(lambda lib, f, p, t: f.binary_cross_entropy(p, t, reduction="none"), p, t,
                  grads=[0])
    assert out.detach().numpy()[0] == 100.0
    x = dg.tensor(p, requires_grad=True)
    F.binary_cross_entropy(x, dg.tensor(t)).backward()
    assert np.isfinite(x.grad.numpy()).all()


EDGE_PROBABILITIES = [0.0, 1e-30, 0.5, 1 - 1e-7, 1.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("compiled", [False, True])
def test_binary_cross_entropy_gradient_at_0_and_1_is_torchs(dtype, compiled):
    """torch's gradient is ``(p - t) / max(p (1 - p), 1e-12)`` times the incoming one,
    also where the value's logs are clamped (p = 0, 1, 1e-30): large and of the right
    sign, where the clamped logs' slope would be 0 (or 1/p = 3e29 at 1e-30)."""
    p = np.repeat(np.array(EDGE_PROBABILITIES, dtype), 3)
    t = np.tile(np.array([0.0, 0.3, 1.0], dtype), len(EDGE_PROBABILITIES))
    w = RNG.uniform(0.5, 2.0, p.shape).astype(dtype)
    for reduction in REDUCTIONS:
        theirs = torch.tensor(p, requires_grad=True)
        ref = TF.binary_cross_entropy(theirs, torch.tensor(t), torch.tensor(w),
                                      reduction=reduction)
        ref.sum().backward()

        def loss(x, t, w):
            return F.binary_cross_entropy(x, t, w, reduction=reduction)
        fn = dg.compile(loss) if compiled else loss
        for _ in range(2 if compiled else 1):
            ours = dg.tensor(p, requires_grad=True)
            out = fn(ours, dg.tensor(t), dg.tensor(w))
            out.sum().backward()
            np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-6)
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5,
                                       err_msg=reduction)


def test_binary_cross_entropy_gradient_of_gradient_is_torchs():
    """The gradient's own derivative (a gradient penalty through the loss) is torch's
    double backward outside the band where ``p (1 - p) < 1e-12`` (inside it, it is the
    capped quotient's, ``1 / 1e-12``; torch's double backward adds 1e-12 to p and 1 - p
    instead: a difference of its own, below 1e-9 from 0 or 1)."""
    p = np.array([1e-3, 0.2, 0.5, 0.9, 1 - 1e-6])
    t = np.array([0.3, 1.0, 0.3, 0.0, 0.7])
    theirs = torch.tensor(p, requires_grad=True)
    g, = torch.autograd.grad(TF.binary_cross_entropy(theirs, torch.tensor(t)), theirs,
                             create_graph=True)
    (g * g).sum().backward()
    ours = dg.tensor(p, requires_grad=True)
    h, = dg.autograd.grad(F.binary_cross_entropy(ours, dg.tensor(t)), ours, create_graph=True)
    (h * h).sum().backward()
    np.testing.assert_allclose(h.detach().numpy(), g.detach().numpy(), rtol=1e-7)
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5)


def test_binary_cross_entropy_errors():
    with pytest.raises(ValueError, match="different to the input size"):
        F.binary_cross_entropy(dg.rand(3), dg.rand(3, 1))
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.binary_cross_entropy(dg.tensor([0.5, 1.5]), dg.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="must be the same as input size"):
        F.binary_cross_entropy_with_logits(dg.rand(3), dg.rand(3, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
def test_binary_cross_entropy_with_logits(reduction, weighted, pos_weighted):
    x, t = normal(5, 3) * 3, probs(5, 3)
    w, pw = RNG.uniform(0.5, 2, 3), RNG.uniform(0.5, 3, 3)

    def fn(lib, f, x, t, w, pw):
        return f.binary_cross_entropy_with_logits(x, t, w if weighted else None,
                                                  reduction=reduction,
                                                  pos_weight=pw if pos_weighted else None)
    compare(fn, x, t, w, pw, grads=[0, 1], atol=1e-9)


def test_binary_cross_entropy_with_logits_is_stable():
    x = np.array([-1000.0, -60.0, 0.0, 60.0, 1000.0])
    t = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    out = compare(lambda lib, f, x, t: f.binary_cross_entropy_with_logits(
        x, t, reduction="none", pos_weight=lib.tensor([2.0] * 5, dtype=lib.float64)),
        x, t, grads=[0])
    assert np.isfinite(out.detach().numpy()).all()


@pytest.mark.parametrize("pos_weighted", [False, True])
def test_binary_cross_entropy_with_logits_gradient_rounds_as_torchs(pos_weighted):
    """The gradient is torch's ``sigmoid(x) - t`` to the last bits, also where it is 1e-18
    or 1e-13 (an Adam step divides it by its own size: a 0 for a 1e-13 is a whole step),
    eagerly and compiled."""
    x = np.array([-800.0, -40.0, -30.0, -25.0, -20.0, -5.0, 5.0, 20.0, 25.0, 30.0, 40.0, 800.0])
    pw = np.full(x.shape, 2.5)
    for t in (np.arange(x.size) % 2.0, 1.0 - np.arange(x.size) % 2.0):
        ref = torch.tensor(x, requires_grad=True)
        TF.binary_cross_entropy_with_logits(ref, torch.tensor(t), reduction="sum",
                                            pos_weight=torch.tensor(pw) if pos_weighted
                                            else None).backward()

        def loss(x, t, pw):
            return F.binary_cross_entropy_with_logits(x, t, reduction="sum",
                                                      pos_weight=pw if pos_weighted else None)
        for fn in (loss, dg.compile(loss)):
            ours = dg.tensor(x, requires_grad=True)
            fn(ours, dg.tensor(t), dg.tensor(pw)).backward()
            np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-12, atol=0)


# -- kl divergence -------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")   # torch's, for 'mean'
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    logq = np.log(distribution(4, 5))
    p = distribution(4, 5)
    p[0, 0] = 0.0   # a zero-probability target contributes 0
    target = np.log(p + 1e-3) if log_target else p
    # torch's target gradient is NaN at a zero target; ours is finite, so compare it only
    # for log targets
    compare(lambda lib, f, x, t: f.kl_div(x, t, reduction=reduction, log_target=log_target),
            logq, target, grads=[0, 1] if log_target else [0])


# -- normalisation -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,normalized", [((4, 6), (6,)), ((2, 3, 4, 5), (4, 5))])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(shape, normalized, affine):
    x, w, b = normal(*shape), normal(*normalized), normal(*normalized)

    def fn(lib, f, x, w, b):
        return f.layer_norm(x, normalized, w if affine else None, b if affine else None,
                            eps=1e-5)
    compare(fn, x, w, b, grads=[0, 1, 2] if affine else [0])


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm(eps):
    x, w = normal(3, 4, 5), normal(5)
    compare(lambda lib, f, x, w: f.rms_norm(x, (5,), w, eps=eps), x, w)


@pytest.mark.parametrize("shape", [(6, 4), (5, 4, 3), (3, 4, 2, 5)])
@pytest.mark.parametrize("training", [False, True])
def test_batch_norm(shape, training):
    x, w, b = normal(*shape), normal(4), normal(4)
    rm, rv = normal(4), RNG.uniform(0.5, 2, 4)
    runs = {}

    def fn(lib, f, x, w, b):
        mean, var = lib.tensor(rm), lib.tensor(rv)
        runs[lib.__name__] = (mean, var)
        return f.batch_norm(x, mean, var, w, b, training=training, momentum=0.3, eps=1e-4)
    compare(fn, x, w, b)
    for ours, theirs in zip(runs["dualgraph"], runs["torch"]):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)
    assert training != np.allclose(runs["dualgraph"][0].numpy(), rm)


def test_batch_norm_errors():
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(dg.randn(1, 3), None, None, training=True)
    with pytest.raises(ValueError, match="running_mean and running_var are needed"):
        F.batch_norm(dg.randn(4, 3), None, None, training=False)


@pytest.mark.parametrize("with_running", [False, True])
def test_instance_norm(with_running):
    x, w, b = normal(3, 4, 5, 6), normal(4), normal(4)
    runs = {}

    def fn(lib, f, x, w, b):
        stats = (lib.zeros(4, dtype=lib.float64), lib.ones(4, dtype=lib.float64))
        runs[lib.__name__] = stats
        return f.instance_norm(x, *(stats if with_running else (None, None)), w, b)
    compare(fn, x, w, b)
    for ours, theirs in zip(runs["dualgraph"], runs["torch"]):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)


@pytest.mark.parametrize("shape,groups", [((3, 6, 4, 4), 3), ((2, 4, 5), 1), ((2, 4), 4)])
def test_group_norm(shape, groups):
    c = shape[1]
    x, w, b = normal(*shape), normal(c), normal(c)
    compare(lambda lib, f, x, w, b: f.group_norm(x, groups, w, b), x, w, b)
    with pytest.raises(ValueError, match="not divisible by num_groups"):
        F.group_norm(dg.tensor(x), 5)



@pytest.mark.parametrize("shape,groups", [((2, 6, 3, 5), 3), ((1, 8, 7), 8), ((3, 4, 1, 1), 2),
                                          ((2, 5), 1)])
def test_group_norm_float32_eager_compiled_and_torch(shape, groups):
    """float32 (a group is a row of layer_norm's loop): values and gradients of input,
    weight and bias against torch's group_norm, and compiled equal to eager."""
    c = shape[1]
    x, w, b = (normal(*s).astype(np.float32) for s in (shape, (c,), (c,)))
    compare(lambda lib, f, x, w, b: f.group_norm(x, groups, w, b), x, w, b, atol=2e-5,
            rtol=2e-4)
    fn = dg.compile(lambda x, w, b: F.group_norm(x, groups, w, b))
    args = [dg.tensor(a) for a in (x, w, b)]
    np.testing.assert_allclose(fn(*args).numpy(), F.group_norm(*args[:1], groups, *args[1:])
                               .numpy(), rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, -1), (3.0, 0)])
def test_normalize(p, dim):
    x = normal(4, 5)
    x[1] = 0.0   # a zero row: the clamp keeps it finite
    compare(lambda lib, f, x: f.normalize(x, p, dim), x)


# -- dropout -------------------------------------------------------------------------------------
def test_dropout_eval_is_identity_and_train_scales():
    x = dg.ones(200, 500)
    assert F.dropout(x, 0.3, training=False) is x
    dg.manual_seed(0)
    y = F.dropout(x, 0.3).numpy()
    dropped = (y == 0).mean()
    assert abs(dropped - 0.3) < 0.01
    np.testing.assert_allclose(y[y != 0], 1 / 0.7, rtol=1e-6)
    dg.manual_seed(0)
    np.testing.assert_array_equal(F.dropout(x, 0.3).numpy(), y)   # the global generator
    assert (F.dropout(x, 1.0).numpy() == 0).all()
    assert F.dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_dropout_gradient_is_the_scaled_mask():
    x = dg.randn(50, 40, requires_grad=True)
    y = F.dropout(x, 0.25)
    y.sum().backward()
    mask = (y.detach().numpy() != 0) / 0.75
    np.testing.assert_allclose(x.grad.numpy(), mask, rtol=1e-6)


def test_dropout_inplace():
    x = dg.ones(10, 10)
    y = F.dropout(x, 0.5, inplace=True)
    assert y is x and (x.numpy() == 0).any()


@pytest.mark.parametrize("fn,shape", [(F.dropout2d, (20, 30, 4, 4)), (F.dropout2d, (30, 4, 4)),
                                      (F.dropout1d, (20, 30, 7))])
def test_channel_dropout_zeros_whole_channels(fn, shape):
    y = fn(dg.ones(*shape), 0.5).numpy()
    lead = len(shape) - (2 if fn is F.dropout2d else 1)
    planes = y.reshape(shape[:lead] + (-1,))   # one row per (sample, channel)
    assert ((planes == 0).all(-1) | (planes == 2).all(-1)).all()
    assert 0.35 < (planes[..., 0] == 0).mean() < 0.65


@pytest.mark.parametrize("shape", [(40, 50), (6, 40, 2, 2, 2)])
def test_dropout2d_of_other_ranks_warns_and_drops_as_torch(shape):
    """torch takes a 2-D (N, C) input to ``Dropout2d`` (its MNIST-RNN example does), with
    a deprecation warning, dropping along the first two dims: element by element there."""
    with pytest.warns(UserWarning, match="dropout2d"):
        y = F.dropout2d(dg.ones(*shape), 0.5).numpy()
    planes = y.reshape(shape[:2] + (-1,))
    assert ((planes == 0).all(-1) | (planes == 2).all(-1)).all()
    assert 0.4 < (planes[..., 0] == 0).mean() < 0.6
    with pytest.warns(UserWarning, match="dropout2d"):
        assert F.dropout2d(dg.ones(*shape), 0.5, training=False).shape == shape


# -- embedding -----------------------------------------------------------------------------------
def test_embedding_matches_torch_and_padding_gets_no_gradient():
    w = normal(10, 4)
    idx = np.array([[0, 2, 2], [9, 0, 5]])
    compare(lambda lib, f, idx, w: f.embedding(idx, w), idx, w, grads=[1])
    out = compare(lambda lib, f, idx, w: f.embedding(idx, w, padding_idx=2), idx, w, grads=[1])
    assert out.shape == (2, 3, 4)
    wt = dg.tensor(w, requires_grad=True)
    F.embedding(dg.tensor(idx), wt, padding_idx=-8).sum().backward()
    assert (wt.grad.numpy()[2] == 0).all() and (wt.grad.numpy()[0] == 2).all()


def test_embedding_max_norm_renormalises_used_rows():
    w = normal(6, 3) * 3
    idx = np.array([1, 3, 3])
    ours, theirs = dg.tensor(w), torch.tensor(w)
    F.embedding(dg.tensor(idx), ours, max_norm=1.0)
    TF.embedding(torch.tensor(idx), theirs, max_norm=1.0)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)
    assert np.allclose(np.linalg.norm(ours.numpy()[[1, 3]], axis=1), 1.0)


def test_embedding_errors():
    w = dg.randn(5, 2)
    with pytest.raises(IndexError, match="index 5 is out of range for 5 rows"):
        F.embedding(dg.tensor([1, 5]), w)
    with pytest.raises(TypeError, match="indices must be an integer tensor"):
        F.embedding(dg.tensor([1.0]), w)


# -- activations and small layers without ops of their own ---------------------------------------
ACTIVATIONS = {
    "softsign": lambda lib, f, x: f.softsign(x),
    "tanhshrink": lambda lib, f, x: f.tanhshrink(x),
    "threshold": lambda lib, f, x: f.threshold(x, 0.1, 20.0),
    "hardshrink": lambda lib, f, x: f.hardshrink(x, 0.4),
    "softshrink": lambda lib, f, x: f.softshrink(x, 0.4),
    "softmin": lambda lib, f, x: f.softmin(x, dim=1),
    "glu": lambda lib, f, x: f.glu(x, 1),
    "glu_last": lambda lib, f, x: f.glu(x),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations(name):
    compare(ACTIVATIONS[name], normal(3, 4, 6))


@pytest.mark.parametrize("shape,slopes", [((3, 4, 5), 4), ((3, 4), 1), ((5,), 1)])
def test_prelu(shape, slopes):
    compare(lambda lib, f, x, w: f.prelu(x, w), normal(*shape), RNG.uniform(0, 0.5, slopes))


def test_bilinear():
    compare(lambda lib, f, a, b, w, bias: f.bilinear(a, b, w, bias),
            normal(2, 3, 4), normal(2, 3, 5), normal(6, 4, 5), normal(6))


def test_cosine_similarity_and_pairwise_distance():
    a, b = normal(4, 5), normal(4, 5)
    compare(lambda lib, f, a, b: f.cosine_similarity(a, b), a, b)
    compare(lambda lib, f, a, b: f.cosine_similarity(a, b, dim=0), a, b)
    compare(lambda lib, f, a, b: f.pairwise_distance(a, b), a, b)
    compare(lambda lib, f, a, b: f.pairwise_distance(a, b, p=1.0, keepdim=True), a, b)


@pytest.mark.parametrize("shape, dim", [((0, 2, 4), 0), ((0, 2, 4), -1), ((3, 0), 1),
                                        ((3, 0), 0)])
def test_softmax_and_logsumexp_of_an_empty_tensor_as_torch(shape, dim):
    """An empty slice's softmax is empty and its logsumexp -inf, as torch's: eagerly the
    max of no values raised ValueError, compiled (the result dead) returned values
    (graph program 1753 of i-gen5, leading size 1 then ``t[1:]``)."""
    x = np.zeros(shape, np.float32)

    def f(lib, t):
        return (lib.softmax(t, dim), lib.log_softmax(t, dim), lib.logsumexp(t, dim))

    want = f(torch, torch.tensor(x, requires_grad=True))
    for fn in (f, dg.compile(f)):
        t = dg.tensor(x, requires_grad=True)
        got = fn(dg, t)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.detach().numpy(), w.detach().numpy())
        (got[0].sum() + got[1].sum()).backward()
        assert t.grad.shape == shape
