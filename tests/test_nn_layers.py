"""Every layer of ``dg.nn`` against torch's with identical weights (torch's initialised
state dict copied into ours): state-dict keys, repr, forward, the gradients of the inputs
and of every parameter; train/eval behaviour; init distributions; bad-input messages; and
short training runs of an MLP and a CNN whose loss curves must equal torch's."""
import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import torch

import dualgraph as dg


@dataclass
class Arr:
    """An input: ``make(rng)`` gives the array; ``grad`` says whether to check its
    gradient."""
    make: Callable
    grad: bool = True


def f(*shape, grad=True):
    return Arr(lambda rng: rng.standard_normal(shape), grad)


def ints(high, *shape):
    return Arr(lambda rng: rng.integers(0, high, shape), grad=False)


def probs(*shape, grad=True):
    return Arr(lambda rng: rng.uniform(0.05, 0.95, shape), grad)


def dist(*shape):
    def make(rng):
        p = rng.uniform(0.1, 1, shape)
        return p / p.sum(1, keepdims=True)
    return Arr(make, grad=False)


@dataclass
class Case:
    id: str
    make: Callable            # make(lib) -> module, lib is dualgraph or torch
    inputs: list = field(default_factory=list)
    train: bool = True        # run in training mode (else eval)


W4 = np.array([0.5, 1.0, 2.0, 1.5])
W3 = np.array([0.5, 2.0, 1.5])

