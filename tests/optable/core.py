"""Rows for the core ops written with the foundation (the families extend their own files)."""
import numpy as np

from . import In, OpCase

F, P = In, lambda *s: In(s, "pos")

CASES = [
    OpCase("add", lambda m, a, b: m.add(a, b), [In((3, 4)), In((4,))], "broadcast",
           dtypes=("float32", "float64", "float16", "bfloat16")),
    OpCase("add", lambda m, a: a + 2.5, [In((3, 4))], "scalar"),
    OpCase("add", lambda m, a, b: a + b, [In((2, 3), "int"), In((3,), "int", dtype="int32")],
           "int", grad=False),
    OpCase("sub", lambda m, a, b: a - b, [In((2, 1, 3)), In((4, 1))], "broadcast"),
    OpCase("sub", lambda m, a: 1.5 - a, [In((3,))], "rsub"),
    OpCase("mul", lambda m, a, b: a * b, [In((3, 4)), In((3, 1))], "broadcast",
           dtypes=("float32", "float64", "float16", "bfloat16")),
    OpCase("mul", lambda m, a: 0.5 * a, [In((5,))], "scalar"),
    OpCase("div", lambda m, a, b: a / b, [In((3, 4)), In((4,), "pos")], "broadcast"),
    OpCase("div", lambda m, a, b: a / b, [In((3,), "int"), In((3,), "int", 1, 4)], "int",
           grad=False),
    OpCase("pow", lambda m, a, b: m.pow(a, b), [In((3, 4), "pos"), In((4,))], "tensor"),
    OpCase("pow", lambda m, a: a ** 2, [In((3, 4))], "square"),
    OpCase("pow", lambda m, a: 2.0 ** a, [In((3,))], "rpow"),
    OpCase("neg", lambda m, a: -a, [In((2, 3))]),
    OpCase("exp", lambda m, a: m.exp(a), [In((2, 3))], dtypes=("float32", "float16")),
    OpCase("exp", lambda m, a: m.exp(a), [In((4,), "int")], "int", grad=False),
    OpCase("log", lambda m, a: m.log(a), [In((2, 3), "pos")]),
    OpCase("sin", lambda m, a: m.sin(a), [In((2, 3))], dtypes=("float32", "bfloat16")),
    OpCase("cos", lambda m, a: m.cos(a), [In((2, 3))]),
    OpCase("tanh", lambda m, a: m.tanh(a), [In((2, 3))]),
    OpCase("eq", lambda m, a, b: a == b, [In((3, 4), "int"), In((4,), "int")], grad=False),
    OpCase("ne", lambda m, a, b: a != b, [In((3, 4), "int"), In((4,), "int")], grad=False),
    OpCase("lt", lambda m, a, b: a < b, [In((3, 4)), In((4,))], grad=False),
    OpCase("le", lambda m, a: a <= 0.5, [In((3, 4))], grad=False),
    OpCase("gt", lambda m, a, b: m.gt(a, b), [In((3, 4)), In((3, 4))], grad=False),
    OpCase("ge", lambda m, a, b: a >= b, [In((3,), "int"), In((3,), "int")], grad=False),
    OpCase("where", lambda m, c, a, b: m.where(c, a, b),
           [In((3, 4), "bool"), In((3, 4)), In((4,))]),
    OpCase("where", lambda m, c, a: m.where(c, a, 0.0), [In((3, 4), "bool"), In((3, 4))],
           "scalar"),
    OpCase("cast", lambda m, a: a.to(m.float64) * 2, [In((3,))], "up"),
    OpCase("bitcast", lambda m, a: a.view(m.int32), [In((3, 4), dtype="float32")],
           grad=False),
    OpCase("bitcast", lambda m, a: a.view(m.float16).float(), [In((2, 3), dtype="float32")],
           "smaller", grad=False),
    OpCase("bitcast", lambda m, a: a.view(m.float64), [In((2, 4), "int", -9, 9)], "larger",
           grad=False),
    OpCase("cast", lambda m, a: a.double().float(), [In((3,))], "roundtrip", gradcheck=False),
    OpCase("cast", lambda m, a: a.long(), [In((3,))], "to-int", grad=False),
    OpCase("sum", lambda m, a: m.sum(a), [In((3, 4))], "all",
           dtypes=("float32", "float64", "float16")),
    OpCase("sum", lambda m, a: a.sum(1, keepdim=True), [In((3, 4, 2))], "keepdim"),
    OpCase("sum", lambda m, a: a.sum((0, -1)), [In((3, 4, 2))], "dims"),
    OpCase("sum", lambda m, a: a.sum(0), [In((3, 4), "int")], "int", grad=False),
    OpCase("reshape", lambda m, a: a.reshape(4, -1), [In((2, 3, 4))]),
    OpCase("reshape", lambda m, a: a.view(-1), [In((2, 3))], "view"),
    OpCase("expand", lambda m, a: a.expand(3, 2, 4), [In((2, 1))]),
    OpCase("permute", lambda m, a: a.permute(2, 0, 1), [In((2, 3, 4))]),
    OpCase("full_like", lambda m, a: m.zeros_like(a) + m.ones_like(a) * a, [In((2, 3))]),
    OpCase("clone", lambda m, a: a.clone() * 2, [In((2, 3))]),
]

