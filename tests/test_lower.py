"""The lowering rule table (``passes/lower.py``): each rule's docstring example holds.

Each row's docstring shows a printed graph before the rule and after it; the test builds
the before graph, checks that it prints as the docstring says, runs the rule alone, and
checks the result against the after graph and, run, against the before graph's values.
"""

import numpy as np
import pytest

import dualgraph.optim   # noqa: F401  (registers the update ops group_updates groups)
from dualgraph.graph import Graph, verify
from dualgraph import kernels
from dualgraph.kernels import numba_available
from dualgraph.passes import LOWERING
from test_passes import random_inputs


def f32(g, name, *shape):
    return g.add_input(shape, "float32", name=name)


def loop_of_linears():
    g = Graph()
    x, w, b = f32(g, "x", 2, 2, 3), f32(g, "w", 4, 3), f32(g, "b", 4)
    outs = []
    for t in range(2):
        (s,) = g.add_node("slice", [x], {"index": (None, (t, t + 1, 1), None)}, names=[f"s{t}"])
        (x_t,) = g.add_node("reshape", [s], {"shape": (2, 3)}, names=[f"x{t}"])
        outs += g.add_node("linear", [x_t, w, b], names=[f"y{t}"])
    g.set_outputs(outs)
    return g


def conv_and_weight_grad():
    g = Graph()
    x, w, gy = f32(g, "x", 1, 1, 4, 4), f32(g, "w", 1, 1, 2, 2), f32(g, "gy", 1, 1, 3, 3)
    attrs = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    (y,) = g.add_node("conv2d", [x, w], attrs, names=["y"])
    (gw,) = g.add_node("conv2d_weight_grad", [x, gy], {"kernel_size": (2, 2), **attrs},
                       names=["gw"])
    g.set_outputs([y, gw])
    return g


def loss_and_gradient():
    g = Graph()
    x, seed = f32(g, "x", 4, 3), f32(g, "seed")
    t = g.add_input((4,), "int64", name="t")
    attrs = dict(ignore_index=-100, reduction="mean")
    (loss,) = g.add_node("cross_entropy", [x, t], attrs, names=["loss"])
    (dx,) = g.add_node("cross_entropy_backward", [seed, x, t], attrs, names=["dx"])
    g.set_outputs([loss, dx])
    return g


def scan_summing_a_weight_gradient():
    body = Graph()
    acc, g_t, x_t, w = f32(body, "acc", 3, 5), f32(body, "g_t", 2, 3), f32(body, "x_t", 2, 5), \
        f32(body, "w", 3, 5)
    dx, dw, _ = body.add_node("linear_backward", [g_t, x_t, w], {"need": (True, True, False)},
                              names=["dx", "dw", "db"])
    (total,) = body.add_node("add", [acc, dw], names=["total"])
    body.set_outputs([total, dx])
    g = Graph()
    inputs = [f32(g, "acc0", 3, 5), f32(g, "gs", 4, 2, 3), f32(g, "xs", 4, 2, 5),
              f32(g, "w", 3, 5)]
    g.set_outputs(list(g.add_node(
        "scan", inputs, {"body_graph": body, "num_carry": 1, "num_xs": 2, "length": 4,
                         "reverse": True}, names=["acc", "dxs"])))
    return g


def two_sgd_updates():
    g = Graph()
    attrs = dict(lr=0.1, momentum=0.9, dampening=0.0, nesterov=False)
    outs = []
    for p in ("p", "q"):
        params = [f32(g, p + suffix, 3) for suffix in ("", "_grad", "_buf")]
        outs += g.add_node("sgd_update", params, attrs, names=[p + "_new", p + "_buf_new"])
    g.set_outputs(outs)
    return g


def relu_of_a_linear():
    g = Graph()
    x, w, b = f32(g, "x", 4, 3), f32(g, "w", 5, 3), f32(g, "b", 5)
    (y,) = g.add_node("linear", [x, w, b], names=["y"])
    g.set_outputs(list(g.add_node("relu", [y], names=["h"])))
    return g


