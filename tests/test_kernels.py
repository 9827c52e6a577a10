"""The eager Numba loops (``dualgraph/kernels``) against PyTorch and against the NumPy
kernels they replace (erf, the exact and tanh GELUs, the LSTM step, softmax, LayerNorm,
row scatter-add, Adam, max pooling, relu's gradient, sin and cos, depthwise convolution;
forward and backward), on float32 inputs big
enough to take the Numba path (``kernels.MIN_ELEMENTS``; sin and cos take it at every
size), including the extremes (saturated tanh, infinities, NaN). The op table's small
inputs cover the NumPy path."""
import os
import threading

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph import kernels
from dualgraph.kernels.fastmath import gelu_tanh32, sigmoid32, tanh32
from dualgraph.kernels.simd import wide_loops
from dualgraph.kernels.threads import run_rows

pytestmark = pytest.mark.skipif(not kernels.numba_available(), reason="Numba is not installed")


def both_paths(fn, monkeypatch, expect=None):
    """``fn()`` with the Numba loops (checking that some ran, or the loop named ``expect``,
    or one of the loops a tuple names), then with the NumPy kernels."""
    calls = []
    entry = kernels.Loop.entry   # (every call of a loop asks for its entry, but for kept
    monkeypatch.setattr(kernels.Loop, "entry",   # ones: the sines' and the activations',
                        lambda self, *args: calls.append(self.__name__) or entry(self, *args))
    kept = [kernels.trig.sin, kernels.trig.cos]   # dropped here)
    kept += [v for v in vars(kernels.activations).values() if isinstance(v, kernels.Loop)]
    for loop in kept:
        monkeypatch.setattr(loop, "flat_entry", None)
    fast = fn()
    assert calls, "no Numba loop ran: the inputs are too small for the fast path"
    wanted = (expect,) if isinstance(expect, str) else expect
    assert wanted is None or any(name in calls for name in wanted), calls
    monkeypatch.undo()
    monkeypatch.setenv("DUALGRAPH_NUMBA", "0")
    slow = fn()
    monkeypatch.delenv("DUALGRAPH_NUMBA")
    return fast, slow


def gelu_inputs():
    x = np.random.default_rng(0).normal(0, 3, 8192).astype(np.float32)
    x[:8] = [0.0, -0.0, 30.0, -30.0, 1e-6, -1e-6, np.inf, -np.inf]
    return x