# `random` (what dg.rand/randn become while tracing) is compared by its properties.
def _uniform(m, shape):
    if m.__name__ == "torch":
        return m.rand(shape)
    return m.ops.random.draw(m.ops.random.RANDOM, shape=shape, dtype=np.dtype("float32"),
                             dist="uniform")


def _uniform_checks(m, a):
    """Fraction of samples in [0, 1), and whether two draws differ: 1.0 and True in both
    libraries (the values themselves differ, so they are not compared)."""
    u, v = _uniform(m, tuple(a.shape)), _uniform(m, tuple(a.shape))
    in_range = ((u >= 0) & (u < 1)).float().mean()
    return in_range, (u != v).any()


CASES.append(OpCase("random", _uniform_checks, [In((3, 4))], grad=False))


def _integers_checks(m, a):
    """``randint``'s node: the fraction in [-2, 5) and whether two draws differ."""
    def draw():
        if m.__name__ == "torch":
            return m.randint(-2, 5, tuple(a.shape))
        return m.ops.random.draw(m.ops.random.RANDOM_INTEGERS, shape=tuple(a.shape), low=-2,
                                 high=5, dtype=np.dtype("int64"))
    u, v = draw(), draw()
    return ((u >= -2) & (u < 5)).float().mean(), (u != v).any()


def _permutation_checks(m, a):
    """``randperm``'s node: a permutation of range(n) (its sum and its squares' sum), and
    whether two draws differ."""
    n = a.shape[0]
    def draw():
        if m.__name__ == "torch":
            return m.randperm(n)
        return m.ops.random.draw(m.ops.random.RANDOM_PERMUTATION, n=n,
                                 dtype=np.dtype("int64"))
    u, v = draw(), draw()
    return u.sum(), (u * u).sum(), (u != v).any()


CASES.append(OpCase("random_integers", _integers_checks, [In((40, 5))], grad=False))
CASES.append(OpCase("random_permutation", _permutation_checks, [In((30,))], grad=False))


def _dropout_checks(m, a):
    """``F.dropout``'s op (p = 0.25), by its properties, the masks being random in both
    libraries: the fraction of outputs that are 0 or ``a / 0.75`` (1.0), the sum of the
    kept ones over ``a / 0.75``'s at the same places, and whether two draws differ."""
    y, z = m.nn.functional.dropout(a, 0.25), m.nn.functional.dropout(a, 0.25)
    kept = y != 0
    scaled = a / 0.75
    exact = ((y == 0) | ((y - scaled).abs() <= 1e-6 * scaled.abs())).float().mean()
    return exact, (y * kept).sum() / (scaled * kept).sum(), (kept != (z != 0)).any()


CASES.append(OpCase("dropout", _dropout_checks, [In((16, 32), "pos")], grad=False))