def relu_gradient_of_a_linear_gradient():
    g = Graph()
    gy, h, w = f32(g, "gy", 4, 5), f32(g, "h", 4, 3), f32(g, "w", 5, 3)
    dh, dw, _ = g.add_node("linear_backward", [gy, h, w], {"need": (True, True, False)},
                           names=["dh", "dw", "db"])
    g.set_outputs([*g.add_node("relu_backward", [dh, h], names=["dx"]), dw])
    return g


def batchnorm_after_a_linear():
    g = Graph()
    x = f32(g, "x", 2, 3)
    w = g.add_constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
    b = g.add_constant(np.array([0.5, 1, 1.5, 2], np.float32), name="b")
    mean = g.add_constant(np.full(4, 0.5, np.float32), name="mean")
    scale = g.add_constant(np.full(4, 2, np.float32), name="scale")
    (y,) = g.add_node("linear", [x, w, b], names=["y"])
    (c,) = g.add_node("sub", [y, mean], names=["c"])
    g.set_outputs(list(g.add_node("mul", [c, scale], names=["h"])))
    return g


def compressed_all_reduce():
    from dualgraph.distributed.mpi import Communicator
    from dualgraph.ops import collective
    if collective.STATE.comm is None:   # (a world of one process: no MPI)
        collective.STATE.comm = Communicator(None, timeout=60.0)
    g = Graph()
    x = f32(g, "g", 4)
    g.set_outputs(list(g.add_node("compressed_all_reduce", [x], {
        "reduction": "SUM", "dtype": np.dtype("float16")}, names=["r"])))
    return g


def relu_of_a_residual_conv():
    g = Graph()
    x, w, b, r = f32(g, "x", 1, 2, 4, 4), f32(g, "w", 2, 2, 3, 3), f32(g, "b", 2), \
        f32(g, "r", 1, 2, 4, 4)
    attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    (y,) = g.add_node("conv2d", [x, w, b], attrs, names=["y"])
    (s,) = g.add_node("add", [y, r], names=["s"])
    g.set_outputs(list(g.add_node("relu", [s], names=["h"])))
    return g


def cat_of_two_convs():
    g = Graph()
    x, w, b, v = f32(g, "x", 1, 2, 4, 4), f32(g, "w", 3, 2, 1, 1), f32(g, "b", 3), \
        f32(g, "v", 3, 2, 3, 3)
    attrs = lambda pad: dict(stride=(1, 1), padding=(pad, pad), dilation=(1, 1), groups=1)
    (y,) = g.add_node("conv2d", [x, w, b], attrs((0, 0)), names=["y"])
    (z,) = g.add_node("conv2d_epilogue", [x, v, b], dict(
        act="relu", bounds=(-np.inf, np.inf), residual_at=None, **attrs((1, 1))), names=["z"])
    g.set_outputs(list(g.add_node("cat", [y, z], {"dim": 1}, names=["c"])))
    return g


def max_pool_read_for_values():
    g = Graph()
    x = f32(g, "x", 1, 2, 5, 5)
    y, _ = g.add_node("max_pool2d", [x], dict(kernel_size=(3, 3), stride=(2, 2),
                                              padding=(0, 0), dilation=(1, 1),
                                              ceil_mode=False), names=["y", "i"])
    g.set_outputs([y])
    return g


def scaled_dot_product_attention():
    g = Graph()
    q, kt, v = f32(g, "q", 2, 3, 4), f32(g, "kt", 2, 4, 5), f32(g, "v", 2, 5, 4)
    (s,) = g.add_node("matmul", [q, kt], names=["s"])
    (scaled,) = g.add_node("mul", [s, 0.5], names=["scaled"])
    (p,) = g.add_node("softmax", [scaled], {"dim": 2}, names=["p"])
    g.set_outputs(list(g.add_node("matmul", [p, v], names=["o"])))
    return g


def residual_gelu_of_a_linear():
    g = Graph()
    x, w, b, r = f32(g, "x", 2, 3, 4), f32(g, "w", 5, 4), f32(g, "b", 5), f32(g, "r", 2, 3, 5)
    (y,) = g.add_node("linear", [x, w, b], names=["y"])
    (h,) = g.add_node("gelu", [y], names=["h"])
    g.set_outputs(list(g.add_node("add", [r, h], names=["s"])))
    return g


