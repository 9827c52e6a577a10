"""Rows for convolution and pooling: conv1d/2d, conv_transpose, max/avg/adaptive pooling,
and double backward through each backward op (its row differentiates a first gradient)."""
from dualgraph.dispatch import apply
from dualgraph.ops import conv as conv_ops

from . import In, OpCase

LOW = ("float32", "float64", "float16", "bfloat16")


def first_grad(m, fn, wrt, g):
    """d fn(wrt) / d wrt against cotangent ``g``, as a differentiable function: the rows of
    the backward ops. ``enable_grad`` because the finite-difference check runs under
    no_grad."""
    with m.enable_grad():
        wrt = wrt.detach().requires_grad_()
        return m.autograd.grad(fn(wrt), wrt, g, create_graph=True)[0]


def conv(m, x, w, b=None, **kw):
    return m.nn.functional.conv2d(x, w, b, **kw)


def D(*shape):  # well-separated values: stable argmax for max pooling
    return In(shape, "distinct")


def columns_conv(with_bias, **attrs):
    """conv2d through shared columns (what passes.share_conv_columns makes) vs torch's."""
    conv_attrs = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    conv_attrs.update(attrs)

    def fn(m, x, w, *bias):
        if m.__name__ == "torch":
            (ph, _), (pw, _) = conv_attrs["padding"]
            return m.nn.functional.conv2d(x, w, *bias, stride=conv_attrs["stride"],
                                          padding=(ph, pw), dilation=conv_attrs["dilation"],
                                          groups=conv_attrs["groups"])
        cols = apply(conv_ops.CONV2D_COLUMNS, x, kernel_size=tuple(w.shape[2:]), **conv_attrs)
        return apply(conv_ops.CONV2D_FROM_COLUMNS, cols, x, w, *bias, **conv_attrs)
    return fn