def _parametric_checks(draw, mean, counts=True):
    """A parametric draw's node (``poisson``, ``binomial``, ``dg.distributions``' gamma
    draws): whether 400 draws per element are all in the support (counts, or positive
    reals), their mean within 5 standard errors of ``mean(*params)`` (the variance is at
    most the mean for these three), and whether two draws differ."""
    def checks(m, *params):
        params = [p.expand(400, *p.shape) for p in params]
        u, v = draw(m, *params), draw(m, *params)
        want = mean(*params)[0]
        close = ((u.mean(0) - want).abs() < 5 * (want / 400) ** 0.5 + 1e-3).all()
        support = (u >= 0) & (u == u.round()) if counts else u > 0
        return support.all(), close, (u != v).any()
    return checks


def _standard_gamma(m, c):
    if m.__name__ == "torch":
        return m._standard_gamma(c)
    return m.ops.random.draw(m.ops.random.RANDOM_GAMMA, params=(c,), shape=(),
                             dtype=np.dtype("float32"))


CASES.append(OpCase("random_gamma", _parametric_checks(_standard_gamma, lambda c: c, False),
                    [In((4, 5), "pos")], grad=False))
CASES.append(OpCase("random_poisson", _parametric_checks(lambda m, r: m.poisson(r),
                                                         lambda r: r),
                    [In((4, 5), "pos")], grad=False))
CASES.append(OpCase("random_binomial", _parametric_checks(lambda m, n, p: m.binomial(n, p),
                                                          lambda n, p: n * p),
    [In((4, 5), "int", 1, 20, dtype="float32"), In((4, 5), "custom", grad=False,
     fn=lambda rng, dt: rng.uniform(0.1, 0.9, (4, 5)).astype(dt))], grad=False))


# `full` is what dg.zeros/ones/full become while tracing a symbolic size (``x.shape[0]`` of a
# dynamic batch); the row makes the node with a static shape.
def _full(m, a):
    if m.__name__ == "torch":
        return m.full(tuple(a.shape), 0.5) * a
    from dualgraph.dispatch import apply
    return apply(m.ops.creation.FULL, shape=tuple(a.shape), fill_value=0.5,
                 dtype=a._data.dtype) * a


CASES.append(OpCase("full", _full, [In((2, 3))]))


# The fused LSTM step (hidden projection inside) and its fused backward (double backward
# goes through the latter); with and without the hidden bias.
def _lstm(m, xg, h, c, w, *b):
    if m.__name__ == "torch":
        gates = xg + h @ w.T + (b[0] if b else 0)
        i, f, g, o = gates.chunk(4, -1)
        c2 = m.sigmoid(f) * c + m.sigmoid(i) * m.tanh(g)
        return m.sigmoid(o) * m.tanh(c2), c2
    return m.ops.recurrent.lstm_cell(xg, h, c, w, *b)


def _lstm_grads(m, gh, *inputs):
    """First gradients (create_graph), so the row's own gradients are second derivatives."""
    with m.enable_grad():
        for t in inputs:
            if not t.requires_grad:
                t.requires_grad_()
        h, c2 = _lstm(m, *inputs)
        return m.autograd.grad((h * gh).sum() + (c2 * c2).sum(), inputs, create_graph=True)


LSTM_INPUTS = [In((3, 8)), In((3, 2)), In((3, 2)), In((8, 2))]
CASES += [
    OpCase("lstm_cell", _lstm, LSTM_INPUTS + [In((8,))], "bias", dtypes=("float32", "float64")),
    OpCase("lstm_cell", _lstm, LSTM_INPUTS, "no-bias"),
    OpCase("lstm_cell", _lstm, [In((5, 8)), In((5, 2)), In((5, 2)), In((8, 2))], "batch5"),
    OpCase("lstm_cell_backward", _lstm_grads, [In((2, 2), grad=False), In((2, 8)),
                                               In((2, 2)), In((2, 2)), In((8, 2)), In((8,))]),
    OpCase("lstm_cell_backward", _lstm_grads, [In((2, 2), grad=False), In((2, 8)),
                                               In((2, 2)), In((2, 2)), In((8, 2))], "no-bias"),
]


# A whole LSTM layer's direction as one op (and its backward), against the same steps in torch.
def _lstm_layer(m, xg, h, c, w, *b, reverse=False):
    if m.__name__ == "torch":
        ys = [None] * xg.shape[0]
        for t in (reversed(range(xg.shape[0])) if reverse else range(xg.shape[0])):
            h, c = _lstm(m, xg[t], h, c, w, *b)
            ys[t] = h
        return m.stack(ys, 0), h, c
    return m.ops.recurrent_layer.lstm_layer(xg, h, c, w, *b, reverse=reverse)