def ramp(g, name, lo, hi, *shape):
    """A constant of evenly spaced float32 values from ``lo`` to ``hi``."""
    return g.add_constant(np.linspace(lo, hi, int(np.prod(shape)), dtype=np.float32)
                          .reshape(shape), name=name)


def biased_matmul_by_a_constant():
    g = Graph()
    x, w, b = f32(g, "x", 2, 3, 4), ramp(g, "w", -1, 1, 4, 5), ramp(g, "b", 0, 1, 5)
    (y,) = g.add_node("matmul", [x, w], names=["y"])
    g.set_outputs(list(g.add_node("add", [y, b], names=["h"])))
    return g


def two_linears_of_one_input():
    g = Graph()
    x, wq, wk = f32(g, "x", 2, 3, 4), ramp(g, "wq", -1, 1, 3, 4), ramp(g, "wk", 1, 2, 4, 4)
    (q,) = g.add_node("linear", [x, wq], names=["q"])
    (k,) = g.add_node("linear", [x, wk], names=["k"])
    g.set_outputs([q, k])
    return g


def linear_by_a_constant():
    g = Graph()
    x, w = f32(g, "x", 4, 3), ramp(g, "w", -1, 1, 5, 3)
    g.set_outputs(list(g.add_node("linear", [x, w], names=["y"])))
    return g


def biased_linear_by_a_constant():
    g = Graph()
    x, w, b = f32(g, "x", 8, 256), ramp(g, "w", -1, 1, 128, 256), ramp(g, "b", -1, 1, 128)
    g.set_outputs(list(g.add_node("linear", [x, w, b], names=["y"])))
    return g


def linears_of_one_weight():
    g = Graph()
    x, w = f32(g, "x", 8, 3), f32(g, "w", 3, 3)
    y = x
    for t in range(1, 5):
        (y,) = g.add_node("linear", [y, w], names=[f"y{t}"])
    g.set_outputs(list(g.add_node("matmul", [y, w], names=["g"])))
    return g


def conv_by_a_constant():
    g = Graph()
    x, w, b = f32(g, "x", 1, 16, 5, 5), ramp(g, "w", -1, 1, 16, 16, 3, 3), ramp(g, "b", 0, 1, 16)
    g.set_outputs(list(g.add_node("conv2d_epilogue", [x, w, b], dict(
        act="relu", bounds=(-np.inf, np.inf), residual_at=None, stride=(1, 1),
        padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1), names=["y"])))
    return g


def packed_conv_of_a_normalised_input():
    g = Graph()
    x = f32(g, "x", 1, 16, 4, 4)
    s, t = ramp(g, "s", -1, 2, 16, 1, 1), ramp(g, "t", -1, 1, 16, 1, 1)
    wp, b = ramp(g, "wp", -1, 1, 1, 16, 16), ramp(g, "b", 0, 1, 16)
    sub = Graph()
    xs, ss, ts = (sub.add_input(v.shape, "float32", name=v.name) for v in (x, s, t))
    (m,) = sub.add_node("mul", [xs, ss], names=["m"])
    (a,) = sub.add_node("add", [m, ts], names=["a"])
    sub.set_outputs(list(sub.add_node("relu", [a], names=["h"])))
    (h,) = g.add_node("fused", [x, s, t], {"graph": sub}, names=["h"])
    g.set_outputs(list(g.add_node("conv2d_packed", [h, wp, b], dict(
        act="none", bounds=(-np.inf, np.inf), residual_at=None, stride=(1, 1),
        padding=((0, 0), (0, 0)), dilation=(1, 1), kernel_size=(1, 1), out_channels=16,
        groups=1), names=["y"])))
    return g


def chain_of_two_cats():
    g = Graph()
    x, y, z = f32(g, "x", 1, 2, 3), f32(g, "y", 1, 1, 3), f32(g, "z", 1, 2, 3)
    (c,) = g.add_node("cat", [x, y], {"dim": 1}, names=["c"])
    (d,) = g.add_node("cat", [c, z], {"dim": 1}, names=["d"])
    (e,) = g.add_node("exp", [c], names=["e"])
    g.set_outputs([d, e])
    return g