CASES = [
    # linear and shape
    Case("linear", lambda lib: lib.nn.Linear(5, 3), [f(4, 5)]),
    Case("linear_nobias_3d", lambda lib: lib.nn.Linear(5, 3, bias=False), [f(2, 3, 5)]),
    Case("linear_unbatched", lambda lib: lib.nn.Linear(5, 3), [f(5)]),
    Case("bilinear", lambda lib: lib.nn.Bilinear(3, 4, 2), [f(5, 3), f(5, 4)]),
    Case("identity", lambda lib: lib.nn.Identity(3, unused=1), [f(2, 3)]),
    Case("flatten", lambda lib: lib.nn.Flatten(), [f(2, 3, 4)]),
    Case("flatten_0_1", lambda lib: lib.nn.Flatten(0, 1), [f(2, 3, 4)]),
    Case("unflatten", lambda lib: lib.nn.Unflatten(1, (2, 3)), [f(4, 6)]),
    # convolution
    Case("conv1d", lambda lib: lib.nn.Conv1d(3, 4, 3, stride=2, padding=1), [f(2, 3, 9)]),
    Case("conv1d_same_reflect", lambda lib: lib.nn.Conv1d(2, 4, 4, padding="same",
                                                          padding_mode="reflect"), [f(2, 2, 7)]),
    Case("conv2d", lambda lib: lib.nn.Conv2d(3, 4, 3), [f(2, 3, 6, 6)]),
    Case("conv2d_unbatched", lambda lib: lib.nn.Conv2d(3, 4, 3, padding=1), [f(3, 5, 6)]),
    Case("conv2d_groups_dilation", lambda lib: lib.nn.Conv2d(
        4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2, bias=False),
        [f(2, 4, 7, 8)]),
    Case("conv2d_same", lambda lib: lib.nn.Conv2d(2, 3, 4, padding="same"), [f(2, 2, 6, 5)]),
    Case("conv2d_valid", lambda lib: lib.nn.Conv2d(2, 3, 2, padding="valid"), [f(1, 2, 4, 4)]),
    Case("conv2d_circular", lambda lib: lib.nn.Conv2d(2, 3, 3, padding=1,
                                                      padding_mode="circular"), [f(2, 2, 5, 5)]),
    Case("conv2d_replicate", lambda lib: lib.nn.Conv2d(2, 3, 3, padding=(2, 1),
                                                       padding_mode="replicate"), [f(2, 2, 5, 5)]),
    Case("conv_transpose2d", lambda lib: lib.nn.ConvTranspose2d(
        3, 2, 3, stride=2, padding=1, output_padding=1), [f(2, 3, 4, 4)]),
    Case("conv_transpose2d_groups", lambda lib: lib.nn.ConvTranspose2d(
        4, 4, 2, groups=2, bias=False, dilation=2), [f(2, 4, 3, 3)]),
    Case("conv_transpose1d", lambda lib: lib.nn.ConvTranspose1d(3, 2, 3, stride=2),
         [f(2, 3, 5)]),
    # pooling
    Case("max_pool2d", lambda lib: lib.nn.MaxPool2d(2), [f(2, 3, 6, 6)]),
    Case("max_pool2d_padded", lambda lib: lib.nn.MaxPool2d(3, stride=2, padding=1,
                                                           ceil_mode=True), [f(2, 3, 7, 7)]),
    Case("max_pool1d", lambda lib: lib.nn.MaxPool1d(2), [f(2, 3, 8)]),
    Case("avg_pool2d", lambda lib: lib.nn.AvgPool2d(2), [f(2, 3, 6, 6)]),
    Case("avg_pool2d_padded", lambda lib: lib.nn.AvgPool2d(3, stride=1, padding=1,
                                                           count_include_pad=False),
         [f(2, 3, 5, 5)]),
    Case("avg_pool1d", lambda lib: lib.nn.AvgPool1d(3, stride=2), [f(2, 3, 9)]),
    Case("adaptive_avg_pool2d", lambda lib: lib.nn.AdaptiveAvgPool2d((2, 3)), [f(2, 3, 5, 7)]),
    Case("adaptive_avg_pool2d_1", lambda lib: lib.nn.AdaptiveAvgPool2d(1), [f(2, 3, 4, 4)]),
    Case("adaptive_avg_pool1d", lambda lib: lib.nn.AdaptiveAvgPool1d(3), [f(2, 3, 7)]),
    # normalisation
    Case("batch_norm1d", lambda lib: lib.nn.BatchNorm1d(4), [f(8, 4)]),
    Case("batch_norm1d_3d", lambda lib: lib.nn.BatchNorm1d(4), [f(8, 4, 5)]),
    Case("batch_norm2d", lambda lib: lib.nn.BatchNorm2d(3), [f(4, 3, 5, 5)]),
    Case("batch_norm2d_eval", lambda lib: lib.nn.BatchNorm2d(3), [f(4, 3, 5, 5)],
         train=False),
    Case("batch_norm2d_plain", lambda lib: lib.nn.BatchNorm2d(3, affine=False), [f(4, 3, 2, 2)]),
    Case("batch_norm2d_nobias", lambda lib: lib.nn.BatchNorm2d(3, bias=False), [f(4, 3, 2, 2)]),
    Case("batch_norm2d_untracked_eval", lambda lib: lib.nn.BatchNorm2d(
        3, track_running_stats=False), [f(4, 3, 2, 2)], train=False),
    Case("batch_norm3d", lambda lib: lib.nn.BatchNorm3d(2), [f(2, 2, 3, 2, 2)]),
    Case("instance_norm1d", lambda lib: lib.nn.InstanceNorm1d(3), [f(2, 3, 6)]),
    Case("instance_norm2d_affine", lambda lib: lib.nn.InstanceNorm2d(3, affine=True),
         [f(2, 3, 4, 5)]),
    Case("instance_norm2d_tracked", lambda lib: lib.nn.InstanceNorm2d(
        3, track_running_stats=True), [f(2, 3, 4, 5)]),
    Case("instance_norm2d_unbatched", lambda lib: lib.nn.InstanceNorm2d(3), [f(3, 4, 5)]),
    Case("layer_norm", lambda lib: lib.nn.LayerNorm(5), [f(3, 5)]),
    Case("layer_norm_2d_plain", lambda lib: lib.nn.LayerNorm((3, 5), elementwise_affine=False),
         [f(2, 3, 5)]),
    Case("layer_norm_nobias", lambda lib: lib.nn.LayerNorm([5], bias=False), [f(4, 5)]),
    Case("group_norm", lambda lib: lib.nn.GroupNorm(2, 4), [f(3, 4, 5, 5)]),
    Case("group_norm_plain", lambda lib: lib.nn.GroupNorm(1, 4, affine=False), [f(3, 4, 7)]),
    Case("rms_norm", lambda lib: lib.nn.RMSNorm(5), [f(3, 5)]),
    Case("rms_norm_eps", lambda lib: lib.nn.RMSNorm([3, 5], eps=1e-6), [f(2, 3, 5)]),
    # embedding, dropout in eval
    Case("embedding", lambda lib: lib.nn.Embedding(10, 4), [ints(10, 3, 5)]),
    Case("embedding_padding", lambda lib: lib.nn.Embedding(10, 4, padding_idx=2),
         [Arr(lambda rng: np.array([[2, 1], [2, 9]]), grad=False)]),
    Case("embedding_max_norm", lambda lib: lib.nn.Embedding(10, 4, max_norm=1.0, norm_type=1.0),
         [ints(10, 6)]),
    Case("dropout_eval", lambda lib: lib.nn.Dropout(0.5), [f(3, 4)], train=False),
    Case("dropout2d_eval", lambda lib: lib.nn.Dropout2d(), [f(2, 3, 4, 4)], train=False),
    Case("dropout_p0", lambda lib: lib.nn.Dropout(0.0), [f(3, 4)]),
    # activations
    *[Case(name.lower(), (lambda n: lambda lib: getattr(lib.nn, n)())(name), [f(3, 4, 6)])
      for name in ["ReLU", "ReLU6", "SiLU", "Mish", "SELU", "Hardsigmoid", "Hardswish", "Tanh",
                   "Sigmoid", "LogSigmoid", "Softsign", "Tanhshrink", "GELU", "LeakyReLU",
                   "ELU", "CELU", "Softplus", "Hardtanh", "PReLU", "GLU"]],
    Case("relu_inplace", lambda lib: lib.nn.ReLU(inplace=True), [f(3, 4, grad=False)]),
    Case("gelu_tanh", lambda lib: lib.nn.GELU("tanh"), [f(3, 4)]),
    Case("leaky_relu", lambda lib: lib.nn.LeakyReLU(0.2), [f(3, 4)]),
    Case("elu", lambda lib: lib.nn.ELU(0.5), [f(3, 4)]),
    Case("celu", lambda lib: lib.nn.CELU(1.5), [f(3, 4)]),
    Case("softplus", lambda lib: lib.nn.Softplus(2.0, 1.0), [f(3, 4)]),
    Case("hardtanh", lambda lib: lib.nn.Hardtanh(-0.5, 0.5), [f(3, 4)]),
    Case("threshold", lambda lib: lib.nn.Threshold(0.1, 2.0), [f(3, 4)]),
    Case("prelu_channels", lambda lib: lib.nn.PReLU(3, init=0.1), [f(2, 3, 4)]),
    Case("glu_dim", lambda lib: lib.nn.GLU(1), [f(2, 4, 3)]),
    Case("softmax", lambda lib: lib.nn.Softmax(1), [f(3, 4, 5)]),
    Case("softmax_implicit", lambda lib: lib.nn.Softmax(), [f(3, 4)]),
    Case("log_softmax", lambda lib: lib.nn.LogSoftmax(-1), [f(3, 4, 5)]),
    Case("softmin", lambda lib: lib.nn.Softmin(0), [f(3, 4)]),
    # losses
    Case("l1_loss", lambda lib: lib.nn.L1Loss(), [f(4, 5), f(4, 5)]),
    Case("mse_loss", lambda lib: lib.nn.MSELoss(reduction="sum"), [f(4, 5), f(4, 5)]),
    Case("smooth_l1_loss", lambda lib: lib.nn.SmoothL1Loss(beta=0.5), [f(4, 5), f(4, 5)]),
    Case("huber_loss", lambda lib: lib.nn.HuberLoss(delta=0.5), [f(4, 5), f(4, 5)]),
    Case("nll_loss", lambda lib: lib.nn.NLLLoss(weight=lib.tensor(W4)),
         [f(6, 4), ints(4, 6)]),
    Case("cross_entropy", lambda lib: lib.nn.CrossEntropyLoss(), [f(6, 4), ints(4, 6)]),
    Case("cross_entropy_all", lambda lib: lib.nn.CrossEntropyLoss(
        weight=lib.tensor(W4), ignore_index=1, reduction="sum", label_smoothing=0.1),
        [f(3, 4, 5), ints(4, 3, 5)]),
    Case("cross_entropy_probs", lambda lib: lib.nn.CrossEntropyLoss(label_smoothing=0.2),
         [f(6, 4), dist(6, 4)]),
    Case("bce", lambda lib: lib.nn.BCELoss(weight=lib.tensor(W3)),
         [probs(4, 3), probs(4, 3, grad=False)]),
    Case("bce_logits", lambda lib: lib.nn.BCEWithLogitsLoss(pos_weight=lib.tensor(W3),
                                                            reduction="none"),
         [f(4, 3), probs(4, 3, grad=False)]),
    Case("kl_div", lambda lib: lib.nn.KLDivLoss(reduction="batchmean", log_target=True),
         [f(4, 3), f(4, 3, grad=False)]),
]