def test_gelu_tanh_forward_and_gradient_match_torch_and_numpy(monkeypatch):
    x, g = gelu_inputs(), np.random.default_rng(1).normal(size=8192).astype(np.float32)

    def run():
        xt = dg.tensor(x, requires_grad=True)
        y = dg.nn.functional.gelu(xt, approximate="tanh")
        y.backward(dg.tensor(g))
        return y.detach().numpy(), xt.grad.numpy()
    (y, dx), (y_np, dx_np) = both_paths(run, monkeypatch)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.gelu(xt, approximate="tanh")
    yt.backward(torch.tensor(g))
    finite = np.isfinite(x)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(y, y_np, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(dx[finite], xt.grad.numpy()[finite], rtol=1e-5, atol=2e-6)
    # (the NumPy kernel cancels in 1 - tanh^2 where tanh saturates; the loop does not)
    np.testing.assert_allclose(dx[finite], dx_np[finite], rtol=1e-5, atol=1e-5)
    assert y[6] == np.inf and y[3] == 0 and y[2] == 30 and np.isnan(y[7]) == np.isnan(y_np[7])


def test_gelu_tanh_propagates_nan():
    x = gelu_inputs()
    x[100] = np.nan
    assert np.isnan(dg.nn.functional.gelu(dg.tensor(x), approximate="tanh").numpy()[100])


@pytest.mark.parametrize("kind,batch,hidden", [("LSTM", 64, 32), ("LSTM", 37, 50),
                                               ("GRU", 16, 8), ("GRU", 37, 50)])
def test_recurrent_cell_matches_torch_and_numpy(monkeypatch, kind, batch, hidden):
    """An LSTM or GRU step forward and backward: its loops, NumPy's form and torch's."""
    rng = np.random.default_rng(2)
    states = 2 if kind == "LSTM" else 1
    x = rng.normal(size=(batch, 16)).astype(np.float32)
    s0, grads = ([rng.normal(size=(batch, hidden)).astype(np.float32) for _ in range(states)]
                 for _ in range(2))
    ref = getattr(torch.nn, kind + "Cell")(16, hidden)
    weights = {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()}

    def run(lib, tensor):
        cell = getattr(lib.nn, kind + "Cell")(16, hidden)
        cell.load_state_dict({k: lib.tensor(v) for k, v in weights.items()})
        xs, *ss = (tensor(a) for a in [x] + s0)
        outs = cell(xs, tuple(ss) if kind == "LSTM" else ss[0])
        outs = list(outs) if kind == "LSTM" else [outs]
        lib.autograd.backward(outs, [lib.tensor(g) for g in grads])
        return ([o.detach().numpy() for o in outs] + [t.grad.numpy() for t in [xs] + ss]
                + [p.grad.numpy() for p in cell.parameters()])

    fast, slow = both_paths(lambda: run(dg, lambda a: dg.tensor(a, requires_grad=True)),
                            monkeypatch, expect=kind.lower() + "_cell_backward")
    want = run(torch, lambda a: torch.tensor(a, requires_grad=True))
    for got, np_got, expected in zip(fast, slow, want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-6)
        np.testing.assert_allclose(got, np_got, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_rows_match_torch_and_numpy(monkeypatch, name):
    x = np.random.default_rng(3).normal(0, 4, (6, 10, 77)).astype(np.float32)
    x[0, 0, :10] = -np.inf           # masked entries
    x[0, 1, :] = -np.inf             # a fully masked row: NaN, as torch gives
    x[1, 1, 3] = 80.0                # one dominant entry
    x[1, 2, 40] = np.nan             # a NaN, and one leading its row: NaN rows, as torch's
    x[1, 3, 0] = np.nan              # (the row maximum skips NaNs; their exp does not)
    x[1, 4, 7] = np.inf              # an infinite entry: NaN too

    g = np.random.default_rng(4).normal(size=x.shape).astype(np.float32)

    def run(lib):
        xs = lib.tensor(x, requires_grad=True)
        y = getattr(lib.nn.functional, name)(xs, dim=-1)
        y.backward(lib.tensor(g))
        return y.detach().numpy(), xs.grad.numpy()
    fast, slow = both_paths(lambda: run(dg), monkeypatch)
    for got, np_got, want in zip(fast, slow, run(torch)):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
        np.testing.assert_allclose(got, np_got, rtol=2e-6, atol=2e-6)
    assert np.isnan(fast[0][0, 1]).all()
    assert np.isnan(fast[0][1, 2:5]).all() and not np.isnan(fast[0][1, 5:]).any()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_small_softmax_rows_of_large_values(monkeypatch, name):
    """The loops run at every size: a few rows of values near 1000, whose log-softmax keeps
    its small entries' low bits only when the maximum is subtracted before the log-sum."""
    x = (np.random.default_rng(5).normal(size=(3, 5)) * 10 + 1000).astype(np.float32)
    g = np.random.default_rng(6).normal(size=x.shape).astype(np.float32)

    def run(lib):
        xs = lib.tensor(x, requires_grad=True)
        y = getattr(lib.nn.functional, name)(xs, dim=1)
        y.backward(lib.tensor(g))
        return y.detach().numpy(), xs.grad.numpy()
    fast, slow = both_paths(lambda: run(dg), monkeypatch, expect=name)
    for got, np_got, want in zip(fast, slow, run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, np_got, rtol=1e-5, atol=1e-5)


def _row_loop_calls():
    """(name, call(x, out)) for each row loop that writes rows of ``out`` from rows of
    ``x`` and sums along them: softmax, log-softmax, the cross-entropy backward and the
    cross-entropy with its gradient (targets: a class per row, one row ignored)."""
    norm = kernels.normalization

    def targets(x):
        t = np.arange(len(x), dtype=np.int64) % x.shape[1]
        t[1] = -100
        return t

    def scale(x):
        return np.full(len(x), 0.25, np.float32)
    return [
        ("softmax", lambda x, o: run_rows(norm.softmax, len(x), x, o, threads=1)),
        ("log_softmax", lambda x, o: run_rows(norm.log_softmax, len(x), x, o, threads=1)),
        ("cross_entropy_backward", lambda x, o: run_rows(
            norm.cross_entropy_backward, len(x), x, targets(x), -100, scale(x), o, threads=1)),
        ("cross_entropy_with_grad", lambda x, o: run_rows(
            norm.cross_entropy_with_grad, len(x), x, targets(x), -100, scale(x),
            np.empty(len(x), np.float32), o, threads=1)),
    ]


@pytest.mark.parametrize("width", [4, 5, 7, 33, 100])   # (4 and 5: widths that differed)
def test_row_loops_give_the_same_bits_wherever_their_output_lies(width):
    """A row loop's bits do not depend on how close its output lies to its input. LLVM
    vectorises a loop that stores into one array while reading another behind a run-time
    check that they are far enough apart, and runs a scalar copy of the loop otherwise: a
    sum in that loop (reassociated: vector lanes) then rounds differently. Small arrays
    from malloc's bins often lie next to each other, how close depending on what was
    allocated and freed before (the garbage collector's timing): an eager data-parallel
    step's cross-entropy gradient changed bits from run to run so."""
    rng = np.random.default_rng(width)
    values = (rng.normal(size=(4, width)) * 3).astype(np.float32)
    n = values.size
    for name, call in _row_loop_calls():
        far = np.empty_like(values)
        call(values.copy(), far)
        for gap in list(range(0, 20)) + [-n - 16, -n - 8, -n]:   # (floats between the two)
            memory = np.zeros(4 * n + 200, np.float32)
            at = 2 * n + 64
            x = memory[at:at + n].reshape(values.shape)
            start = at + n + gap if gap >= 0 else at + gap
            out = memory[start:start + n].reshape(values.shape)
            x[...] = values
            call(x, out)
            np.testing.assert_array_equal(x, values)
            assert out.tobytes() == far.tobytes(), (name, gap)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_rows_match_torch_and_numpy(monkeypatch, reduction):
    logp = np.log(np.random.default_rng(7).dirichlet(np.ones(6), 9)).astype(np.float32)
    target = np.array([0, 5, -100, 2, 1, -100, 3, 3, 4])
    bad = np.array([0, 6, 1, 1, 1, 1, 1, 1, 1])

    def run(lib):
        x = lib.tensor(logp, requires_grad=True)
        loss = lib.nn.functional.nll_loss(x, lib.tensor(target), reduction=reduction)
        (loss.sum() * 3).backward()
        with pytest.raises(IndexError, match="out of bounds"):
            lib.nn.functional.nll_loss(x, lib.tensor(bad))
        return loss.detach().numpy(), x.grad.numpy()
    fast, slow = both_paths(lambda: run(dg), monkeypatch, expect="nll_backward")
    for got, np_got, want in zip(fast, slow, run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(got, np_got)


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_torch_and_numpy(monkeypatch, affine):
    rng = np.random.default_rng(4)
    x = (rng.normal(size=(40, 8, 16)) * 3 + 5).astype(np.float32)
    g = rng.normal(size=(40, 8, 16)).astype(np.float32)
    ref = torch.nn.LayerNorm((8, 16), elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.normal_()
            ref.bias.normal_()
    weights = {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()}

    def run(lib):
        ln = lib.nn.LayerNorm((8, 16), elementwise_affine=affine)
        ln.load_state_dict({k: lib.tensor(v) for k, v in weights.items()})
        xs = lib.tensor(x, requires_grad=True)
        y = ln(xs)
        y.backward(lib.tensor(g))
        return [y.detach().numpy(), xs.grad.numpy()] + [p.grad.numpy() for p in ln.parameters()]
    fast, slow = both_paths(lambda: run(dg), monkeypatch)
    for got, np_got, want in zip(fast, slow, run(torch)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(got, np_got, rtol=2e-5, atol=2e-5)


def test_scatter_add_rows_matches_torch_and_numpy(monkeypatch):
    """Embedding (repeated rows) and class-index loss gradients go through the loop."""
    rng = np.random.default_rng(5)
    weight = rng.normal(size=(100, 50)).astype(np.float32)
    ids = rng.integers(-100, 100, (30, 7))
    logits = rng.normal(size=(300, 20)).astype(np.float32)
    target = rng.integers(0, 20, 300)

    def run(lib):
        w, z = lib.tensor(weight, requires_grad=True), lib.tensor(logits, requires_grad=True)
        picked = w[lib.tensor(ids)]
        (picked * picked).sum().backward()
        lib.nn.functional.nll_loss(z, lib.tensor(target)).backward()
        return w.grad.numpy(), z.grad.numpy()
    fast, slow = both_paths(lambda: run(dg), monkeypatch)
    for got, np_got, want in zip(fast, slow, run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, np_got, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not kernels.numba_available(), reason="Numba is not installed")
def test_small_table_many_rows_scatter_in_the_loop(monkeypatch):
    """An LSTM's embedding: a 64 x 32 table (below the loops' size threshold) gets 1024
    rows added; the work is the rows', so they go through the loop too, negative ids
    wrapped, the same gradient as torch's."""
    rng = np.random.default_rng(7)
    weight = rng.normal(size=(64, 32)).astype(np.float32)
    ids = rng.integers(-64, 64, (32, 32))
    upstream = rng.normal(size=(32, 32, 32)).astype(np.float32)
    calls = []
    loop = kernels.scatter.add_rows
    monkeypatch.setattr(kernels.scatter, "add_rows", lambda *a: calls.append(1) or loop(*a))

    def run(lib):
        w = lib.tensor(weight, requires_grad=True)
        (w[lib.tensor(ids)] * lib.tensor(upstream)).sum().backward()
        return w.grad.numpy()
    got = run(dg)
    assert calls == [1]
    np.testing.assert_allclose(got, run(torch), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,kwargs", [("Adam", {}), ("AdamW", {"weight_decay": 0.1})])
def test_adam_loop_matches_torch_and_numpy(monkeypatch, name, kwargs):
    rng = np.random.default_rng(6)
    start = rng.normal(size=(80, 60)).astype(np.float32)
    grads = [rng.normal(size=(80, 60)).astype(np.float32) for _ in range(3)]

    def run(lib):
        p = lib.nn.Parameter(lib.tensor(start.copy()))
        opt = getattr(lib.optim, name)([p], lr=0.01, **kwargs)
        for g in grads:
            p.grad = lib.tensor(g)
            opt.step()
        return p.detach().numpy(), opt.state_dict()["state"][0]["exp_avg_sq"].numpy()
    fast, slow = both_paths(lambda: run(dg), monkeypatch)
    for got, np_got, want in zip(fast, slow, run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(got, np_got)


@pytest.mark.parametrize("update", ["adam", "sgd"])
def test_optimiser_loops_in_place_give_the_bits_of_the_loops_into_new_arrays(monkeypatch,
                                                                           update):
    """A compiled step's donated update (``out=`` the state itself) takes the in-place loop,
    which vectorises; its results equal the out-of-place loop's to the bit."""
    from dualgraph.optim import _ops
    rng = np.random.default_rng(7)
    p, g, m = (rng.normal(size=(80, 60)).astype(np.float32) for _ in range(3))
    v = np.abs(rng.normal(size=(80, 60))).astype(np.float32)
    if update == "adam":
        def run(out):
            return _ops._adam_kernel(state[0], g, *state[1:], 3.0, lr=0.01, beta1=0.9,
                                     beta2=0.999, eps=1e-8, decay=0.99, out=out)
        state = [p.copy(), m.copy(), v.copy()]
    else:
        def run(out):
            return _ops._sgd_kernel(state[0], g, state[1], lr=0.1, momentum=0.9,
                                    dampening=0.1, nesterov=True, out=out)
        state = [p.copy(), m.copy()]
    fresh = [a.copy() for a in run(None)]
    calls, run_loop = [], kernels.Loop.__call__
    monkeypatch.setattr(kernels.Loop, "__call__",
                        lambda self, *args: calls.append(self.__name__) or run_loop(self, *args))
    arrays = list(state)
    result = run(tuple(state))
    assert all(r is a for r, a in zip(result, arrays))
    assert calls == [("adam" if update == "adam" else "sgd_momentum") + "_in_place"]
    for got, want in zip(arrays, fresh):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kwargs,nan", [({"kernel_size": 2}, False), ({"kernel_size": 2}, True),
                                        ({"kernel_size": 3, "stride": 2, "padding": 1}, True),
                                        ({"kernel_size": (2, 3), "stride": 1}, False)])
def test_max_pool_matches_torch_and_numpy(monkeypatch, kwargs, nan):
    """The 2x2 loop (other windows, and inputs with NaN, take the NumPy kernel; the
    backward's scatter loop runs for all)."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(16, 4, 24, 27)).astype(np.float32)
    x[0, 0, 2, 2] = x[0, 0, 2, 3] = x[0, 0, 3, 2] = 5.0      # ties: the first maximum wins
    if nan:
        x[1, 1, 4, 4] = np.nan                              # NaN wins its windows
    g = rng.normal(size=tuple(torch.nn.functional.max_pool2d(torch.tensor(x),
                                                             **kwargs).shape)).astype(np.float32)

    def run(lib):
        xs = lib.tensor(x, requires_grad=True)
        y, where = lib.nn.functional.max_pool2d(xs, return_indices=True, **kwargs)
        y.backward(lib.tensor(g))
        return y.detach().numpy(), where.numpy(), xs.grad.numpy()
    fast, slow = both_paths(lambda: run(dg), monkeypatch)
    for got, np_got, want in zip(fast, slow, run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got, np_got, rtol=1e-6, atol=1e-6)


def test_relu_backward_matches_numpy(monkeypatch):
    x = np.random.default_rng(8).normal(size=(60, 80)).astype(np.float32)
    x[0, :3] = [0.0, -0.0, np.nan]
    g = np.random.default_rng(9).normal(size=x.shape).astype(np.float32)

    def run():
        xs = dg.tensor(x, requires_grad=True)
        dg.relu(xs).backward(dg.tensor(g))
        return xs.grad.numpy()
    fast, slow = both_paths(run, monkeypatch)
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(fast, np.where(x > 0, g, 0))


def test_relu_backward_in_place_writes_the_gradient_itself_only_where_it_may():
    """``relu_backward_in_place``: the op's bits in ``g`` itself; a read-only or strided
    ``g`` gets a new array and stays as it was."""
    from dualgraph.ops.elementwise import _relu_backward_kernel, relu_backward_in_place
    rng = np.random.default_rng(11)
    y = np.maximum(rng.normal(size=(64, 96)), 0).astype(np.float32)
    y[0, :2] = [np.nan, 0.0]
    g = rng.normal(size=y.shape).astype(np.float32)
    g[1, :3] = [np.nan, -0.0, 0.0]
    want = _relu_backward_kernel(g, y)
    np.testing.assert_array_equal(want, np.where(y > 0, g, np.float32(0)))
    read_only = g.copy()
    read_only.flags.writeable = False
    for kept in (read_only, np.asfortranarray(g)):
        before = kept.copy()
        got = relu_backward_in_place(kept, y)
        assert got is not kept and np.array_equal(kept, before, equal_nan=True)
        np.testing.assert_array_equal(got, want)
    own = g.copy()
    got = relu_backward_in_place(own, y)
    assert got is own
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("approximate,names", [("tanh", ("gelu_tanh32", "gelu_tanh_backward32")),
                                               ("none", ("gelu32", "gelu_backward32"))])
def test_compiled_gelu_equals_eager_to_the_bit(approximate, names):
    """A fused kernel calls the eager loop's scalar function: the same bits, forward and
    backward (the compiler's exact mode keeps NumPy's libm results elsewhere)."""
    x = np.random.default_rng(10).normal(0, 3, (64, 128)).astype(np.float32)

    def step(x):
        y = dg.nn.functional.gelu(x * 1.5 + 0.25, approximate=approximate)
        (g,) = dg.autograd.grad((y * y).sum(), x)
        return y, g, dg.erf(x) * 2 - 1
    compiled = dg.compile(step)
    for got, want in zip(compiled(dg.tensor(x, requires_grad=True)),
                         step(dg.tensor(x, requires_grad=True))):
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    kernel_code = compiled._last.executable.kernel_code()
    assert all(f"{name}(" in kernel_code for name in names + ("erf32",))


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float32 values lie between a and b (0 where equal; signed zeros equal)."""
    def ordered(v):
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


def erf_inputs():
    rng = np.random.default_rng(14)
    x = np.concatenate([rng.normal(0, 2, 60000), np.linspace(-4.5, 4.5, 40001),
                        rng.uniform(-1e-3, 1e-3, 2000),
                        [0.875, 2.375, 3.85, -3.85, 3.8499, 1e-30, -1e-40, 30.0]])
    x = x.astype(np.float32)
    x[:5] = [0.0, -0.0, np.inf, -np.inf, np.nan]
    return x


def test_erf_is_within_an_ulp_of_correctly_rounded_and_of_torch(monkeypatch):
    """float32 erf computes in float64 and rounds once: at most 1 ulp from the correctly
    rounded result (and from torch's, itself within 1 ulp), signed zeros and NaN kept, at
    every size (a fused kernel of a few elements calls ``erf32`` too)."""
    from math import erf
    x = erf_inputs()
    g = np.random.default_rng(15).normal(size=x.size).astype(np.float32)

    def run():
        xs = dg.tensor(x, requires_grad=True)
        y = dg.erf(xs)
        y.backward(dg.tensor(g))
        return y.detach().numpy(), xs.grad.numpy(), dg.erf(dg.tensor(x[:7])).numpy()
    (y, dx, few), (y_np, _, _) = both_paths(run, monkeypatch, expect="erf")
    want = np.array([erf(v) for v in x.astype(np.float64)]).astype(np.float32)
    known = ~np.isnan(x)
    assert _ulps(y[known], want[known]).max() <= 1
    assert np.isnan(y[4]) and np.signbit(y[1]) and y[2] == 1 and y[3] == -1
    np.testing.assert_array_equal(few, y[:7])
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.erf(xt)
    yt.backward(torch.tensor(g))
    assert _ulps(y[known], yt.detach().numpy()[known]).max() <= 1
    assert _ulps(y_np[known], y[known]).max() <= 4   # (Cody's NumPy kernel, in float32)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=2e-6, atol=1e-7)


def test_gelu_forward_and_gradient_match_torch_and_numpy(monkeypatch):
    """The exact (erf) GELU, ``nn.GELU()``'s default: one float32 loop each way."""
    x, g = gelu_inputs(), np.random.default_rng(1).normal(size=8192).astype(np.float32)

    def run():
        xt = dg.tensor(x, requires_grad=True)
        y = dg.nn.GELU()(xt)
        y.backward(dg.tensor(g))
        return y.detach().numpy(), xt.grad.numpy()
    (y, dx), (y_np, dx_np) = both_paths(run, monkeypatch, expect="gelu_backward")
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.GELU()(xt)
    yt.backward(torch.tensor(g))
    finite = np.isfinite(x)
    # (torch's float32 1 + erf cancels where x is very negative; the loop sums in float64)
    np.testing.assert_allclose(y[finite], yt.detach().numpy()[finite], rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(y[finite], y_np[finite], rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(dx[finite], xt.grad.numpy()[finite], rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(dx[finite], dx_np[finite], rtol=1e-5, atol=2e-6)
    assert y[6] == np.inf and y[3] == 0 and y[2] == 30 and np.isnan(y[7]) == np.isnan(y_np[7])
    x[100] = np.nan
    assert np.isnan(dg.nn.functional.gelu(dg.tensor(x)).numpy()[100])


def test_exact_gelu_and_its_gradient_against_float64_over_the_float32_range():
    """The float32 exact GELU loop (``fastmath.gelu32``) within 7 ulps of the float64
    value wherever that is a normal float32, down to ``x = -13.2``, where
    ``exp(-x^2 / 2)`` leaves the normal float32s (0 beyond: the result is below 2**-126);
    its gradient within 4 ulps plus the rounding of ``Phi + x phi`` (which cancels near
    x = -0.75), 0 beyond x = -13.2 too. A strided sweep of the float32 bit patterns up to |x| = 16, and +-0,
    +-inf, NaN, subnormals and both sides of the end of the range."""
    from math import erfc, exp, pi, sqrt
    from dualgraph.ops import elementwise as ew
    pos = np.arange(0, 0x41800000, 4099, dtype=np.int64).astype(np.int32).view(np.float32)
    x = np.concatenate([pos, -pos, np.linspace(-13.5, -12.9, 2001, dtype=np.float32),
                        np.float32([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 3e-39,
                                    -3e-39, 100.0, -100.0, np.nan])])
    x64 = np.where(np.isfinite(x), x, 0).astype(np.float64)   # (the non-finite: below)
    cdf = np.array([0.5 * erfc(-v / sqrt(2)) for v in x64])
    pdf = np.array([exp(-v * v / 2) / sqrt(2 * pi) for v in x64])
    y = ew.GELU.kernel(x)
    dy = ew.GELU_BACKWARD.kernel(np.ones_like(x), x)
    finite = np.isfinite(x)
    want = x64 * cdf
    tiny = finite & (np.abs(want) < 2.0 ** -126)
    normal = finite & ~tiny
    spacing = np.spacing(np.abs(want[normal]).astype(np.float32)).astype(np.float64)
    assert (np.abs(y[normal] - want[normal]) / spacing).max() <= 7
    assert np.abs(y[tiny] - want[tiny]).max() <= 2.0 ** -126
    dwant = cdf + x64 * pdf
    bound = (4 * np.spacing(np.abs(dwant[finite]).astype(np.float32))
             + 4 * 2.0 ** -24 * (cdf[finite] + np.abs(x64 * pdf)[finite]))
    # (beyond |x| = 13.2 the density's exp(-x^2 / 2) is 0, x phi below 14 * 2**-126)
    bound[np.abs(x[finite]) > 13.2] = 2.0 ** -122
    assert (np.abs(dy[finite] - dwant[finite]) <= bound).all()
    edge = {0.0: (0.0, 0.5), 100.0: (100.0, 1.0), -100.0: (0.0, 0.0)}
    for v, (value, slope) in edge.items():
        i = np.flatnonzero(x == v)[0]
        assert y[i] == value and dy[i] == slope
    assert np.signbit(y[np.flatnonzero((x == 0) & np.signbit(x))[0]])
    # gelu(inf) = inf; -inf * Phi(-inf) and the slopes' inf * phi(inf) are inf * 0, NaN
    # (as in torch's formulas); NaN stays NaN
    assert y[x == np.inf][0] == np.inf and np.isnan(y[x == -np.inf]).all()
    assert np.isnan(dy[~finite]).all()


@pytest.mark.parametrize("blas_threads", ["1", "0"])
def test_layer_norm_on_threads_for_big_inputs_matches_torch_and_numpy(monkeypatch,
                                                                      blas_threads):
    """From kernels.PARALLEL_MIN elements on, the forward loop's rows are shared among
    threads: two ranges that cover every row once, run on two threads: OpenBLAS's (where
    it has two and native entries are on) or a pool of ours (the ``"blas"`` trick off).
    Rows are normalised one by one, so the bits are those of one thread."""
    from dualgraph.kernels import blas_threads as openblas
    rng = np.random.default_rng(11)
    x = (rng.normal(size=(kernels.PARALLEL_MIN // 512, 512)) * 2 + 1).astype(np.float32)
    w, b = (rng.normal(size=512).astype(np.float32) for _ in range(2))
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "2")
    from dualgraph.kernels import tuning
    monkeypatch.setattr(tuning, "active", tuning.active | {"blas"} if blas_threads == "1"
                        else tuning.active - {"blas"})
    monkeypatch.setattr(openblas, "backoff", tuning.Backoff())   # (not backing off now)
    on_openblas = (openblas.count() == 2 and kernels.numba_available()
                   and kernels.native.enabled())
    ranges, run_loop, run_jobs = [], kernels.Loop.__call__, openblas.run

    def record(self, *args):
        if self.__name__ == "layer_norm":
            ranges.append((args[0], args[1], threading.get_ident()))
        return run_loop(self, *args)

    def record_jobs(address, blocks):
        ranges.extend((int(s), int(e), f"job {i}") for i, (s, e) in enumerate(blocks[:, :2]))
        return run_jobs(address, blocks)
    monkeypatch.setattr(kernels.Loop, "__call__", record)
    monkeypatch.setattr(openblas, "run", record_jobs)
    fast = dg.nn.functional.layer_norm(dg.tensor(x), (512,), dg.tensor(w), dg.tensor(b))
    assert sorted(r[:2] for r in ranges) == [(0, len(x) // 2), (len(x) // 2, len(x))]
    assert len({r[2] for r in ranges}) == 2
    assert all(isinstance(r[2], str) == on_openblas for r in ranges)
    monkeypatch.undo()
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "1")
    one = dg.nn.functional.layer_norm(dg.tensor(x), (512,), dg.tensor(w), dg.tensor(b))
    np.testing.assert_array_equal(fast.numpy(), one.numpy())
    monkeypatch.setenv("DUALGRAPH_NUMBA", "0")
    slow = dg.nn.functional.layer_norm(dg.tensor(x), (512,), dg.tensor(w), dg.tensor(b))
    want = torch.nn.functional.layer_norm(torch.tensor(x), (512,), torch.tensor(w),
                                          torch.tensor(b)).numpy()
    np.testing.assert_allclose(fast.numpy(), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(fast.numpy(), slow.numpy(), rtol=2e-5, atol=2e-5)


def test_run_rows_covers_every_row_once_and_raises_what_a_range_raised():
    seen = []

    def loop(start, stop, out):
        seen.append((start, stop))
        out[start:stop] += 1
        if start == 0 and out.size == 5:
            raise ValueError("range 0 failed")
    out = np.zeros(10)
    run_rows(loop, 10, out, threads=3)
    np.testing.assert_array_equal(out, 1)
    assert sorted(seen) == [(0, 3), (3, 6), (6, 10)]
    seen.clear()
    run_rows(loop, 10, out, threads=1)
    assert seen == [(0, 10)]
    with pytest.raises(ValueError, match="range 0 failed"):
        run_rows(loop, 5, np.zeros(5), threads=2)
    run_rows(loop, 0, np.zeros(0), threads=4)   # no rows: nothing to share


@pytest.mark.parametrize("kwargs", [{"momentum": 0.9}, {"momentum": 0.9, "nesterov": True},
                                    {"momentum": 0.8, "dampening": 0.3, "weight_decay": 0.01}])
def test_sgd_momentum_loop_matches_torch_and_numpy(monkeypatch, kwargs):
    rng = np.random.default_rng(12)
    start = rng.normal(size=(80, 60)).astype(np.float32)
    grads = [rng.normal(size=(80, 60)).astype(np.float32) for _ in range(3)]

    def run(lib):
        p = lib.nn.Parameter(lib.tensor(start.copy()))
        opt = lib.optim.SGD([p], lr=0.05, **kwargs)
        for g in grads:
            p.grad = lib.tensor(g)
            opt.step()
        return p.detach().numpy(), opt.state_dict()["state"][0]["momentum_buffer"].numpy()
    # (a parameter the update may write is updated in its storage: the in-place loop)
    fast, slow = both_paths(lambda: run(dg), monkeypatch,
                            expect=("sgd_momentum", "sgd_momentum_in_place"))
    for got, np_got, want in zip(fast, slow, run(torch)):   # (torch may fuse a*b+c: FMA)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got, np_got)


def trig_inputs():
    rng = np.random.default_rng(12)
    x = np.concatenate([rng.normal(size=20_000).astype(np.float32) * scale
                        for scale in (1e-3, 1, 30, 3e3, 3e5)])
    # signed zeros, tiny, near multiples of pi/2, the reduction's limit, huge, inf, NaN
    special = [0.0, -0.0, 1e-40, -1e-30, np.pi / 2, np.pi, -np.pi, 100 * np.pi, 2.0 ** 18,
               2.0 ** 18 - 0.5, -(2.0 ** 18), 1e30, -3.4e38, np.inf, -np.inf, np.nan]
    return np.concatenate([np.array(special, np.float32), x])


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_and_cos_are_correctly_rounded_and_match_torch(monkeypatch, name):
    """The loops compute in float64 and round once: equal to the float64 result rounded to
    float32 (NumPy's own float32 sin/cos are up to ~1.5 ulps off), signed zeros kept."""
    x = trig_inputs()
    g = np.random.default_rng(13).normal(size=x.size).astype(np.float32)

    def run():
        xs = dg.tensor(x, requires_grad=True)
        y = getattr(dg, name)(xs)
        y.backward(dg.tensor(g))
        return y.detach().numpy(), xs.grad.numpy()
    (y, dx), (y_np, dx_np) = both_paths(run, monkeypatch, expect=name)
    with np.errstate(invalid="ignore"):
        want = getattr(np, name)(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(y, want)
    assert (np.signbit(y) == np.signbit(want))[~np.isnan(want)].all()
    np.testing.assert_allclose(y, y_np, rtol=0, atol=3e-7)     # NumPy's float32 loop
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(torch, name)(xt)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=0, atol=3e-7)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=2e-6, atol=3e-7)


def test_sin_takes_the_loop_even_for_a_few_elements(monkeypatch):
    """A fused program on 16 numbers calls ``sin32``: eager sin must be the same there."""
    x = np.linspace(-7, 7, 16, dtype=np.float32)
    fast, _ = both_paths(lambda: dg.sin(dg.tensor(x)).numpy(), monkeypatch, expect="sin")
    np.testing.assert_array_equal(fast, np.sin(x.astype(np.float64)).astype(np.float32))


def test_run_rows_works_in_a_forked_child_after_the_parent_used_the_pool():
    """The pool's threads do not survive fork; the child must not wait on them."""
    import os
    out = np.zeros(8)
    run_rows(lambda s, e, o: o.__setitem__(slice(s, e), 1), 8, out, threads=2)
    pid = os.fork()
    if pid == 0:   # the child: exit 0 only if its own run completes (killed if it hangs)
        import signal
        signal.alarm(30)
        child = np.zeros(8)
        run_rows(lambda s, e, o: o.__setitem__(slice(s, e), 2), 8, child, threads=2)
        os._exit(0 if (child == 2).all() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_helpers_keep_their_own_float_rules_whichever_loop_compiles_them_first(tmp_path):
    """Numba compiles a helper with the fast-math flags of the loop that first calls it
    unless the helper sets its own. softmax's loop allows reassociation, which breaks
    exp32's exact argument reduction (4e-6 relative error); the helpers set fastmath=False,
    so compiling softmax first (in a fresh process and caches: Numba's, and the native
    entries', which otherwise keep the package's loops with the installation) leaves exp32
    exact."""
    import subprocess
    import sys
    code = ("import numpy as np\n"
            "from dualgraph.kernels import build, fastmath, native, normalization\n"
            f"native._folder = lambda loop: native.Path({str(tmp_path)!r})\n"
            "x = np.ones((4, 4096), np.float32)\n"
            "normalization.softmax(0, 4, x, np.empty_like(x))\n"
            f"assert list(native.Path({str(tmp_path)!r}).glob('*.o'))  # compiled here\n"
            "v = np.float32(-72.0756)\n"
            "print(build.compiled_helper(fastmath.exp32)(v) == fastmath.exp32(v))\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), DUALGRAPH_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    assert out.stdout.strip() == "True"


def test_exp32_and_tanh32_against_float64_including_the_underflow_edge():
    """exp32 within 1 ulp wherever its result is a normal float32, exactly 0 below the
    underflow threshold (computed as exp(0) there, so that no subnormal is formed), inf
    above overflow, NaN for NaN; tanh32 within 5 ulps (its multiply-adds fused)."""
    from dualgraph.kernels import build, fastmath
    from numba import njit
    exp32, tanh32 = (build.compiled_helper(h) for h in (fastmath.exp32, fastmath.tanh32))

    @njit
    def apply_both(x, e, t):
        for i in range(x.size):
            e[i], t[i] = exp32(x[i]), tanh32(x[i])
    lo = fastmath._EXP_LO
    x = np.concatenate([np.linspace(-88, -86.5, 30001, dtype=np.float32),
                        np.linspace(-20, 20, 400001, dtype=np.float32),
                        np.linspace(80, 89, 30001, dtype=np.float32),
                        np.array([lo, -np.inf, np.inf, np.nan, -1e30], np.float32)])
    e, t = np.empty_like(x), np.empty_like(x)
    apply_both(x, e, t)
    want = np.exp(x.astype(np.float64))
    normal = (want >= np.finfo(np.float32).tiny) & (want <= np.finfo(np.float32).max)
    ulps = np.abs(e[normal] - want[normal]) / np.spacing(want[normal].astype(np.float32))
    assert ulps.max() <= 1.0
    assert (e[x < lo] == 0).all() and e[x == lo].min() > 0
    assert np.isinf(e[x > 88.8]).all() and np.isnan(e[np.isnan(x)]).all()
    finite = np.isfinite(x)
    want_t = np.tanh(x[finite].astype(np.float64))
    ulps_t = np.abs(t[finite] - want_t) / np.spacing(np.abs(want_t).astype(np.float32))
    assert ulps_t.max() <= 5.0
    assert np.isnan(t[np.isnan(x)]).all() and t[x == np.inf] == 1 and t[x == -np.inf] == -1


def test_exp32_nonpositive_is_exp32_to_the_bit_where_it_is_used():
    """The exp without overflow handling (softmax's ``exp(x - max)``, the GELU gradient's
    tanh terms) gives exp32's very bits for every argument <= 0 and below 88.3, 0 below
    the underflow threshold and NaN for NaN."""
    from dualgraph.kernels import build, fastmath
    from numba import njit
    exp32, exp_np = (build.compiled_helper(h)
                     for h in (fastmath.exp32, fastmath.exp32_nonpositive))

    @njit
    def apply_both(x, a, b):
        for i in range(x.size):
            a[i], b[i] = exp32(x[i]), exp_np(x[i])
    x = np.concatenate([np.linspace(-105, 88.3, 400001, dtype=np.float32),
                        np.array([fastmath._EXP_LO, -np.inf, np.nan, -0.0, 0.0, -1e30],
                                 np.float32)])
    a, b = np.empty_like(x), np.empty_like(x)
    apply_both(x, a, b)
    np.testing.assert_array_equal(a, b)
    assert np.isnan(b[np.isnan(x)]).all() and (b[x < fastmath._EXP_LO] == 0).all()


def test_a_bt_loop_matches_float64_and_computes_a_conv_weight_gradient(monkeypatch):
    """``products.a_bt`` (few outputs, long rows: a convolution's weight gradient), with
    leftover rows and columns of its 2 x 4 tiles and lengths past its column blocks; then
    LeNet's first layer's weight gradient, which takes it, against torch."""
    from dualgraph.kernels import products
    rng = np.random.default_rng(0)
    for m, n, length in ((6, 25, 57344), (5, 7, 10001), (1, 3, 4096), (2, 4, 5000)):
        a = rng.standard_normal((m, length), dtype=np.float32)
        b = rng.standard_normal((n, length), dtype=np.float32)
        assert products.wanted(a, b)
        out = np.empty((m, n), np.float32)
        products.a_bt(a, b, out)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b.T.astype(np.float64),
                                   rtol=1e-4, atol=2e-3)
    ran = []
    a_bt = products.a_bt
    monkeypatch.setattr(products, "a_bt", lambda *args: ran.append(1) or a_bt(*args))
    x = rng.standard_normal((64, 1, 28, 28), dtype=np.float32)
    w = rng.standard_normal((6, 1, 5, 5), dtype=np.float32) * 0.2
    g = rng.standard_normal((64, 6, 28, 28), dtype=np.float32)
    ws = dg.tensor(w, requires_grad=True)
    dg.nn.functional.conv2d(dg.tensor(x), ws, padding=2).backward(dg.tensor(g))
    wt = torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv2d(torch.tensor(x), wt, padding=2).backward(torch.tensor(g))
    assert ran
    np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("kwargs", [{"padding": (5, 3)}, {"padding": (9, 3), "dilation": (2, 1)},
                                    {"padding": (5, 4), "groups": 2}])
def test_conv_input_gradient_loop_matches_torch_and_numpy(monkeypatch, kwargs):
    """``conv_columns.col2im`` on a stride-1 conv's input gradient (from its columns,
    where the padding is wider than the kernel's span, so that it is not a conv of the
    output gradient with the flipped weight)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 4, 15, 13), dtype=np.float32)
    w = rng.standard_normal((6, 4 // kwargs.get("groups", 1), 5, 3), dtype=np.float32)

    def run():
        xs = dg.tensor(x, requires_grad=True)
        y = dg.nn.functional.conv2d(xs, dg.tensor(w), **kwargs)
        y.backward(dg.tensor(np.cos(np.arange(y.numel(), dtype=np.float32)).reshape(y.shape)))
        return xs.grad.numpy()
    fast, slow = both_paths(run, monkeypatch, expect="_col2im")
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, torch.tensor(w), **kwargs)
    yt.backward(torch.cos(torch.arange(yt.numel(), dtype=torch.float32)).reshape(yt.shape))
    np.testing.assert_allclose(fast, xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-5)


CONVS = [   # x shape, w shape, conv2d kwargs: every conv_method, padding, stride, dilation
    ((2, 6, 9, 11), (6, 1, 3, 3), {"padding": 1, "groups": 6}),
    ((3, 4, 10, 9), (8, 1, 3, 5), {"stride": 2, "padding": (2, 1), "groups": 4}),   # x2
    ((2, 5, 12, 12), (5, 1, 3, 3), {"padding": 3, "dilation": 2, "groups": 5}),
    ((2, 5, 8, 7), (5, 1, 3, 3), {"stride": (2, 1), "groups": 5}),
    # rows of 16 outputs or more: the row loops (the ones above take the channel tiles)
    ((2, 3, 7, 37), (3, 1, 3, 3), {"padding": 1, "groups": 3}),
    ((1, 17, 9, 41), (17, 1, 3, 5), {"stride": (1, 2), "padding": (0, 2), "groups": 17}),
    ((2, 4, 11, 50), (4, 1, 5, 3), {"stride": 3, "padding": (2, 3), "dilation": (1, 2),
                                    "groups": 4}),
    ((3, 8, 9, 9), (8, 2, 3, 3), {"padding": 1, "groups": 4}),                        # grouped
    ((2, 6, 8, 8), (12, 6, 1, 1), {}),                                                 # 1x1
    ((2, 6, 9, 8), (4, 6, 1, 1), {"stride": 2}),
    ((4, 3, 23, 21), (5, 3, 3, 3), {"padding": 1}),
    ((2, 4, 17, 19), (3, 4, 5, 3), {"stride": 2, "padding": (2, 0), "dilation": (1, 2)}),
]


@pytest.mark.parametrize("x_shape,w_shape,kwargs", [c for c in CONVS if "groups" in c[2]])
def test_depthwise_gradients_by_finite_differences(x_shape, w_shape, kwargs):
    """The direct loops' two gradients in float64 (the same loops as float32), by
    finite differences of the loop's own forward: rows and tiles, strides, dilations."""
    rng = np.random.default_rng(3)
    xs = dg.tensor(rng.standard_normal((1,) + x_shape[1:]), requires_grad=True)
    ws = dg.tensor(rng.standard_normal(w_shape), requires_grad=True)
    assert dg.autograd.gradcheck(lambda a, b: dg.nn.functional.conv2d(a, b, **kwargs),
                                 (xs, ws), eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,kwargs", CONVS)
@pytest.mark.parametrize("block_bytes", [1 << 20, 512])
def test_conv_kernels_match_torch(monkeypatch, x_shape, w_shape, kwargs, block_bytes):
    """conv2d forward, input and weight gradient against torch for each ``conv_method``:
    the depthwise loops (padding, stride, dilation as index ranges, a channel multiplier
    of 2 taking the blocked GEMMs), a grouped and 1x1 convs, and the blocked im2col with
    several images per block or (``COLUMN_BLOCK_BYTES`` of 512) a few rows per block."""
    from dualgraph.ops import conv
    monkeypatch.setattr(conv, "COLUMN_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(17)
    x, w = rng.standard_normal(x_shape, dtype=np.float32), rng.standard_normal(w_shape,
                                                                             dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    results = []
    for lib in (dg, torch):
        xs, ws, bs = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        y = lib.nn.functional.conv2d(xs, ws, bs, **kwargs)
        y.backward(lib.tensor(np.cos(np.arange(y.numel(), dtype=np.float32)).reshape(
            y.shape)))
        results.append([t.detach().numpy() for t in (y, xs.grad, ws.grad, bs.grad)])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    two = lambda v: (v, v) if type(v) is int else tuple(v)   # noqa: E731
    padding = tuple((p, p) for p in two(kwargs.get("padding", 0)))
    method = conv.conv_method(x_shape, w_shape, two(kwargs.get("stride", 1)), padding,
                              two(kwargs.get("dilation", 1)), kwargs.get("groups", 1))
    depthwise = w_shape[1] == 1 and w_shape[0] == kwargs.get("groups", 1)
    assert (method == "depthwise") == depthwise
    assert (method == "pointwise") == (w_shape[2:] == (1, 1) and not kwargs)


@pytest.mark.parametrize("shape,kwargs", [
    ((2, 3, 15, 17), {"kernel_size": 3, "stride": 2, "padding": 1}),              # ResNet's
    ((1, 4, 12, 11), {"kernel_size": (3, 2), "stride": (1, 2), "dilation": (2, 1)}),
    ((2, 2, 9, 10), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ((1, 3, 20, 20), {"kernel_size": 5, "stride": 3, "padding": 2, "ceil_mode": True}),
])
def test_max_pool_loop_matches_torch(shape, kwargs):
    """``kernels.pooling.max_pool`` (any window): values and torch's argmax indices, with
    padding, dilation, ceil mode and repeated maxima (the first wins)."""
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, shape).astype(np.float32)    # ties in most windows
    got = dg.nn.functional.max_pool2d(dg.tensor(x), return_indices=True, **kwargs)
    want = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **kwargs)
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())


@pytest.mark.parametrize("channels,spread", [(16, 1), (21, 1), (5, 2), (40, 3)])
def test_blocked_layout_round_trip(channels, spread):
    """``kernels.conv.to_blocks``/``from_blocks`` (the NCHW16c layout of the small-plane
    loops): channels padded with zeros to a multiple of 16, columns spread with zeros
    between, and back (every ``spread``-th position) to the same array."""
    from dualgraph.kernels import conv
    x = np.random.default_rng(2).standard_normal((2, channels, 3, 5), dtype=np.float32)
    blocked = conv.to_blocks(x, spread)
    five = blocked.reshape(2, -(-channels // 16), 3, -1, 16)
    assert five.shape[3] == 4 * spread + 1
    np.testing.assert_array_equal(five[:, 0, :, ::spread, 0], x[:, 0])
    assert not five[..., channels % 16 or 16:][:, -1].any()
    if spread > 1:
        assert not five[:, :, :, 1::spread].any()
    back = np.empty_like(x)
    conv.from_blocks(blocked, back, spread)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("shape", [(1024, 512), (3, 128 + 37), (1000, 37), (1, 300), (200, 1),
                                   (64, 256)])
def test_column_sums_are_numpys_axis0_sum_to_the_bit(shape):
    """kernels.sums.column_sums: rows added in turn from 0, as np.add.reduce(axis=0), in
    the 128-column register blocks and the tail, with -0.0, infinities and NaN."""
    rng = np.random.default_rng(shape[0] + shape[1])
    a = (rng.standard_normal(shape) * np.exp(3 * rng.standard_normal(shape))).astype(np.float32)
    a[:, 0] = -0.0
    if shape[1] > 2:
        a[0, -1], a[-1, shape[1] // 2] = np.inf, np.nan
        a[-1, -1] = -np.inf if shape[0] > 1 else np.inf   # inf - inf: NaN, as NumPy's
    out = np.full(shape[1], 7, np.float32)
    kernels.sums.column_sums(a.reshape(-1), out)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(out, np.add.reduce(a, axis=0))
    assert not np.signbit(out[0])               # -0.0 summed from 0: +0.0, as NumPy's


@pytest.mark.parametrize("rows", [0, 5, 1024])
def test_bias_gradients_take_the_column_sums_with_numpys_bits(monkeypatch, rows):
    """A linear's bias gradient (float32: column_sum's loop; no rows or Numba off: NumPy)
    is NumPy's sum over the rows to the bit, and torch's to rounding."""
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 24), dtype=np.float32)
    w = rng.standard_normal((192, 24), dtype=np.float32)
    g = rng.standard_normal((rows, 192), dtype=np.float32)

    def run():
        lin = dg.nn.Linear(24, 192)
        lin.weight.data = dg.tensor(w)
        lin(dg.tensor(x)).backward(dg.tensor(g))
        return lin.bias.grad.numpy()
    fast, slow = both_paths(run, monkeypatch) if rows * 192 >= kernels.MIN_ELEMENTS else (
        run(), np.add.reduce(g, axis=0))
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(fast, np.add.reduce(g, axis=0))
    tb = torch.zeros(192, requires_grad=True)
    torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), tb).backward(torch.tensor(g))
    np.testing.assert_allclose(fast, tb.grad.numpy(), rtol=1e-5, atol=1e-4)




def _cell_terms(x, out):
    """Transcendentals of the LSTM cell and the tanh GELU, one element at a time."""
    for i in range(x.size):
        v = x[i]
        out[i] = sigmoid32(v) * tanh32(v) + gelu_tanh32(v)


def _cell_terms_wide(x, out):
    """The same loop, vectorised with sixteen lanes (the marker is set on the function
    being compiled whatever the branches: a function of its own)."""
    wide_loops()
    for i in range(x.size):
        v = x[i]
        out[i] = sigmoid32(v) * tanh32(v) + gelu_tanh32(v)


_EIGHT, _WIDE = kernels.loop(_cell_terms), kernels.loop(_cell_terms_wide)


def test_wide_loops_change_the_vector_width_not_the_bits():
    """simd.wide_loops (sixteen lanes where the CPU runs them at full width) on a loop of
    sigmoid, tanh and the tanh GELU: the bits of the same loop at LLVM's default width, at
    a length with a vector tail, over saturation, tiny values, infinities and NaN."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(4099) * rng.choice([1e-3, 1, 8, 40, 100], 4099)).astype(np.float32)
    x[:7] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -88.0]
    eight, wide = np.empty_like(x), np.empty_like(x)
    _EIGHT(x, eight)
    _WIDE(x, wide)
    np.testing.assert_array_equal(wide.view(np.uint32), eight.view(np.uint32))


def test_getenv_sees_changes_at_once_and_a_replaced_environ(monkeypatch):
    """``_helpers.getenv`` reads the dict ``os.environ`` writes to, kept from import: a
    ``setenv`` / ``delenv`` shows at once, and a program that replaced ``os.environ``
    itself is read through its replacement, not the kept dict."""
    import os

    from dualgraph._helpers import getenv
    name = "DUALGRAPH_TEST_GETENV_SWITCH"
    assert getenv(name, "dflt") == "dflt"
    monkeypatch.setenv(name, "on")
    assert getenv(name) == "on" and kernels.numba_available() == (
        os.environ.get("DUALGRAPH_NUMBA", "1") != "0" and kernels._numba_installed())
    monkeypatch.delenv(name)
    assert getenv(name) is None
    monkeypatch.setattr(os, "environ", {name: "elsewhere"})
    assert getenv(name) == "elsewhere"