def linear_of_a_scaled_input():
    g = Graph()
    x = f32(g, "x", 5, 3)
    w, b = ramp(g, "w", -1, 1, 2, 3), ramp(g, "b", 1, 2, 2)
    s, t = ramp(g, "s", 2, 4, 3), ramp(g, "t", -1, 1, 3)
    (m,) = g.add_node("mul", [x, s], names=["m"])
    (a,) = g.add_node("add", [m, t], names=["a"])
    g.set_outputs(list(g.add_node("linear", [a, w, b], names=["h"])))
    return g


def winograd_conv_by_a_constant():
    g = Graph()
    x = f32(g, "x", 1, 128, 14, 14)
    w = ramp(g, "w", -1e-3, 1e-3, 128, 128, 3, 3)   # (small sums: the check's atol)
    b = ramp(g, "b", 0, 1, 128)
    g.set_outputs(list(g.add_node("conv2d_epilogue", [x, w, b], dict(
        act="relu", bounds=(-np.inf, np.inf), residual_at=None, stride=(1, 1),
        padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1), names=["y"])))
    return g


def layer_norm_of_a_residual_linear():
    g = Graph()
    x, w, b = f32(g, "x", 2, 3, 4), f32(g, "w", 5, 4), f32(g, "b", 5)
    r, gain, shift = f32(g, "r", 2, 3, 5), f32(g, "g", 5), f32(g, "s", 5)
    (y,) = g.add_node("linear_epilogue", [x, w, b, r], dict(
        act="none", bounds=(-np.inf, np.inf), residual_at="before"), names=["y"])
    n, _, _ = g.add_node("layer_norm", [y, gain, shift], dict(n_dims=1, eps=1e-5),
                         names=["n", "mean", "rstd"])
    g.set_outputs([n])
    return g


def rms_norm_as_written():
    g = Graph()
    x, w = f32(g, "x", 2, 3, 4), f32(g, "w", 4)
    (p,) = g.add_node("mul", [x, x], names=["p"])
    (m,) = g.add_node("mean", [p], {"dims": (2,), "keepdim": True}, names=["m"])
    (s,) = g.add_node("add", [m, 1e-6], names=["s"])
    (r,) = g.add_node("sqrt", [s], names=["r"])
    (d,) = g.add_node("div", [1, r], names=["d"])
    (n,) = g.add_node("mul", [x, d], names=["n"])
    g.set_outputs(list(g.add_node("mul", [n, w], names=["y"])))
    return g


def layer_norm_as_written():
    g = Graph()
    x = f32(g, "x", 2, 4)
    (m,) = g.add_node("mean", [x], {"dims": (1,), "keepdim": True}, names=["m"])
    (d,) = g.add_node("sub", [x, m], names=["d"])
    (p,) = g.add_node("mul", [d, d], names=["p"])
    (v,) = g.add_node("mean", [p], {"dims": (1,), "keepdim": True}, names=["v"])
    (s,) = g.add_node("add", [v, 1e-05], names=["s"])
    (r,) = g.add_node("sqrt", [s], names=["r"])
    g.set_outputs(list(g.add_node("div", [d, r], names=["y"])))
    return g


def pooled_depthwise_convs():
    g = Graph()
    x, w, b = f32(g, "x", 1, 8, 6, 6), ramp(g, "w", -1, 1, 8, 1, 3, 3), ramp(g, "b", 0, 1, 8)
    conv = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=8)
    (h,) = g.add_node("conv2d_epilogue", [x, w, b], dict(
        act="relu", bounds=(-np.inf, np.inf), residual_at=None, **conv), names=["h"])
    (y,) = g.add_node("conv2d", [h, w, b], conv, names=["y"])
    g.set_outputs(list(g.add_node("mean", [y], {"dims": (2, 3), "keepdim": False},
                                  names=["m"])))
    return g