def _pair(case):
    """The torch layer (seeded init) and ours with torch's state copied in, in float64."""
    torch.manual_seed(0)
    theirs = case.make(torch).double()
    ours = case.make(dg).double()
    ours.load_state_dict({k: dg.tensor(v.detach().numpy())
                          for k, v in theirs.state_dict().items()})
    theirs.train(case.train)
    ours.train(case.train)
    return ours, theirs


def _run(module, lib, arrays, case):
    tensors = [lib.tensor(a, requires_grad=spec.grad and a.dtype.kind == "f")
               for a, spec in zip(arrays, case.inputs)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # Softmax() warns about its implicit dim
        return tensors, module(*tensors)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_layer_matches_torch(case):
    ours, theirs = _pair(case)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    assert ([n for n, _ in ours.named_parameters()]
            == [n for n, _ in theirs.named_parameters()])
    rng = np.random.default_rng(1)
    arrays = [spec.make(rng) for spec in case.inputs]
    xs, out = _run(ours, dg, arrays, case)
    ts, ref = _run(theirs, torch, arrays, case)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-9,
                               atol=1e-11)
    # buffers (running statistics, renormalised embeddings) after the forward
    for (name, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    if not ref.requires_grad:
        return
    cotangent = rng.standard_normal(tuple(ref.shape))
    (out * dg.tensor(cotangent)).sum().backward()
    (ref * torch.tensor(cotangent)).sum().backward()
    for i, (x, t) in enumerate(zip(xs, ts)):
        if t.requires_grad:
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-7, atol=1e-10,
                                       err_msg=f"gradient of input {i}")
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        q = theirs_params[name]
        if q.grad is None:
            assert p.grad is None or not p.grad.numpy().any(), name
            continue
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-7, atol=1e-10,
                                   err_msg=f"gradient of {name}")