def _lstm_layer_grads(m, gy, *inputs, reverse=False):
    """First gradients (create_graph), so the row's own gradients are second derivatives."""
    with m.enable_grad():
        for t in inputs:
            if not t.requires_grad:
                t.requires_grad_()
        y, h, c = _lstm_layer(m, *inputs, reverse=reverse)
        return m.autograd.grad((y * gy).sum() + (c * c).sum() + h.sum(), inputs,
                               create_graph=True)


LAYER_INPUTS = [In((4, 3, 8)), In((3, 2)), In((3, 2)), In((8, 2))]
CASES += [
    OpCase("lstm_layer", _lstm_layer, LAYER_INPUTS + [In((8,))], "bias",
           dtypes=("float32", "float64")),
    OpCase("lstm_layer", lambda m, *a: _lstm_layer(m, *a, reverse=True), LAYER_INPUTS,
           "reverse-no-bias"),
    OpCase("lstm_layer_backward", _lstm_layer_grads,
           [In((3, 2, 2), grad=False), In((3, 2, 8)), In((2, 2)), In((2, 2)), In((8, 2)),
            In((8,))]),
    OpCase("lstm_layer_backward", lambda m, *a: _lstm_layer_grads(m, *a, reverse=True),
           [In((3, 2, 2), grad=False), In((3, 2, 8)), In((2, 2)), In((2, 2)), In((8, 2))],
           "reverse-no-bias"),
]


# The fused GRU step and its fused backward, as the LSTM's.
def _gru(m, xg, h, w, *b):
    if m.__name__ == "torch":
        x_r, x_z, x_n = xg.chunk(3, -1)
        h_r, h_z, h_n = (h @ w.T + (b[0] if b else 0)).chunk(3, -1)
        r, z = m.sigmoid(x_r + h_r), m.sigmoid(x_z + h_z)
        n = m.tanh(x_n + r * h_n)
        return (1 - z) * n + z * h
    return m.ops.recurrent.gru_cell(xg, h, w, *b)


def _gru_grads(m, gh, *inputs):
    """First gradients (create_graph), so the row's own gradients are second derivatives."""
    with m.enable_grad():
        for t in inputs:
            if not t.requires_grad:
                t.requires_grad_()
        h = _gru(m, *inputs)
        return m.autograd.grad((h * gh).sum() + (h * h).sum(), inputs, create_graph=True)


GRU_INPUTS = [In((3, 6)), In((3, 2)), In((6, 2))]
CASES += [
    OpCase("gru_cell", _gru, GRU_INPUTS + [In((6,))], "bias", dtypes=("float32", "float64")),
    OpCase("gru_cell", _gru, GRU_INPUTS, "no-bias"),
    OpCase("gru_cell", _gru, [In((5, 6)), In((5, 2)), In((6, 2))], "batch5"),
    OpCase("gru_cell_backward", _gru_grads, [In((2, 2), grad=False), In((2, 6)), In((2, 2)),
                                             In((6, 2)), In((6,))]),
    OpCase("gru_cell_backward", _gru_grads, [In((2, 2), grad=False), In((2, 6)), In((2, 2)),
                                             In((6, 2))], "no-bias"),
]


# Whole GRU and Elman layers' directions as one op (and their backwards), against the same
# steps in torch.
def _elman(m, xg, h, w, *b, nonlinearity="tanh"):
    """An Elman step in torch (dualgraph's side is the layer op alone)."""
    pre = xg + h @ w.T + (b[0] if b else 0)
    return m.tanh(pre) if nonlinearity == "tanh" else m.relu(pre)


def _gru_layer(m, xg, h, w, *b, reverse=False):
    if m.__name__ != "torch":
        return m.ops.recurrent_gru_elman.gru_layer(xg, h, w, *b, reverse=reverse)
    ys = [None] * xg.shape[0]
    for t in (reversed(range(xg.shape[0])) if reverse else range(xg.shape[0])):
        h = ys[t] = _gru(m, xg[t], h, w, *b)
    return m.stack(ys, 0), h