def depthwise_conv_between_permutes():
    g = Graph()
    x, w, b = f32(g, "x", 1, 6, 6, 8), ramp(g, "w", -1, 1, 8, 1, 3, 3), ramp(g, "b", 0, 1, 8)
    (p,) = g.add_node("permute", [x], {"perm": (0, 3, 1, 2)}, names=["p"])
    (h,) = g.add_node("conv2d", [p, w, b], dict(
        stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=8), names=["h"])
    (y,) = g.add_node("add", [h, p], {}, names=["y"])
    g.set_outputs(list(g.add_node("permute", [y], {"perm": (0, 2, 3, 1)}, names=["z"])))
    return g


def squeeze_and_excitation():
    g = Graph()
    x, w1, b1 = f32(g, "x", 2, 6, 5, 5), f32(g, "w1", 2, 6, 1, 1), f32(g, "b1", 2)
    w2, b2 = f32(g, "w2", 6, 2, 1, 1), f32(g, "b2", 6)
    point = dict(residual_at=None, stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
                 groups=1)
    (m,) = g.add_node("mean", [x], {"dims": (2, 3), "keepdim": True}, names=["m"])
    (h,) = g.add_node("conv2d_epilogue", [m, w1, b1], dict(
        act="relu", bounds=(-np.inf, np.inf), **point), names=["h"])
    (gate,) = g.add_node("conv2d_epilogue", [h, w2, b2], dict(
        act="sigmoid", bounds=(-np.inf, np.inf), **point), names=["g"])
    g.set_outputs(list(g.add_node("mul", [x, gate], names=["y"])))
    return g


def gated_blocked_projection():
    g = Graph()
    x, w1, b1 = f32(g, "x", 1, 2, 9, 9, 8), f32(g, "w1", 2, 16, 1, 1), f32(g, "b1", 2)
    w2, b2 = f32(g, "w2", 16, 2, 1, 1), f32(g, "b2", 16)
    wp, b = f32(g, "wp", 1, 16, 24), f32(g, "b", 24)
    (s,) = g.add_node("squeeze_excite_blocked", [x, w1, b1, w2, b2], dict(
        acts=("relu", "clamp"), bounds=((-np.inf, np.inf), (0.0, 1.0))), names=["s"])
    g.set_outputs(list(g.add_node("pointwise_blocked", [s, wp, b], dict(
        act="none", bounds=(-np.inf, np.inf), residual_at=None), names=["y"])))
    return g


def expansion_into_a_depthwise_conv():
    g = Graph()
    x, wp, b = f32(g, "x", 1, 2, 66, 66, 8), f32(g, "wp", 2, 16, 24), f32(g, "b", 48)
    w, db = f32(g, "w", 48, 1, 3, 3), f32(g, "db", 48)
    relu6 = dict(act="clamp", bounds=(0.0, 6.0), residual_at=None)
    (e,) = g.add_node("pointwise_blocked", [x, wp, b], relu6, names=["e"])
    g.set_outputs(list(g.add_node("depthwise_blocked", [e, w, db], dict(
        **relu6, stride=(2, 2), padding=((1, 1), (1, 1)), dilation=(1, 1)), names=["y"])))
    return g


def patchify_conv_by_a_constant():
    g = Graph()
    x, w = f32(g, "x", 1, 3, 33, 32), ramp(g, "w", -1e-2, 1e-2, 5, 3, 16, 16)
    g.set_outputs(list(g.add_node("conv2d", [x, w], dict(
        stride=(16, 16), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1),
        names=["y"])))
    return g


def average_pool_of_a_pointwise_conv():
    g = Graph()
    x, w, b = f32(g, "x", 1, 4, 6, 6), f32(g, "w", 3, 4, 1, 1), f32(g, "b", 3)
    (y,) = g.add_node("conv2d", [x, w, b], dict(
        stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1), names=["y"])
    g.set_outputs(list(g.add_node("avg_pool2d", [y], dict(
        kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), ceil_mode=False,
        count_include_pad=True, divisor_override=None), names=["z"])))
    return g