# -- train / eval ---------------------------------------------------------------------------------
@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("layer,shape", [("BatchNorm2d", (6, 3, 4, 4)),
                                         ("BatchNorm1d", (10, 3))])
def test_batch_norm_running_stats_follow_torch(layer, shape, momentum):
    ours = getattr(dg.nn, layer)(3, momentum=momentum)
    theirs = getattr(torch.nn, layer)(3, momentum=momentum)
    rng = np.random.default_rng(2)
    for step in range(5):
        x = rng.standard_normal(shape).astype(np.float32) * (step + 1) + step
        ours(dg.tensor(x))
        theirs(torch.tensor(x))
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name].numpy(), value.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    assert int(ours.num_batches_tracked) == 5
    x = rng.standard_normal(shape).astype(np.float32)
    ours.eval()
    theirs.eval()
    before = ours.running_mean.numpy().copy()
    np.testing.assert_allclose(ours(dg.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours.running_mean.numpy(), before)   # eval: no update
    assert int(ours.num_batches_tracked) == 5


def test_dropout_module_train_and_eval():
    drop = dg.nn.Dropout(0.25)
    x = dg.ones(100, 400)
    y = drop(x).numpy()
    assert abs((y == 0).mean() - 0.25) < 0.01
    np.testing.assert_allclose(y[y != 0], 1 / 0.75, rtol=1e-6)
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        dg.nn.Dropout(1.5)


def test_train_eval_propagates_through_sequential():
    model = dg.nn.Sequential(dg.nn.Linear(4, 4), dg.nn.BatchNorm1d(4), dg.nn.Dropout())
    model.eval()
    assert not any(m.training for m in model.modules())
    x = dg.randn(3, 4)
    np.testing.assert_array_equal(model(x).detach().numpy(), model(x).detach().numpy())
    assert list(model.state_dict()) == list(torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout()).state_dict())