def columns_weight_grad(**attrs):
    """conv2d_weight_grad through shared columns vs torch's ``conv2d_weight``."""
    conv_attrs = dict(stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    conv_attrs.update(attrs)

    def fn(m, x, g):
        kernel = (3, 2)
        if m.__name__ == "torch":
            (ph, _), (pw, _) = conv_attrs["padding"]
            w_shape = (g.shape[1], x.shape[1] // conv_attrs["groups"]) + kernel
            return m.nn.grad.conv2d_weight(x, w_shape, g, stride=conv_attrs["stride"],
                                           padding=(ph, pw), dilation=conv_attrs["dilation"],
                                           groups=conv_attrs["groups"])
        cols = apply(conv_ops.CONV2D_COLUMNS, x, kernel_size=kernel, **conv_attrs)
        return apply(conv_ops.CONV2D_WEIGHT_GRAD_FROM_COLUMNS, cols, x, g, kernel_size=kernel,
                     **conv_attrs)
    return fn


CASES = [
    # conv2d: strides, paddings (int, pair, 'same', 'valid'), dilation, groups, bias
    OpCase("conv2d", lambda m, x, w, b: conv(m, x, w, b), [In((2, 3, 7, 6)), In((4, 3, 3, 3)),
                                                          In((4,))], "basic", dtypes=LOW,
           atol=1e-4),
    OpCase("conv2d", lambda m, x, w, b: conv(m, x, w, b, stride=2, padding=(1, 2),
                                             dilation=(2, 1)),
           [In((2, 3, 9, 8)), In((4, 3, 3, 2)), In((4,))], "stride-pad-dilation"),
    OpCase("conv2d", lambda m, x, w: conv(m, x, w, groups=2, stride=(1, 2), padding=1),
           [In((2, 4, 6, 7)), In((6, 2, 3, 3))], "groups"),
    OpCase("conv2d", lambda m, x, w, b: conv(m, x, w, b, groups=3, padding=1),
           [In((2, 3, 5, 5)), In((3, 1, 3, 3)), In((3,))], "depthwise"),
    OpCase("conv2d", lambda m, x, w: conv(m, x, w, padding="same", dilation=2),
           [In((2, 2, 7, 6)), In((3, 2, 4, 3))], "same-even-kernel"),
    OpCase("conv2d", lambda m, x, w: conv(m, x, w, padding="valid"),
           [In((1, 1, 5, 9)), In((2, 1, 2, 4))], "valid"),
    OpCase("conv2d", lambda m, x, w: conv(m, x, w, stride=(2, 3)),
           [In((1, 2, 7, 11)), In((3, 2, 3, 2))], "odd-stride"),
    OpCase("conv2d", lambda m, x, w: conv(m, x, w, padding=1), [In((2, 5, 4)), In((3, 2, 3, 3))],
           "unbatched"),
    OpCase("conv2d", lambda m, x, w, b: m.nn.functional.conv1d(x, w, b, stride=2, padding=1),
           [In((2, 3, 9)), In((4, 3, 3)), In((4,))], "conv1d"),
    OpCase("conv2d", lambda m, x, w: m.nn.functional.conv1d(x, w, padding="same", groups=2,
                                                            dilation=2),
           [In((2, 4, 8)), In((2, 2, 4))], "conv1d-same-groups"),
    # conv2d_input_grad: conv_transpose, and the input gradient differentiated again
    OpCase("conv2d_input_grad", lambda m, x, w, b: m.nn.functional.conv_transpose2d(
        x, w, b, stride=2, padding=1, output_padding=1),
        [In((2, 4, 4, 3)), In((4, 3, 3, 3)), In((3,))], "transpose", atol=1e-4,
        dtypes=("float32", "float64", "bfloat16")),  # torch's float16 sums in float16
    OpCase("conv2d_input_grad", lambda m, x, w: m.nn.functional.conv_transpose2d(
        x, w, stride=(2, 3), groups=2, dilation=2, output_padding=(1, 0)),
        [In((2, 4, 4, 3)), In((4, 3, 3, 2))], "transpose-groups-dilation"),
    OpCase("conv2d_input_grad", lambda m, x, w: m.nn.functional.conv_transpose1d(
        x, w, stride=2, padding=1), [In((2, 4, 5)), In((4, 3, 3))], "transpose1d"),
    OpCase("conv2d_input_grad", lambda m, x, w: m.nn.functional.conv_transpose2d(
        x, w, padding=1, groups=2, dilation=(1, 2)),
        [In((2, 4, 5, 6)), In((4, 3, 3, 2))], "stride1-groups-dilation"),
    OpCase("conv2d_input_grad", lambda m, x, w, g: first_grad(
        m, lambda x: conv(m, x, w, stride=2, padding=1, groups=2), x, g),
        [In((2, 4, 5, 6), grad=False), In((4, 2, 3, 3)), In((2, 4, 3, 3))], "double-backward"),
    # conv2d_weight_grad: only reachable as a gradient, so differentiated again here
    OpCase("conv2d_weight_grad", lambda m, x, w, g: first_grad(
        m, lambda w: conv(m, x, w, stride=2, padding=1, dilation=(1, 2)), w, g),
        [In((2, 3, 6, 7)), In((4, 3, 3, 2), grad=False), In((2, 4, 3, 4))], "double-backward"),
    OpCase("conv2d_weight_grad", lambda m, x, w, g: first_grad(
        m, lambda w: conv(m, x, w, groups=2, padding="same"), w, g),
        [In((1, 4, 5, 5)), In((2, 2, 3, 3), grad=False), In((1, 2, 5, 5))], "groups-same"),
    # the GEMMs on shared columns (made by a pass after autodiff: no gradients)
    OpCase("conv2d_columns", columns_conv(True, padding=((1, 1), (2, 2))),
           [In((2, 3, 7, 6)), In((4, 3, 3, 3)), In((4,))], "padded", grad=False,
           dtypes=("float32", "float64"), atol=1e-4),
    OpCase("conv2d_columns", columns_conv(False, padding=((1, 1), (0, 0)), dilation=(2, 1),
                                          groups=2),
           [In((2, 4, 7, 6)), In((6, 2, 3, 2))], "dilated-groups", grad=False),
    OpCase("conv2d_from_columns", columns_conv(False, stride=(2, 1), dilation=(1, 2),
                                               groups=2),
           [In((2, 4, 9, 8)), In((6, 2, 3, 2))], "strided-groups", grad=False),
    OpCase("conv2d_weight_grad_from_columns", columns_weight_grad(padding=((1, 1), (0, 0))),
           [In((2, 3, 6, 7)), In((2, 4, 6, 6))], "padded", grad=False,
           dtypes=("float32", "float64"), atol=1e-4),
    OpCase("conv2d_weight_grad_from_columns", columns_weight_grad(
        padding=((0, 0), (1, 1)), dilation=(1, 2)),
           [In((2, 3, 6, 7)), In((2, 4, 4, 7))], "dilated", grad=False),
    OpCase("conv2d_weight_grad_from_columns", columns_weight_grad(stride=(2, 2), groups=3),
           [In((2, 3, 7, 6)), In((2, 6, 3, 3))], "strided-groups", grad=False),
    # max pooling: -inf padding, ceil_mode, overlapping windows, dilation, indices
    OpCase("max_pool2d", lambda m, x: m.nn.functional.max_pool2d(x, 2), [D(2, 3, 8, 7)],
           "basic", dtypes=LOW),
    OpCase("max_pool2d", lambda m, x: m.nn.functional.max_pool2d(x, 3, 2, 1, ceil_mode=True),
           [D(2, 2, 8, 7)], "pad-ceil"),
    OpCase("max_pool2d", lambda m, x: m.nn.functional.max_pool2d(x, (3, 2), (1, 2),
                                                                 dilation=(2, 1)),
           [D(1, 2, 8, 7)], "overlap-dilation"),
    OpCase("max_pool2d", lambda m, x: m.nn.functional.max_pool2d(x, 2, padding=1,
                                                                 return_indices=True),
           [D(2, 2, 5, 5)], "indices"),
    OpCase("max_pool2d", lambda m, x: m.nn.functional.max_pool2d(x, 2, 1), [D(3, 5, 4)],
           "unbatched"),
    OpCase("max_pool2d", lambda m, x: m.nn.functional.max_pool1d(x, 3, 2, 1, ceil_mode=True,
                                                                 return_indices=True),
           [D(2, 3, 10)], "1d"),
    OpCase("max_pool2d_backward", lambda m, x, g: first_grad(
        m, lambda x: m.nn.functional.max_pool2d(x, 3, 2, 1), x, g),
        [In((2, 2, 6, 5), "distinct", grad=False), In((2, 2, 3, 3))], "double-backward"),
    # average pooling: padding counted or not, ceil_mode's partial windows, divisor_override
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.avg_pool2d(x, 2), [In((2, 3, 8, 7))],
           "basic", dtypes=LOW),
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
           [In((2, 2, 8, 7))], "pad-ceil"),
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.avg_pool2d(
        x, 3, 2, 1, ceil_mode=True, count_include_pad=False), [In((2, 2, 8, 7))], "exclude-pad"),
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.avg_pool2d(x, (3, 2), 2, (1, 0),
                                                                 divisor_override=5),
           [In((1, 2, 8, 7))], "divisor-override"),
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.avg_pool1d(x, 3, 2, 1, ceil_mode=True),
           [In((2, 3, 10))], "1d"),
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.adaptive_avg_pool2d(x, (2, None)),
           [In((2, 3, 8, 7))], "adaptive"),
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.adaptive_avg_pool2d(x, 1),
           [In((2, 3, 5, 5))], "global", dtypes=LOW),
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.avg_pool2d(x.transpose(2, 3), (7, 4)),
           [In((2, 3, 4, 7))], "global-transposed-3d"),
    OpCase("avg_pool2d", lambda m, x: m.nn.functional.avg_pool2d(x, (5, 3), padding=1),
           [In((3, 5, 3))], "whole-plane-padded"),
    OpCase("matmul", lambda m, x: m.nn.functional.adaptive_avg_pool2d(x, (3, 5)),
           [In((2, 3, 8, 7))], "adaptive-uneven"),
    OpCase("matmul", lambda m, x: m.nn.functional.adaptive_avg_pool1d(x, 4), [In((2, 3, 10))],
           "adaptive1d"),
    OpCase("avg_pool2d_backward", lambda m, x, g: first_grad(
        m, lambda x: m.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                count_include_pad=False), x, g),
        [In((2, 2, 6, 5), grad=False), In((2, 2, 4, 3))], "double-backward"),
    OpCase("avg_pool2d_backward", lambda m, x, g: first_grad(
        m, lambda x: m.nn.functional.adaptive_avg_pool2d(x, 1), x, g),
        [In((2, 3, 6, 5), grad=False), In((2, 3, 1, 1))], "global-double-backward"),
]