def _rnn_layer(m, xg, h, w, *b, nonlinearity="tanh", reverse=False):
    if m.__name__ != "torch":
        return m.ops.recurrent_gru_elman.rnn_layer(xg, h, w, *b, nonlinearity=nonlinearity,
                                                   reverse=reverse)
    ys = [None] * xg.shape[0]
    for t in (reversed(range(xg.shape[0])) if reverse else range(xg.shape[0])):
        h = ys[t] = _elman(m, xg[t], h, w, *b, nonlinearity=nonlinearity)
    return m.stack(ys, 0), h


def _layer_grads(layer):
    """First gradients (create_graph) of a layer row's loss, so the row's own gradients
    are second derivatives."""
    def grads(m, gy, *inputs, **kwargs):
        with m.enable_grad():
            for t in inputs:
                if not t.requires_grad:
                    t.requires_grad_()
            y, h = layer(m, *inputs, **kwargs)
            return m.autograd.grad((y * gy).sum() + (h * h).sum(), inputs, create_graph=True)
    return grads


def _away_from_zero(rng, dtype):
    """Values of either sign at least 0.5 from zero."""
    return (rng.choice([-1, 1], (4, 3, 2)) * rng.uniform(0.5, 1.5, (4, 3, 2))).astype(dtype)


def _small(shape):
    return In(shape, "custom", fn=lambda rng, dt: rng.uniform(-0.05, 0.05, shape).astype(dt))


def _relu_inputs():
    """Elman relu rows: every pre-activation at least 0.3 from relu's kink (where finite
    differences would straddle it), of either sign: the input projection's away from
    zero, the state's share under 0.2 by a small hidden weight."""
    return [In((4, 3, 2), "custom", fn=_away_from_zero), In((3, 2), "unit"), _small((2, 2))]


GRU_LAYER_INPUTS = [In((4, 3, 6)), In((3, 2)), In((6, 2))]
RNN_LAYER_INPUTS = [In((4, 3, 2)), In((3, 2)), In((2, 2))]
CASES += [
    OpCase("gru_layer", _gru_layer, GRU_LAYER_INPUTS + [In((6,))], "bias",
           dtypes=("float32", "float64")),
    OpCase("gru_layer", lambda m, *a: _gru_layer(m, *a, reverse=True), GRU_LAYER_INPUTS,
           "reverse-no-bias"),
    OpCase("gru_layer_backward", _layer_grads(_gru_layer),
           [In((3, 2, 2), grad=False), In((3, 2, 6)), In((2, 2)), In((6, 2)), In((6,))]),
    OpCase("gru_layer_backward", lambda m, *a: _layer_grads(_gru_layer)(m, *a, reverse=True),
           [In((3, 2, 2), grad=False), In((3, 2, 6)), In((2, 2)), In((6, 2))],
           "reverse-no-bias"),
    OpCase("rnn_layer", _rnn_layer, RNN_LAYER_INPUTS + [In((2,))], "tanh-bias",
           dtypes=("float32", "float64")),
    OpCase("rnn_layer", lambda m, *a: _rnn_layer(m, *a, nonlinearity="relu", reverse=True),
           _relu_inputs(), "relu-reverse-no-bias"),
    OpCase("rnn_layer_backward", _layer_grads(_rnn_layer),
           [In((3, 2, 2), grad=False), In((3, 2, 2)), In((2, 2)), In((2, 2)), In((2,))],
           "tanh"),
    OpCase("rnn_layer_backward",
           lambda m, *a: _layer_grads(_rnn_layer)(m, *a, nonlinearity="relu", reverse=True),
           [In((4, 3, 2), grad=False)] + _relu_inputs(), "relu-reverse-no-bias"),
]