# -- initialisation -------------------------------------------------------------------------------
def _assert_uniform(t, bound):
    a = t.detach().numpy().ravel()
    assert np.abs(a).max() <= bound * (1 + 1e-6)
    assert np.abs(a).max() > 0.95 * bound
    std = bound / math.sqrt(3)
    assert abs(a.mean()) < 4 * std / math.sqrt(a.size)   # four standard errors
    assert abs(a.std() - std) < 0.1 * std


def test_linear_and_conv_init_is_kaiming_uniform():
    dg.manual_seed(0)
    lin = dg.nn.Linear(400, 300)
    _assert_uniform(lin.weight, 1 / math.sqrt(400))
    _assert_uniform(lin.bias, 1 / math.sqrt(400))
    conv = dg.nn.Conv2d(16, 64, 3)
    _assert_uniform(conv.weight, 1 / math.sqrt(16 * 9))
    _assert_uniform(conv.bias, 1 / math.sqrt(16 * 9))
    grouped = dg.nn.Conv1d(16, 256, 5, groups=4)
    _assert_uniform(grouped.weight, 1 / math.sqrt(4 * 5))
    transposed = dg.nn.ConvTranspose2d(64, 32, 3)   # fan_in is weight.shape[1] * k * k
    _assert_uniform(transposed.weight, 1 / math.sqrt(32 * 9))
    _assert_uniform(dg.nn.Bilinear(50, 20, 30).weight, 1 / math.sqrt(50))


def test_norm_embedding_and_prelu_init():
    bn = dg.nn.BatchNorm2d(5)
    for name, value in [("weight", 1), ("bias", 0), ("running_mean", 0), ("running_var", 1),
                        ("num_batches_tracked", 0)]:
        assert (bn.state_dict()[name].numpy() == value).all(), name
    assert bn.num_batches_tracked.dtype == dg.int64
    ln = dg.nn.LayerNorm((2, 3))
    assert (ln.weight.detach().numpy() == 1).all() and (ln.bias.detach().numpy() == 0).all()
    emb = dg.nn.Embedding(300, 200, padding_idx=3)
    w = emb.weight.detach().numpy()
    assert (w[3] == 0).all()
    assert abs(w.mean()) < 0.01 and abs(w.std() - 1) < 0.01
    assert (dg.nn.PReLU(4).weight.detach().numpy() == 0.25).all()


def test_embedding_from_pretrained():
    table = dg.randn(4, 3)
    emb = dg.nn.Embedding.from_pretrained(table)
    assert not emb.weight.requires_grad
    np.testing.assert_array_equal(emb(dg.tensor([2])).numpy(), table.numpy()[[2]])
    assert dg.nn.Embedding.from_pretrained(table, freeze=False).weight.requires_grad
    assert repr(emb) == repr(torch.nn.Embedding.from_pretrained(torch.randn(4, 3)))