EXAMPLES = {
    "pool_before_conv": average_pool_of_a_pointwise_conv,
    "patchify_conv": patchify_conv_by_a_constant,
    "gate_into_weights": gated_blocked_projection,
    "expand_into_depthwise": expansion_into_a_depthwise_conv,
    "channels_last": pooled_depthwise_convs,
    "channels_last_views": depthwise_conv_between_permutes,
    "blocked_channels": pooled_depthwise_convs,
    "fuse_rms_norm": rms_norm_as_written,
    "fuse_layer_norm": layer_norm_as_written,
    "squeeze_excite": squeeze_and_excitation,
    "linear_norm": layer_norm_of_a_residual_linear,
    "constant_linears": biased_matmul_by_a_constant,
    "join_linears": two_linears_of_one_input,
    "weights_kn": linear_by_a_constant,
    "linear_packed": biased_linear_by_a_constant,
    "step_weights_kn": linears_of_one_weight,
    "conv_packed": conv_by_a_constant,
    "conv_winograd": winograd_conv_by_a_constant,
    "fold_batchnorm": batchnorm_after_a_linear,
    "max_pool_values": max_pool_read_for_values,
    "conv_epilogue": relu_of_a_residual_conv,
    "conv_cat": cat_of_two_convs,
    "conv_prologue": packed_conv_of_a_normalised_input,
    "cat_in_place": chain_of_two_cats,
    "fold_input_affine": linear_of_a_scaled_input,
    "batch_linears": loop_of_linears,
    "share_conv_columns": conv_and_weight_grad,
    "join_loss_gradient": loss_and_gradient,
    "compress_all_reduces": compressed_all_reduce,
    "batch_scan_linears": scan_summing_a_weight_gradient,
    "group_updates": two_sgd_updates,
    "linear_relu": relu_of_a_linear,
    "relu_backward_in_place": relu_gradient_of_a_linear_gradient,
    "fuse_attention": scaled_dot_product_attention,
    "linear_epilogue": residual_gelu_of_a_linear,
}


def example(doc: str, label: str) -> str:
    """The printed graph under ``label::`` in a docstring, its whitespace collapsed (the
    docstring breaks lines longer than the house width)."""
    lines = doc.split(f"{label}::\n", 1)[1].splitlines()
    block = []
    for line in lines:
        if line.strip() and not line.startswith(" " * 8):
            break   # (the next paragraph)
        block.append(line)
    assert "".join(block).strip(), f"no {label}:: example"
    return flat("\n".join(block))


def flat(text: str) -> str:
    return " ".join(text.split())


def test_every_rule_has_an_example():
    assert sorted(EXAMPLES) == sorted(rule.name for rule in LOWERING)


@pytest.mark.parametrize("rule", LOWERING, ids=[rule.name for rule in LOWERING])
def test_the_docstring_example_of_each_lowering_rule_holds(rule, monkeypatch):
    if rule.name in ("relu_backward_in_place", "conv_prologue") and not numba_available():
        pytest.skip("the in-place loop (the prologue's) is a Numba loop")
    if rule.name == "linear_packed" and not kernels.linear_packed.wanted(8, 256, 128):
        pytest.skip("the packed loop's rule takes linears on AVX-512 hosts only")
    if rule.name == "conv_winograd":     # (its cost rule takes one core only)
        monkeypatch.setattr(kernels.conv_winograd, "cores", lambda: 1)
    before = EXAMPLES[rule.name]()
    assert flat(str(before)) == example(rule.doc, "Before")
    after, report = rule(before)
    verify(after)
    assert flat(str(after)) == example(rule.doc, "After")
    assert report.changed and all(item.startswith(rule.name + ": ") for item in report.items)
    args = random_inputs(before, 2)
    if rule.name == "join_loss_gradient":
        args[2] = np.arange(4) % 3
    if rule.name == "group_updates":
        args = [np.abs(a) for a in args]
    for got, want in zip(after(*[a.copy() for a in args]), before(*[a.copy() for a in args]),
                         strict=True):
        # (linear_packed: sums of 256 terms of up to ~5 added in another order)
        rtol, atol = (1e-5, 1e-4) if rule.name == "linear_packed" else (1e-6, 1e-6)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