# A whole recurrent layer in ONNX's layout (what nn.LSTM/GRU/RNN become while exporting to
# ONNX); torch's side is ONNX's definition written step by step.
def _sequence(mode):
    def fn(m, x, w, r, b, *states):
        if m.__name__ != "torch":
            return m.ops.recurrent.rnn_sequence(x, w, r, b, *states, mode=mode)
        directions, gh, hidden = r.shape
        if not states:
            states = (m.zeros(directions, x.shape[1], hidden),) * (2 if mode == "LSTM" else 1)
        ys, hs, cs = [], [], []
        for d in range(directions):
            h, c = states[0][d], states[-1][d]
            out = [None] * x.shape[0]
            for t in (range(x.shape[0] - 1, -1, -1) if d else range(x.shape[0])):
                xg, hg = x[t] @ w[d].T + b[d, :gh], h @ r[d].T + b[d, gh:]
                if mode == "LSTM":
                    i, o, f, g = (xg + hg).chunk(4, -1)
                    c = m.sigmoid(f) * c + m.sigmoid(i) * m.tanh(g)
                    h = m.sigmoid(o) * m.tanh(c)
                elif mode == "GRU":
                    (xz, xr, xn), (hz, hr, hn) = xg.chunk(3, -1), hg.chunk(3, -1)
                    z = m.sigmoid(xz + hz)
                    h = (1 - z) * m.tanh(xn + m.sigmoid(xr + hr) * hn) + z * h
                else:
                    h = m.relu(xg + hg)
                out[t] = h
            ys.append(m.stack(out, 0))
            hs.append(h)
            cs.append(c if mode == "LSTM" else h)
        return m.stack(ys, 1), m.stack(hs, 0), m.stack(cs, 0)
    return fn


CASES += [
    OpCase("rnn_sequence", _sequence("LSTM"), [In((3, 2, 3)), In((2, 8, 3)), In((2, 8, 2)),
                                                In((2, 16)), In((2, 2, 2)), In((2, 2, 2))],
           "lstm-bidirectional", grad=False),
    OpCase("rnn_sequence", _sequence("GRU"), [In((3, 2, 3)), In((1, 6, 3)), In((1, 6, 2)),
                                               In((1, 12))], "gru", grad=False),
    OpCase("rnn_sequence", _sequence("RNN_RELU"), [In((3, 2, 3)), In((1, 2, 3)),
                                                    In((1, 2, 2)), In((1, 4)), In((1, 2, 2))],
           "rnn-relu", grad=False),
]


# Fused layer norm and its backward (whose gradients are the second derivatives).
def _ln(m, x, w, b):
    return m.nn.functional.layer_norm(x, (4,), w, b)


def _ln_grads(m, x, w, v):
    """First derivatives of layer_norm (create_graph), also under no_grad."""
    with m.enable_grad():
        for t in (x, w):
            if not t.requires_grad:
                t.requires_grad_()
        y = m.nn.functional.layer_norm(x, (4,), w, None)
        return m.autograd.grad(y, [x, w], v, create_graph=True)


CASES += [
    OpCase("layer_norm", _ln, [In((3, 4)), In((4,)), In((4,))],
           dtypes=("float32", "float64", "float16", "bfloat16")),
    OpCase("layer_norm", lambda m, x: m.nn.functional.layer_norm(x, (2, 3)), [In((2, 2, 3))],
           "no-affine"),
    OpCase("layer_norm_backward", _ln_grads, [In((2, 4)), In((4,)), In((2, 4))]),
]


# Training-mode batch norm and its backward (whose gradients are the second derivatives).
def _bn(m, x, w, b):
    return m.nn.functional.batch_norm(x, None, None, w, b, training=True)


def _bn_grads(m, x, w, v):
    """First derivatives of training-mode batch_norm (create_graph), also under no_grad."""
    with m.enable_grad():
        for t in (x, w):
            if not t.requires_grad:
                t.requires_grad_()
        y = m.nn.functional.batch_norm(x, None, None, w, None, training=True)
        return m.autograd.grad(y, [x, w], v, create_graph=True)


CASES += [
    OpCase("batch_norm", _bn, [In((3, 2, 4)), In((2,)), In((2,))],
           dtypes=("float32", "float64", "float16", "bfloat16")),
    OpCase("batch_norm", lambda m, x: m.nn.functional.batch_norm(x, None, None, training=True),
           [In((4, 3))], "no-affine"),
    OpCase("batch_norm_backward", _bn_grads, [In((3, 2, 2)), In((2,)), In((3, 2, 2))]),
]