# -- bad input ------------------------------------------------------------------------------------
BAD_INPUTS = [
    (lambda: dg.nn.Conv2d(1, 6, 5), (64, 3, 28, 28),
     "Conv2d(1, 6, kernel_size=(5, 5), stride=(1, 1)) expects input of shape (N, 1, H, W) or "
     "(1, H, W), got (64, 3, 28, 28)"),
    (lambda: dg.nn.Conv2d(1, 6, 5), (28, 28),
     "Conv2d(1, 6, kernel_size=(5, 5), stride=(1, 1)) expects input of shape (N, 1, H, W) or "
     "(1, H, W), got (28, 28)"),
    (lambda: dg.nn.Conv1d(2, 4, 3), (5, 3, 10),
     "Conv1d(2, 4, kernel_size=(3,), stride=(1,)) expects input of shape (N, 2, L) or (2, L), "
     "got (5, 3, 10)"),
    (lambda: dg.nn.Linear(3, 4), (2, 5),
     "Linear(in_features=3, out_features=4, bias=True) expects input of shape (*, 3), "
     "got (2, 5)"),
    (lambda: dg.nn.BatchNorm2d(6), (4, 6, 5),
     "BatchNorm2d(6, eps=1e-05, momentum=0.1, affine=True, bias=True, "
     "track_running_stats=True) expects input of shape (N, 6, H, W), got (4, 6, 5)"),
    (lambda: dg.nn.BatchNorm1d(3), (4, 5),
     "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, "
     "track_running_stats=True) expects input of shape (N, 3) or (N, 3, L), got (4, 5)"),
    (lambda: dg.nn.LayerNorm(5), (4, 6),
     "LayerNorm((5,), eps=1e-05, elementwise_affine=True, bias=True) expects input of shape "
     "(*, 5), got (4, 6)"),
    (lambda: dg.nn.GroupNorm(2, 4), (3, 6, 2),
     "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True) expects input of shape (N, 4, *), "
     "got (3, 6, 2)"),
    (lambda: dg.nn.MaxPool2d(2), (8, 8),
     "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False) expects "
     "input of shape (N, C, H, W) or (C, H, W), got (8, 8)"),
]


@pytest.mark.parametrize("make,shape,message", BAD_INPUTS,
                         ids=[m.split("(")[0] + str(s) for _, s, m in BAD_INPUTS])
def test_bad_input_names_layer_and_shapes(make, shape, message):
    with pytest.raises(ValueError) as info:
        make()(dg.randn(*shape))
    assert str(info.value) == message


@pytest.mark.parametrize("lib", ["eager", "compiled"])
@pytest.mark.parametrize("make,shape,dtype,message", [
    (lambda nn: nn.Linear(3, 2), (4, 3), "float64",
     "mat1 and mat2 must have the same dtype, but got Double and Float"),
    (lambda nn: nn.Linear(3, 2), (4, 3), "float16",
     "mat1 and mat2 must have the same dtype, but got Half and Float"),
    (lambda nn: nn.Conv2d(3, 2, 3), (1, 3, 5, 5), "float64",
     "Input type (double) and bias type (float) should be the same"),
    (lambda nn: nn.Conv1d(3, 2, 3, bias=False), (1, 3, 5), "float64",
     "Input type (double) and weight type (float) should be the same")])
def test_input_of_another_dtype_raises_as_torch(make, shape, dtype, message, lib):
    """A float64 batch (NumPy's default) through a float32 layer is torch's error, eagerly
    and compiled (it computed in float64 before: a silent difference from torch); the
    message opens with torch's and says how to convert."""
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    with pytest.raises(RuntimeError, match=r"dtype|type") as want:
        make(torch.nn)(torch.tensor(x))
    layer = make(dg.nn)
    run = dg.compile(layer) if lib == "compiled" else layer
    with pytest.raises(RuntimeError) as got:
        run(dg.tensor(x))
    assert message in str(got.value) and ".float()" in str(got.value)
    assert message in str(want.value) or "expected scalar type Double" in str(want.value)
    x = dg.tensor(x.astype(np.float32))
    np.testing.assert_allclose(run(x).detach().numpy(), layer(x).detach().numpy())


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="divisible by groups"):
        dg.nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="not supported for strided"):
        dg.nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        dg.nn.Conv2d(3, 4, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="must be divisible by num_groups"):
        dg.nn.GroupNorm(3, 4)
    with pytest.raises(ValueError, match='Only "zeros" padding mode'):
        dg.nn.ConvTranspose2d(3, 4, 3, padding_mode="reflect")
    with pytest.raises(TypeError, match="integer tensor"):
        dg.nn.Embedding(4, 2)(dg.tensor([1.0]))


def test_conv_transpose_output_size():
    ours = dg.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
    assert ours(dg.randn(1, 2, 4, 4), output_size=(8, 8)).shape == (1, 3, 8, 8)
    assert ours(dg.randn(1, 2, 4, 4)).shape == (1, 3, 7, 7)
    with pytest.raises(ValueError, match="valid sizes"):
        ours(dg.randn(1, 2, 4, 4), output_size=(10, 10))


# -- training loops -------------------------------------------------------------------------------
def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(),
                         nn.Linear(32, 5))


