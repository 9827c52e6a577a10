"""Folding an eval-mode batch norm into the convolution or linear layer before it, as
``torch.nn.utils.fusion`` (``fuse_conv_bn_eval``, ``fuse_linear_bn_eval`` and their
``*_weights`` forms) does for deployment: the fused layer's weight scaled per output
channel by ``gamma / sqrt(running_var + eps)`` and its bias moved by the running mean, so
one layer computes what the two did. Built from tensor ops (``rsqrt``, broadcasting), so
the fused parameters keep torch's dtypes and ``requires_grad``."""
from __future__ import annotations

import copy

from ...ops import creation, elementwise
from ..parameter import Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights"]


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    """A copy of ``conv`` computing ``bn(conv(x))`` with ``bn``'s running statistics (both
    in eval mode); ``transpose`` for a transposed conv (output channels on dim 1)."""
    assert not (conv.training or bn.training), "Fusion only for eval!"
    assert bn.running_mean is not None and bn.running_var is not None
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight,
        bn.bias, transpose)
    return fused


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b,
                         transpose: bool = False):
    """The fused conv's (weight, bias) Parameters; a missing conv bias is zeros (and the
    fused bias then requires no grad, as torch's), missing affine weights ones and zeros."""
    weight_dtype = conv_w.dtype
    bias_dtype = conv_b.dtype if conv_b is not None else weight_dtype
    conv_b = creation.zeros_like(bn_rm) if conv_b is None else conv_b
    bn_w = creation.ones_like(bn_rm) if bn_w is None else bn_w
    bn_b = creation.zeros_like(bn_rm) if bn_b is None else bn_b
    rsqrt = elementwise.rsqrt(bn_rv + bn_eps)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (conv_w.ndim - 2)
    weight = (conv_w * (bn_w * rsqrt).reshape(shape)).to(weight_dtype)
    bias = ((conv_b - bn_rm) * rsqrt * bn_w + bn_b).to(bias_dtype)
    return (Parameter(weight, conv_w.requires_grad), Parameter(bias, conv_b.requires_grad))


def fuse_linear_bn_eval(linear, bn):
    """A copy of ``linear`` computing ``bn(linear(x))`` with ``bn``'s running statistics
    (both in eval mode; ``bn`` over the linear's outputs, or one feature for all)."""
    assert not (linear.training or bn.training), "Fusion only for eval!"
    assert linear.out_features == bn.num_features or bn.num_features == 1, \
        "To fuse, linear.out_features == bn.num_features or bn.num_features == 1"
    assert bn.running_mean is not None and bn.running_var is not None
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """The fused linear layer's (weight, bias) Parameters, as :func:`fuse_conv_bn_weights`."""
    weight_dtype = linear_w.dtype
    bias_dtype = linear_b.dtype if linear_b is not None else weight_dtype
    linear_b = creation.zeros_like(bn_rm) if linear_b is None else linear_b
    scale = bn_w * elementwise.rsqrt(bn_rv + bn_eps)
    weight = linear_w * scale.unsqueeze(-1).to(weight_dtype)
    bias = ((linear_b - bn_rm) * scale + bn_b).to(bias_dtype)
    return (Parameter(weight, linear_w.requires_grad), Parameter(bias, linear_b.requires_grad))
