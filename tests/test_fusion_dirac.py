"""Round 13's deployment names (a RepVGG-style program met them missing):
``nn.utils.fuse_conv_bn_eval`` / ``fuse_linear_bn_eval`` and their ``*_weights`` forms
give torch's fused parameters (values, dtypes, ``requires_grad``) and a layer computing
what conv/linear + eval batch norm computed; ``nn.init.dirac_`` writes torch's identity
kernels, grouped or not, for 3-, 4- and 5-D weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(13)


def _pair(make, state):
    ours, theirs = make(dg), make(torch)
    ours.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    return ours.eval(), theirs.eval()


def _bn_state(prefix, n):
    return {f"{prefix}.weight": RNG.normal(1, 0.3, n).astype(np.float32),
            f"{prefix}.bias": RNG.normal(0, 0.3, n).astype(np.float32),
            f"{prefix}.running_mean": RNG.normal(0, 0.5, n).astype(np.float32),
            f"{prefix}.running_var": RNG.uniform(0.2, 2, n).astype(np.float32),
            f"{prefix}.num_batches_tracked": np.array(3)}


@pytest.mark.parametrize("bias,transpose,groups", [(True, False, 1), (False, False, 2),
                                                   (False, True, 1)])
def test_fuse_conv_bn_eval_matches_torch(bias, transpose, groups):
    def make(m):
        conv = (m.nn.ConvTranspose2d(4, 6, 3, bias=bias) if transpose else
                m.nn.Conv2d(4, 6, 3, bias=bias, groups=groups))
        return m.nn.Sequential(conv, m.nn.BatchNorm2d(6))
    shape = (4, 6, 3, 3) if transpose else (6, 4 // groups, 3, 3)
    state = {"0.weight": RNG.normal(0, 0.3, shape).astype(np.float32),
             **_bn_state("1", 6)}
    if bias:
        state["0.bias"] = RNG.normal(0, 0.3, 6).astype(np.float32)
    ours, theirs = _pair(make, state)
    fused = dg.nn.utils.fuse_conv_bn_eval(ours[0], ours[1], transpose=transpose)
    want = torch.nn.utils.fuse_conv_bn_eval(theirs[0], theirs[1], transpose=transpose)
    for name in ("weight", "bias"):
        got, ref = getattr(fused, name), getattr(want, name)
        np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-6,
                                   atol=1e-7)
        assert isinstance(got, dg.nn.Parameter) and got.requires_grad == ref.requires_grad
    assert fused is not ours[0]
    x = RNG.normal(size=(2, 4, 5, 5)).astype(np.float32)
    with dg.no_grad():
        np.testing.assert_allclose(fused(dg.tensor(x)).numpy(), ours(dg.tensor(x)).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_fuse_linear_bn_eval_matches_torch_and_refuses_training():
    def make(m):
        return m.nn.Sequential(m.nn.Linear(5, 3), m.nn.BatchNorm1d(3))
    state = {"0.weight": RNG.normal(size=(3, 5)).astype(np.float32),
             "0.bias": RNG.normal(size=3).astype(np.float32), **_bn_state("1", 3)}
    ours, theirs = _pair(make, state)
    fused = dg.nn.utils.fuse_linear_bn_eval(ours[0], ours[1])
    want = torch.nn.utils.fuse_linear_bn_eval(theirs[0], theirs[1])
    x = RNG.normal(size=(4, 5)).astype(np.float32)
    np.testing.assert_allclose(fused(dg.tensor(x)).detach().numpy(),
                               want(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    w, b = dg.nn.utils.fuse_linear_bn_weights(ours[0].weight, None, ours[1].running_mean,
                                              ours[1].running_var, 1e-5, ours[1].weight,
                                              ours[1].bias)
    assert w.requires_grad and not b.requires_grad
    with pytest.raises(AssertionError, match="Fusion only for eval"):
        dg.nn.utils.fuse_linear_bn_eval(ours[0].train(), ours[1])


@pytest.mark.parametrize("shape,groups", [((4, 2, 3), 2), ((6, 4, 3, 3), 1),
                                          ((6, 2, 3, 5), 3), ((2, 3, 1, 3, 3), 1)])
def test_dirac_matches_torch(shape, groups):
    ours, theirs = dg.full(shape, 5.0), torch.full(shape, 5.0)
    assert dg.nn.init.dirac_(ours, groups=groups) is ours
    torch.nn.init.dirac_(theirs, groups=groups)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_dirac_errors_as_torch():
    with pytest.raises(ValueError, match="Only tensors with 3, 4, or 5 dimensions"):
        dg.nn.init.dirac_(dg.empty(3, 3))
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        dg.nn.init.dirac_(dg.empty(5, 2, 3), groups=2)