def _cnn(lib):
    nn = lib.nn
    # no conv bias: batch norm cancels it, so its gradient is rounding noise that Adam
    # would amplify into diverging values
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))


OPTIMIZERS = {
    "sgd_momentum": lambda lib, params: lib.optim.SGD(params, lr=0.05, momentum=0.9),
    "adam": lambda lib, params: lib.optim.Adam(params, lr=3e-3),
}


def _losses(lib, model, optimizer, x, y, steps=20):
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = lib.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return np.array(losses)


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("net,shape", [(_mlp, (64, 20)), (_cnn, (16, 1, 12, 12))],
                         ids=["mlp", "cnn"])
def test_training_loss_curve_matches_torch(net, shape, optimizer):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, 5, shape[0])
    torch.manual_seed(0)
    theirs = net(torch)
    ours = net(dg)
    ours.load_state_dict({k: dg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    ref = _losses(torch, theirs, OPTIMIZERS[optimizer](torch, theirs.parameters()),
                  torch.tensor(x), torch.tensor(y))
    got = _losses(dg, ours, OPTIMIZERS[optimizer](dg, ours.parameters()), dg.tensor(x),
                  dg.tensor(y))
    np.testing.assert_allclose(got, ref, rtol=1e-4)
    assert ref[-1] < ref[0]   # it learns
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name].numpy(), value.numpy(), rtol=1e-3,
                                   atol=1e-4, err_msg=name)


def test_compiled_training_step_equals_eager():
    """The layers are composites of registry ops and update their buffers with tensor ops,
    so a captured step (forward, backward, SGD, BatchNorm's cumulative running average)
    gives exactly the eager results."""
    def run(compiled):
        dg.manual_seed(0)
        nn = dg.nn
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False),
                              nn.BatchNorm2d(4, momentum=None), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
        opt = dg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x, y = dg.randn(16, 1, 12, 12), dg.randint(0, 5, (16,))

        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y, label_smoothing=0.1)
            loss.backward()
            opt.step()
            return loss
        run_step = dg.compile(step, fullgraph=True) if compiled else step
        return [run_step(x, y).item() for _ in range(4)], model.state_dict()

    eager, eager_state = run(False)
    compiled, compiled_state = run(True)
    np.testing.assert_allclose(compiled, eager, rtol=1e-6)
    for name, value in eager_state.items():
        np.testing.assert_allclose(compiled_state[name].numpy(), value.numpy(), rtol=1e-5,
                                   atol=1e-7, err_msg=name)


@pytest.mark.parametrize("kernel, stride, groups", [(3, 1, 1), (2, 2, 1), (1, 1, 1), (7, 2, 1),
                                                    (3, 1, 4), (1, 1, 2), (3, 2, 16)])
def test_conv2d_on_an_empty_batch_matches_torch(kernel, stride, groups):
    """A batch of no images (the last, empty batch of a loader; a detector's empty set of
    crops) gives an empty output, zero weight gradients and the bias gradient torch gives,
    eager and compiled (each conv path once raised on it: an empty block list, a reshape of
    an empty array by -1)."""
    torch.manual_seed(0)
    channels = 16 if groups == 16 else 4
    ref = torch.nn.Conv2d(channels, 16, kernel, stride=stride, groups=groups)
    ours = dg.nn.Conv2d(channels, 16, kernel, stride=stride, groups=groups)
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    tx = torch.ones(0, channels, 14, 14, requires_grad=True)
    x = dg.ones(0, channels, 14, 14, requires_grad=True)
    (ref(tx) ** 2).sum().backward()
    y = ours(x)
    (y ** 2).sum().backward()
    assert tuple(y.shape) == tuple(ref(tx).shape)
    assert tuple(x.grad.shape) == tuple(tx.grad.shape)
    np.testing.assert_array_equal(ours.weight.grad.numpy(), ref.weight.grad.numpy())
    np.testing.assert_array_equal(ours.bias.grad.numpy(), ref.bias.grad.numpy())
    with dg.no_grad():
        compiled = dg.compile(ours.eval())
        assert tuple(compiled(dg.ones(0, channels, 14, 14)).shape) == tuple(y.shape)