def conv_epilogue(act, residual_at=None, **conv_attrs):
    """conv2d_epilogue (what passes.conv_epilogue makes) vs torch's conv, activation and
    residual add."""
    attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    attrs.update(conv_attrs)
    bounds = (0.0, 6.0) if act == "clamp" else (float("-inf"), float("inf"))

    def fn(m, x, w, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.epilogue import CONV2D_EPILOGUE
            return apply(CONV2D_EPILOGUE, x, w, b, *residual, act=act, bounds=bounds,
                         residual_at=residual_at, **attrs)
        F = m.nn.functional
        (ph, _), (pw, _) = attrs["padding"]
        y = F.conv2d(x, w, b, stride=attrs["stride"], padding=(ph, pw),
                     dilation=attrs["dilation"], groups=attrs["groups"])
        return torch_tail(m, y, residual, act, residual_at)
    return fn


def torch_tail(m, y, residual, act, residual_at):
    """torch's activation and residual add after a layer's output ``y`` (the epilogues')."""
    F = m.nn.functional
    if residual and residual_at == "before":
        y = y + residual[0]
    y = {"none": lambda v: v, "relu": F.relu, "clamp": F.relu6, "sigmoid": m.sigmoid,
         "silu": F.silu, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
         "gelu": F.gelu,
         "gelu_tanh": lambda v: F.gelu(v, approximate="tanh")}[act](y)
    return y + residual[0] if residual and residual_at == "after" else y


CASES += [   # (sizes past the float32 loop's threshold, and one below it: NumPy's passes)
    OpCase("conv2d_epilogue", conv_epilogue(act, at),
           [In((2, 8, 18, 18)), In((8, 8, 3, 3)), In((8,))]
           + ([In((2, 8, 18, 18))] if at else []), f"{act}-{at}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act, at in [("relu", "before"), ("clamp", None), ("sigmoid", "after"), ("silu", None),
                    ("hardswish", "after"), ("gelu", None), ("gelu_tanh", "before"),
                    ("none", "before"), ("hardsigmoid", None)]
] + [
    OpCase("conv2d_epilogue", conv_epilogue("clamp", groups=4, stride=(2, 2)),
           [In((1, 4, 9, 9)), In((4, 1, 3, 3)), In((4,))], "depthwise-small", grad=False),
]


def conv_packed(act, residual_at=None, cout=21, kernel=(3, 3), **conv_attrs):
    """conv2d_packed (what passes.conv_packed makes) vs torch's conv of the weight unpacked
    (``(pairs, C*kh*kw, 16)`` -> ``(Cout, C, kh, kw)``: lanes past ``cout`` unread), then
    its activation and residual add."""
    attrs = dict(stride=(2, 2), padding=((1, 1), (0, 1)), dilation=(1, 1))
    attrs.update(conv_attrs)

    def fn(m, x, wp, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.epilogue import CONV2D_PACKED
            return apply(CONV2D_PACKED, x, wp, b, *residual, act=act,
                         bounds=(float("-inf"), float("inf")), residual_at=residual_at,
                         kernel_size=kernel, out_channels=cout, **attrs)
        groups = attrs.get("groups", 1)
        w = wp.permute(0, 2, 1).reshape(-1, x.shape[1] // groups, *kernel)[:cout]
        (top, bottom), (left, right) = attrs["padding"]
        xp = m.nn.functional.pad(x, (left, right, top, bottom))
        y = m.nn.functional.conv2d(xp, w, b, stride=attrs["stride"],
                                   dilation=attrs["dilation"], groups=groups)
        return torch_tail(m, y, residual, act, residual_at)
    return fn


CASES += [   # (13 input channels, 21 outputs: a spare half of the second pair of blocks)
    OpCase("conv2d_packed", conv_packed(act, at), [In((2, 13, 11, 9)), In((2, 117, 16)),
                                                   In((21,))]
           + ([In((2, 21, 6, 4))] if at else []), f"{act}-{at}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act, at in [("relu", None), ("silu", "before"), ("none", "after")]
] + [   # (two groups of 16 inputs and 16 outputs: a pair of blocks each)
    OpCase("conv2d_packed", conv_packed("relu", "before", cout=32, groups=2),
           [In((2, 32, 11, 9)), In((2, 144, 16)), In((32,)), In((2, 32, 6, 4))], "groups",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
]


def winograd_weight(m, w):
    """``conv2d_winograd``'s weight ``G w G^T`` of ``w`` ``(Cout, C, 3, 3)``, ``(16, Cout,
    C)``, made with tensor ops."""
    g = m.tensor([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=w.dtype)
    return (g @ w @ g.T).permute(2, 3, 0, 1).reshape(16, *w.shape[:2])


def conv_winograd(act, residual_at=None, padding=((1, 1), (0, 2))):
    """conv2d_winograd (what passes.conv_winograd makes) on the transform ``G w G^T`` of
    ``w`` (made here with tensor ops: only a transformed weight is a conv's) vs torch's conv
    of ``w``, then its activation and residual add."""
    def fn(m, x, w, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.epilogue import CONV2D_WINOGRAD
            return apply(CONV2D_WINOGRAD, x, winograd_weight(m, w), b, *residual, act=act,
                         bounds=(float("-inf"), float("inf")), residual_at=residual_at,
                         padding=padding)
        (top, bottom), (left, right) = padding
        y = m.nn.functional.conv2d(m.nn.functional.pad(x, (left, right, top, bottom)), w, b)
        return torch_tail(m, y, residual, act, residual_at)
    return fn


CASES += [
    OpCase("conv2d_winograd", conv_winograd(act, at), [In((2, 13, 11, 9)), In((21, 13, 3, 3)),
                                                       In((21,))]
           + ([In((2, 21, 11, 9))] if at else []), f"{act}-{at}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act, at in [("relu", None), ("silu", "before"), ("none", "after")]
]


def conv_cat(winograd: bool):
    """conv2d_cat (what passes.conv_cat makes) of a 1x1 and a 3x3 conv (a
    ``conv2d_winograd`` member on its transformed weight with ``winograd``) vs torch's cat
    of the two convs."""
    def fn(m, x, w1, w3, b1, b3):
        conv = dict(stride=(1, 1), dilation=(1, 1), groups=1)
        if m.__name__ != "torch":
            from dualgraph.ops.epilogue import (CONV2D_CAT, CONV2D_EPILOGUE, CONV2D_WINOGRAD,
                                                cat_member)
            inf = (float("-inf"), float("inf"))
            tail = dict(bounds=inf, residual_at=None)
            members = (cat_member(CONV2D_EPILOGUE, 3, dict(act="none", padding=((0, 0),) * 2,
                                                           **tail, **conv)),
                       cat_member(CONV2D_WINOGRAD, 3, dict(act="silu", padding=((1, 1),) * 2,
                                                           **tail))
                       if winograd else
                       cat_member(CONV2D_EPILOGUE, 3, dict(act="silu", padding=((1, 1),) * 2,
                                                           **tail, **conv)))
            return apply(CONV2D_CAT, x, w1, b1, x, winograd_weight(m, w3) if winograd else w3,
                         b3, members=members)
        F = m.nn.functional
        return m.cat([F.conv2d(x, w1, b1, **conv),
                      F.silu(F.conv2d(x, w3, b3, padding=1, **conv))], 1)
    return fn


CASES += [
    OpCase("conv2d_cat", conv_cat(winograd), [In((n, 3, h, w)), In((4, 3, 1, 1)),
                                              In((5, 3, 3, 3)), In((4,)), In((5,))],
           f"batch{n}{'-winograd' if winograd else ''}", dtypes=("float32", "float64"),
           grad=False, atol=1e-4)
    for n, h, w in [(1, 7, 6), (2, 5, 5)] for winograd in (False, True)
]


def _unpacked_1x1(wp, c, cout):
    """The ``(cout, c, 1, 1)`` weight of a packed 1x1 weight ``(pairs, c, 16)``."""
    return wp.permute(0, 2, 1).reshape(-1, c, 1, 1)[:cout]


def conv_prologue(pre_act):
    """conv2d_prologue (what passes.conv_prologue makes: a 1x1 conv2d_packed of
    ``pre_act(x * scale + shift)``) vs torch's scale, shift, activation and conv."""
    bounds = (0.0, 6.0) if pre_act == "clamp" else (float("-inf"), float("inf"))

    def fn(m, x, scale, shift, wp, b):
        if m.__name__ != "torch":
            from dualgraph.ops.prologue import CONV2D_PROLOGUE
            return apply(CONV2D_PROLOGUE, x, scale, shift, wp, b, pre_act=pre_act,
                         pre_bounds=bounds, act="relu", bounds=(float("-inf"), float("inf")),
                         residual_at=None, stride=(1, 1), padding=((0, 0), (0, 0)),
                         dilation=(1, 1), kernel_size=(1, 1), out_channels=11, groups=1)
        t = x * scale[:, None, None] + shift[:, None, None]
        t = {"none": t, "relu": m.relu(t), "clamp": t.clamp(*bounds)}[pre_act]
        return m.relu(m.nn.functional.conv2d(t, _unpacked_1x1(wp, x.shape[1], 11), b))
    return fn


CASES += [
    OpCase("conv2d_prologue", conv_prologue(act), [In((2, 13, 5, 4)), In((13,)), In((13,)),
                                                   In((1, 13, 16)), In((11,))], act,
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act in ("none", "relu", "clamp")
]


def _conv_into(m, buf, x, wp, b):
    """conv2d_into (what passes.cat_in_place makes: a conv written into its channels of
    an array made before) of a packed 1x1 conv, given a copy of ``buf`` (it overwrites
    it), vs torch's cat of ``buf``'s channels around the conv."""
    if m.__name__ == "torch":
        y = m.relu(m.nn.functional.conv2d(x, _unpacked_1x1(wp, x.shape[1], 11), b))
        return m.cat([buf[:, :2], y, buf[:, 13:]], 1)
    from dualgraph.ops.epilogue import CONV2D_INTO, CONV2D_PACKED, cat_member
    attrs = dict(act="relu", bounds=(float("-inf"), float("inf")), residual_at=None,
                 stride=(1, 1), padding=((0, 0), (0, 0)), dilation=(1, 1),
                 kernel_size=(1, 1), out_channels=11, groups=1)
    return apply(CONV2D_INTO, buf * 1, x, wp, b,
                 members=(cat_member(CONV2D_PACKED, 3, attrs),), at=2)


CASES.append(OpCase("conv2d_into", _conv_into, [In((2, 15, 5, 4)), In((2, 13, 5, 4)),
                                                In((1, 13, 16)), In((11,))],
                    dtypes=("float32", "float64"), grad=False, atol=1e-4))


def pool_values(**attrs):
    """max_pool2d_values (what passes.max_pool_values makes) vs torch's max pooling."""
    pool = dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1),
                ceil_mode=True)
    pool.update(attrs)

    def fn(m, x):
        if m.__name__ == "torch":
            return m.nn.functional.max_pool2d(x, **pool)
        from dualgraph.ops.epilogue import MAX_POOL2D_VALUES
        return apply(MAX_POOL2D_VALUES, x, **pool)
    return fn


CASES += [
    OpCase("max_pool2d_values", pool_values(), [D(2, 3, 9, 9)], "3x3-s2-ceil",
           dtypes=("float32", "float64"), grad=False),
    OpCase("max_pool2d_values", pool_values(kernel_size=(2, 2), padding=(0, 0),
                                            ceil_mode=False), [D(1, 2, 6, 8)], "2x2",
           grad=False),
]


def depthwise_nhwc(act, residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1))):
    """depthwise_nhwc (what passes.channels_last makes) on channels-last x and residual,
    its weight (kh, kw, cp), vs torch's depthwise conv between permutes, then the tail."""
    def fn(m, x, wt, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.layout import DEPTHWISE_NHWC
            return apply(DEPTHWISE_NHWC, x, wt, b, *residual, act=act,
                         bounds=(float("-inf"), float("inf")), residual_at=residual_at,
                         stride=stride, padding=padding, dilation=(1, 1))
        c = x.shape[3]
        w = wt[:, :, :c].permute(2, 0, 1).reshape(c, 1, *wt.shape[:2])
        (top, bottom), (left, right) = padding
        xp = m.nn.functional.pad(x.permute(0, 3, 1, 2), (left, right, top, bottom))
        y = m.nn.functional.conv2d(xp, w, b, stride=stride, groups=c)
        res = [r.permute(0, 3, 1, 2) for r in residual]
        return torch_tail(m, y, res, act, residual_at).permute(0, 2, 3, 1)
    return fn


CASES += [   # (13 channels: a partial block of five lanes; the weight's spare lanes unread)
    OpCase("depthwise_nhwc", depthwise_nhwc(act, at, stride),
           [In((2, 9, 11, 13)), In((3, 3, 16)), In((13,))]
           + ([In((2, 9, 11, 13))] if at else []), f"{act}-{at}-{stride[0]}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act, at, stride in [("relu", None, (2, 2)), ("silu", "before", (1, 1)),
                            ("none", "after", (1, 1))]
]


def pointwise_nhwc(act, residual_at=None):
    """pointwise_nhwc (what passes.channels_last makes) on channels-last x and residual,
    its weight (C, Cout), vs torch's 1x1 conv between permutes, then the tail."""
    def fn(m, x, wt, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.layout import POINTWISE_NHWC
            return apply(POINTWISE_NHWC, x, wt, b, *residual, act=act,
                         bounds=(float("-inf"), float("inf")), residual_at=residual_at)
        w = wt.t().reshape(*wt.shape[::-1], 1, 1)
        y = m.nn.functional.conv2d(x.permute(0, 3, 1, 2), w, b)
        res = [r.permute(0, 3, 1, 2) for r in residual]
        return torch_tail(m, y, res, act, residual_at).permute(0, 2, 3, 1)
    return fn


CASES += [
    OpCase("pointwise_nhwc", pointwise_nhwc(act, at),
           [In((2, 5, 7, 13)), In((13, 11)), In((11,))]
           + ([In((2, 5, 7, 11))] if at else []), f"{act}-{at}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act, at in [("relu", None), ("hardswish", "before"), ("none", "after")]
]


INF = float("inf")


def squeeze_excite(acts, bounds):
    """squeeze_excite (what passes.squeeze_excite makes) vs torch's mean, two 1x1 convs,
    their activations and the channel scale."""
    def fn(m, x, w1, b1, w2, b2):
        if m.__name__ != "torch":
            from dualgraph.ops.excite import SQUEEZE_EXCITE
            return apply(SQUEEZE_EXCITE, x, w1, b1, w2, b2, acts=acts, bounds=bounds)
        h = x.mean((2, 3), keepdim=True)
        for w, b, act in ((w1, b1, acts[0]), (w2, b2, acts[1])):
            h = torch_tail(m, m.nn.functional.conv2d(h, w, b), (), act, None)
        return x * h
    return fn


def blocked(x):
    """(N, C, H, W) as the channel-blocked (N, C/8, H, W, 8), in either library."""
    n, c, h, w = x.shape
    return x.reshape(n, c // 8, 8, h, w).permute(0, 1, 3, 4, 2)


def unblocked(x):
    n, cb, h, w, _ = x.shape
    return x.permute(0, 1, 4, 2, 3).reshape(n, cb * 8, h, w)


def block_op(name):
    """block_channels / unblock_channels (what passes.blocked_channels puts at a region's
    edges) vs the reshape and permute they stand for."""
    def fn(m, x):
        if m.__name__ != "torch":
            from dualgraph.ops import layout
            return apply(getattr(layout, name.upper()), x)
        return (blocked if name == "block_channels" else unblocked)(x)
    return fn


def depthwise_blocked(act, residual_at=None, stride=(1, 1), padding=((1, 1), (1, 1))):
    """depthwise_blocked (what passes.blocked_channels makes) on blocked x and residual,
    its weight conv2d's, vs torch's depthwise conv between the relayouts, then the tail."""
    def fn(m, x, w, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.layout import DEPTHWISE_BLOCKED
            return apply(DEPTHWISE_BLOCKED, x, w, b, *residual, act=act,
                         bounds=(float("-inf"), float("inf")), residual_at=residual_at,
                         stride=stride, padding=padding, dilation=(1, 1))
        (top, bottom), (left, right) = padding
        xp = m.nn.functional.pad(unblocked(x), (left, right, top, bottom))
        y = m.nn.functional.conv2d(xp, w, b, stride=stride, groups=w.shape[0])
        return blocked(torch_tail(m, y, [unblocked(r) for r in residual], act, residual_at))
    return fn


def pointwise_blocked(act, residual_at=None):
    """pointwise_blocked on blocked x and residual, its weight packed (groups, C, 24)
    (the columns past Cout unread), vs torch's 1x1 conv between the relayouts."""
    def fn(m, x, wp, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.layout import POINTWISE_BLOCKED
            return apply(POINTWISE_BLOCKED, x, wp, b, *residual, act=act,
                         bounds=(float("-inf"), float("inf")), residual_at=residual_at)
        cout, c = b.shape[0], wp.shape[1]
        w = wp.permute(0, 2, 1).reshape(-1, c)[:cout].reshape(cout, c, 1, 1)
        y = m.nn.functional.conv2d(unblocked(x), w, b)
        return blocked(torch_tail(m, y, [unblocked(r) for r in residual], act, residual_at))
    return fn


CASES += [
    OpCase("squeeze_excite", squeeze_excite(acts, ((-INF, INF), (0.0, 6.0))),
           [In((n, 7, 5, 3)), In((3, 7, 1, 1)), In((3,)), In((7, 3, 1, 1)), In((7,))],
           f"{'-'.join(acts)}-batch{n}", dtypes=("float32", "float64"), grad=False,
           atol=1e-5)
    for acts, n in [(("relu", "hardsigmoid"), 1), (("silu", "sigmoid"), 3),
                    (("hardswish", "clamp"), 2)]
]
def squeeze_excite_blocked(acts, bounds):
    """squeeze_excite_blocked (what passes.blocked_channels makes of a squeeze_excite in a
    region) on blocked x vs torch's between the relayouts."""
    def fn(m, x, *weights):
        if m.__name__ != "torch":
            from dualgraph.ops.layout import SQUEEZE_EXCITE_BLOCKED
            return apply(SQUEEZE_EXCITE_BLOCKED, x, *weights, acts=acts, bounds=bounds)
        return blocked(squeeze_excite(acts, bounds)(m, unblocked(x), *weights))
    return fn


CASES += [
    OpCase("squeeze_excite_blocked", squeeze_excite_blocked(acts, ((-INF, INF), (0.0, 6.0))),
           [In((n, cb, 5, 3, 8)), In((3, cb * 8, 1, 1)), In((3,)), In((cb * 8, 3, 1, 1)),
            In((cb * 8,))], f"{'-'.join(acts)}-batch{n}-blocks{cb}",
           dtypes=("float32", "float64"), grad=False, atol=1e-5)
    for acts, n, cb in [(("relu", "hardsigmoid"), 1, 1), (("silu", "sigmoid"), 3, 2),
                        (("hardswish", "clamp"), 2, 3)]
]


def gated_pointwise_blocked(gate_acts, act, residual_at=None):
    """gated_pointwise_blocked (pointwise_blocked of squeeze_excite_blocked's output, each
    image's gate in its copy of the weights) vs torch's squeeze-and-excitation and 1x1
    conv between the relayouts."""
    gate_bounds, bounds = ((-INF, INF), (0.0, 6.0)), (float("-inf"), float("inf"))

    def fn(m, x, w1, b1, w2, b2, wp, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.layout import GATED_POINTWISE_BLOCKED
            return apply(GATED_POINTWISE_BLOCKED, x, w1, b1, w2, b2, wp, b, *residual,
                         gate_acts=gate_acts, gate_bounds=gate_bounds, act=act,
                         bounds=bounds, residual_at=residual_at)
        y = squeeze_excite_blocked(gate_acts, gate_bounds)(m, x, w1, b1, w2, b2)
        return pointwise_blocked(act, residual_at)(m, y, wp, b, *residual)
    return fn


CASES += [
    OpCase("gated_pointwise_blocked", gated_pointwise_blocked(gate_acts, act, at),
           [In((n, 2, *hw, 8)), In((3, 16, 1, 1)), In((3,)), In((16, 3, 1, 1)), In((16,)),
            In((2, 16, 24)), In((cout,))] + ([In((n, cout // 8, *hw, 8))] if at else []),
           f"{'-'.join(gate_acts)}-{act}-{at}-batch{n}-{cout}-{hw[0]}x{hw[1]}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for gate_acts, act, at, n, cout, hw in [
        (("relu", "clamp"), "none", None, 1, 40, (5, 7)),
        (("hardswish", "clamp"), "hardswish", "before", 3, 24, (13, 11)),
        (("silu", "sigmoid"), "none", "after", 2, 8, (1, 1)),
        (("relu", "hardsigmoid"), "relu", None, 2, 16, (3, 2))]
]
CASES += [
    OpCase("block_channels", block_op("block_channels"), [In((2, 16, 5, 3))], "",
           dtypes=("float32", "float64"), grad=False),
    OpCase("block_channels", block_op("block_channels"), [In((1, 24, 13, 17))], "big",
           dtypes=("float32",), grad=False),
    OpCase("unblock_channels", block_op("unblock_channels"), [In((2, 3, 4, 5, 8))], "",
           dtypes=("float32", "float64"), grad=False),
    OpCase("unblock_channels", block_op("unblock_channels"), [In((1, 3, 13, 17, 8))], "big",
           dtypes=("float32",), grad=False),
]
CASES += [
    OpCase("depthwise_blocked", depthwise_blocked(act, at, stride),
           [In((2, 2, 9, 11, 8)), In((16, 1, 3, 3)), In((16,))]
           + ([In((2, 2, 9, 11, 8) if stride == (1, 1) else (2, 2, 5, 6, 8))] if at else []),
           f"{act}-{at}-{stride[0]}", dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act, at, stride in [("relu", None, (2, 2)), ("silu", "before", (1, 1)),
                            ("none", "after", (1, 1)), ("hardswish", "before", (2, 2))]
]
def shallow_blocked(act, residual_at=None, stride=(2, 2), padding=((1, 1), (1, 1))):
    """shallow_blocked (what passes.blocked_channels makes of a first layer whose output a
    region reads) on NCHW x, a blocked residual, vs torch's conv, then the tail, blocked."""
    def fn(m, x, w, b, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.layout import SHALLOW_BLOCKED
            return apply(SHALLOW_BLOCKED, x, w, b, *residual, act=act,
                         bounds=(float("-inf"), float("inf")), residual_at=residual_at,
                         stride=stride, padding=padding, dilation=(1, 1))
        (top, bottom), (left, right) = padding
        xp = m.nn.functional.pad(x, (left, right, top, bottom))
        y = m.nn.functional.conv2d(xp, w, b, stride=stride)
        return blocked(torch_tail(m, y, [unblocked(r) for r in residual], act, residual_at))
    return fn


CASES += [
    OpCase("shallow_blocked", shallow_blocked(act, at, stride, padding),
           [In((n, 3, 40, 37)), In((16, 3, k, k)), In((16,))]
           + ([In((n, 2, *hw, 8))] if at else []),
           f"{act}-{at}-{k}x{k}-{stride[0]}-batch{n}", dtypes=("float32", "float64"),
           grad=False, atol=1e-4)
    for act, at, k, stride, padding, n, hw in [
        ("relu", None, 3, (2, 2), ((1, 1), (1, 1)), 2, (20, 19)),
        ("silu", "before", 3, (1, 1), ((0, 2), (1, 0)), 1, (40, 36)),
        ("hardswish", "after", 7, (2, 2), ((3, 3), (3, 3)), 1, (20, 19))]
]


def expand_depthwise_blocked(expand_act, act, residual_at=None, stride=(1, 1)):
    """expand_depthwise_blocked (what passes.expand_into_depthwise makes) vs torch's 1x1
    conv, then depthwise conv, between the relayouts (the two ops' torch forms)."""
    whole = (float("-inf"), float("inf"))

    def fn(m, x, wp, b, w, db, *residual):
        if m.__name__ != "torch":
            from dualgraph.ops.layout import EXPAND_DEPTHWISE_BLOCKED
            return apply(EXPAND_DEPTHWISE_BLOCKED, x, wp, b, w, db, *residual,
                         expand_act=expand_act, expand_bounds=whole, act=act, bounds=whole,
                         residual_at=residual_at, stride=stride, padding=((1, 1), (1, 1)),
                         dilation=(1, 1))
        y = pointwise_blocked(expand_act)(m, x, wp, b)
        return depthwise_blocked(act, residual_at, stride)(m, y, w, db, *residual)
    return fn


CASES += [
    OpCase("expand_depthwise_blocked", expand_depthwise_blocked(up, act, at, stride),
           [In((2, 2, 9, 11, 8)), In((1, 16, 24)), In((24,)), In((24, 1, 3, 3)), In((24,))]
           + ([In((2, 3, 9, 11, 8) if stride == (1, 1) else (2, 3, 5, 6, 8))] if at else []),
           f"{up}-{act}-{at}-{stride[0]}", dtypes=("float32", "float64"), grad=False,
           atol=1e-4)
    for up, act, at, stride in [("relu", "relu", None, (1, 1)),
                                ("hardswish", "none", "after", (2, 2)),
                                ("silu", "silu", "before", (1, 1))]
]
CASES += [
    OpCase("pointwise_blocked", pointwise_blocked(act, at),
           [In((2, 2, 5, 7, 8)), In((2, 16, 24)), In((cout,))]
           + ([In((2, cout // 8, 5, 7, 8))] if at else []), f"{act}-{at}-{cout}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act, at, cout in [("relu", None, 40), ("hardswish", "before", 24),
                          ("none", "after", 8), ("silu", None, 16)]
]
