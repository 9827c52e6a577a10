"""Mixed precision (dualgraph/amp, docs/amp.md) against torch 2.x's CPU autocast and
``torch.amp.GradScaler``: which ops run in which dtype, results within low-precision
tolerance, the scaler step by step (scale values, skipped steps with injected infs),
accumulation over micro-batches, and compiled == eager for each."""
import warnings

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.ops.opdef import REGISTRY
from dualgraph.passes import dce, simplify

F = dg.nn.functional
LOW = [("bfloat16", 2e-2), ("float16", 4e-3)]   # (dtype, relative tolerance of a result)

_rng = np.random.default_rng(0)


def _arr(*shape):
    return _rng.standard_normal(shape).astype(np.float32)


X, W, B = _arr(4, 8), _arr(6, 8), _arr(6)
X3, W3, BIAS3 = _arr(2, 4, 8), _arr(2, 8, 5), _arr(2, 4, 5)
IMG, K = _arr(2, 3, 6, 6), _arr(4, 3, 3, 3)
TARGET = np.array([0, 1, 2, 3])
PROB = _rng.uniform(0.1, 0.9, (4, 8)).astype(np.float32)

# (name, fn(framework, tensor)): the same call in torch and in dualgraph, float32 inputs
CASES = [
    ("matmul", lambda m, T: m.matmul(T(X), T(W.T.copy()))),
    ("mm", lambda m, T: m.mm(T(X), T(W.T.copy()))),
    ("bmm", lambda m, T: m.bmm(T(X3), T(W3))),
    ("baddbmm", lambda m, T: m.baddbmm(T(BIAS3), T(X3), T(W3))),
    ("addmm", lambda m, T: m.addmm(T(B[:5]), T(X[:, :6]), T(W[:, :5]))),
    ("einsum", lambda m, T: m.einsum("ij,kj->ik", T(X), T(W))),
    ("linear", lambda m, T: m.nn.functional.linear(T(X), T(W), T(B))),
    ("conv2d", lambda m, T: m.nn.functional.conv2d(T(IMG), T(K))),
    ("attention", lambda m, T: m.nn.functional.scaled_dot_product_attention(
        T(X3), T(X3), T(X3))),
    ("mse_loss", lambda m, T: m.nn.functional.mse_loss(T(X), T(PROB))),
    ("cross_entropy", lambda m, T: m.nn.functional.cross_entropy(T(X), m.tensor(TARGET))),
    ("nll_loss", lambda m, T: m.nn.functional.nll_loss(T(X), m.tensor(TARGET))),
    ("l1_loss", lambda m, T: m.nn.functional.l1_loss(T(X), T(PROB))),
    ("smooth_l1_loss", lambda m, T: m.nn.functional.smooth_l1_loss(T(X), T(PROB))),
    ("bce_with_logits", lambda m, T: m.nn.functional.binary_cross_entropy_with_logits(
        T(X), T(PROB))),
    ("kl_div", lambda m, T: m.nn.functional.kl_div(T(X), T(PROB), reduction="batchmean")),
    ("prod", lambda m, T: T(PROB).prod()),
    ("softmax", lambda m, T: m.softmax(T(X), -1)),
    ("relu", lambda m, T: m.relu(T(X))),
    ("add", lambda m, T: T(X) + T(X)),
    ("cat", lambda m, T: m.cat([T(X), T(X)])),
    ("layer_norm", lambda m, T: m.nn.functional.layer_norm(T(X), (8,))),
    # a low-precision product feeding the next op
    ("linear, gelu", lambda m, T: m.nn.functional.gelu(m.nn.functional.linear(T(X), T(W)))),
    ("linear + float32", lambda m, T: m.nn.functional.linear(T(X), T(W)) + T(B)),
    ("linear, mse_loss", lambda m, T: m.nn.functional.mse_loss(
        m.nn.functional.linear(T(X), T(W)), T(PROB[:, :6]))),
    ("linear, cross_entropy", lambda m, T: m.nn.functional.cross_entropy(
        m.nn.functional.linear(T(X), T(W)), m.tensor(TARGET))),
]
# Where dualgraph's policy is PyTorch's CUDA one: softmax, log-softmax, sums, means, norms
# of a low-precision tensor run in float32 (torch's CPU autocast keeps the input's dtype)
FLOAT32_HERE = [
    ("linear, softmax", lambda m, T: m.softmax(m.nn.functional.linear(T(X), T(W)), -1)),
    ("linear, log_softmax", lambda m, T: m.log_softmax(m.nn.functional.linear(T(X), T(W)),
                                                       -1)),
    ("linear, sum", lambda m, T: m.nn.functional.linear(T(X), T(W)).sum()),
    ("linear, mean", lambda m, T: m.nn.functional.linear(T(X), T(W)).mean(0)),
    ("linear, layer_norm", lambda m, T: m.nn.functional.layer_norm(
        m.nn.functional.linear(T(X), T(W)), (6,))),
    ("linear, logsumexp", lambda m, T: m.logsumexp(m.nn.functional.linear(T(X), T(W)), -1)),
]


def _name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _both(fn, low):
    with torch.autocast("cpu", dtype=getattr(torch, low)):
        t = fn(torch, torch.tensor)
    with dg.autocast("cpu", dtype=getattr(dg, low)):
        d = fn(dg, dg.tensor)
    return t, d


def _close(d, t, rtol):
    want = t.detach().float().numpy()
    got = d.detach().float().numpy()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


@pytest.mark.parametrize("low,rtol", LOW)
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_each_op_runs_in_the_dtype_torch_autocast_gives(name, fn, low, rtol):
    t, d = _both(fn, low)
    assert _name(d.dtype) == _name(t.dtype)
    _close(d, t, rtol)


@pytest.mark.parametrize("low,rtol", LOW)
@pytest.mark.parametrize("name,fn", FLOAT32_HERE, ids=[c[0] for c in FLOAT32_HERE])
def test_reductions_of_low_precision_values_run_in_float32(name, fn, low, rtol):
    t, d = _both(fn, low)
    assert d.dtype == dg.float32 and t.dtype == getattr(torch, low)   # (docs/amp.md)
    _close(d, t, rtol)


def test_the_policy_is_a_fact_of_each_op():
    policy = {name: op.autocast for name, op in REGISTRY.items() if op.autocast}
    assert {n for n, p in policy.items() if p == "lower"} >= {"matmul", "linear", "conv2d",
                                                              "einsum"}
    assert {n for n, p in policy.items() if p == "float32"} >= {
        "sum", "mean", "softmax", "log_softmax", "layer_norm", "cross_entropy", "norm"}
    assert not any(REGISTRY[n].compiler_only for n in policy)
    with pytest.raises(ValueError, match="autocast must be"):
        dg.ops.opdef.OpDef("x", None, None, autocast="half")


def _mlp(seed=0, sizes=(8, 16, 4)):
    torch.manual_seed(seed)
    ref = torch.nn.Sequential(torch.nn.Linear(sizes[0], sizes[1]), torch.nn.ReLU(),
                              torch.nn.Linear(sizes[1], sizes[2]))
    ours = dg.nn.Sequential(dg.nn.Linear(sizes[0], sizes[1]), dg.nn.ReLU(),
                            dg.nn.Linear(sizes[1], sizes[2]))
    ours.load_state_dict({k: dg.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    return ref, ours


@pytest.mark.parametrize("low,rtol", LOW)
def test_forward_and_backward_match_torch_with_float32_master_weights(low, rtol):
    ref, ours = _mlp()
    x = _arr(32, 8)
    y = _rng.integers(0, 4, 32)
    with torch.autocast("cpu", dtype=getattr(torch, low)):
        t_out = ref(torch.tensor(x))
        t_loss = torch.nn.functional.cross_entropy(t_out, torch.tensor(y))
    with dg.autocast("cpu", dtype=getattr(dg, low)):
        d_out = ours(dg.tensor(x))
        d_loss = F.cross_entropy(d_out, dg.tensor(y))
    assert _name(d_out.dtype) == low and d_loss.dtype == dg.float32
    t_loss.backward()
    d_loss.backward()
    _close(d_loss, t_loss, rtol)
    for (name, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters()):
        assert q.dtype == dg.float32 and q.grad.dtype == dg.float32, name
        _close(q.grad, p.grad, 4 * rtol)


def test_regions_nest_and_enabled_false_turns_autocast_off():
    w = dg.randn(3, 3)
    assert not dg.is_autocast_enabled() and dg.get_autocast_dtype("cpu") == dg.bfloat16
    with dg.autocast("cpu", dtype=dg.float16):
        assert dg.is_autocast_enabled() and dg.is_autocast_enabled("cpu")
        assert (w @ w).dtype == dg.float16
        with dg.autocast("cpu", enabled=False):
            assert not dg.is_autocast_enabled() and (w @ w).dtype == dg.float32
            with dg.amp.autocast("cpu", dtype=dg.bfloat16):
                assert (w @ w).dtype == dg.bfloat16
                assert dg.get_autocast_dtype("cpu") == dg.bfloat16
            assert (w @ w).dtype == dg.float32
        assert (w @ w).dtype == dg.float16 and dg.get_autocast_dtype("cpu") == dg.float16
    assert (w @ w).dtype == dg.float32 and not dg.is_autocast_enabled()


def test_a_decorated_function_runs_under_autocast_and_torch_spellings_exist():
    @dg.autocast("cpu")
    def product(a):
        return a @ a

    @dg.cpu.amp.autocast()
    def product_cpu(a):
        return a @ a

    w = dg.randn(2, 2)
    assert product(w).dtype == dg.bfloat16 and product_cpu(w).dtype == dg.bfloat16
    assert (w @ w).dtype == dg.float32
    with pytest.warns(UserWarning, match="CPU only"):
        region = dg.cuda.amp.autocast()
    with region:   # (as a CPU-only torch: CUDA autocast is off)
        assert (w @ w).dtype == dg.float32
    with pytest.warns(UserWarning, match="bfloat16 and float16"):
        with dg.autocast("cpu", dtype=dg.float64):
            assert (w @ w).dtype == dg.float32
    assert dg.is_autocast_available("cpu") and not dg.is_autocast_available("cuda")


def test_float64_and_integer_tensors_are_never_cast():
    a = dg.randn(3, 3, dtype=dg.float64)
    i = dg.arange(9).reshape(3, 3)
    with dg.autocast("cpu"):
        assert (a @ a).dtype == dg.float64
        assert (i @ i).dtype == dg.int64
        assert i.sum().dtype == dg.int64


def test_a_parameter_is_cast_once_per_region_and_again_after_it_changes():
    w = dg.randn(4, 4, requires_grad=True)
    x = dg.randn(2, 4)
    with dg.autocast("cpu"):
        h = x @ w
        h = h @ w
        casts = [n for n in _tape(h) if n.op is dg.ops.elementwise.CAST]
        assert len(casts) == 1   # w's, read twice (x's cast records nothing)
        h.float().sum().backward()
        with dg.no_grad():
            w.add_(1.0)
        again = x @ w   # a new value: cast afresh
        np.testing.assert_array_equal(again.detach().float().numpy(),
                                      (x @ w.detach()).float().numpy())
        (x @ w).float().sum().backward()   # the cached cast's backward node was used up
    with dg.autocast("cpu", cache_enabled=False):
        h = (x @ w) @ w
        assert len([n for n in _tape(h) if n.op is dg.ops.elementwise.CAST]) == 2


def _tape(t):
    seen, todo = [], [t.grad_fn]
    while todo:
        n = todo.pop()
        if n is None or not hasattr(n, "op") or n in seen:
            continue
        seen.append(n)
        todo += [e[0] for e in n.next if e is not None]
    return seen


# -- compiled --------------------------------------------------------------------------------
def test_the_casts_are_graph_nodes_and_compiled_equals_eager():
    _, model = _mlp(1)
    x = dg.tensor(_arr(8, 8))

    def forward(x):
        with dg.autocast("cpu"):
            return F.softmax(model(x), -1)

    compiled = dg.compile(forward)
    out = compiled(x)
    casts = [n for n in compiled.graph.nodes if n.op is dg.ops.elementwise.CAST]
    assert len(casts) == 6   # x, two weights, two biases; the logits to float32
    assert out.dtype == dg.float32
    eager = forward(x)
    np.testing.assert_array_equal(out.detach().numpy(), eager.detach().numpy())
    grads = []
    for result in (out, eager):   # the backward through the casts too
        model.zero_grad()
        (result * dg.arange(4.0)).sum().backward()
        grads.append([p.grad.numpy() for p in model.parameters()])
    for a, b in zip(*grads):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)


def test_autocast_around_a_compiled_call_is_guarded():
    _, model = _mlp(2)
    compiled = dg.compile(model)
    x = dg.tensor(_arr(4, 8))
    plain = compiled(x)
    with dg.autocast("cpu"):
        low = compiled(x)
        np.testing.assert_array_equal(low.detach().float().numpy(),
                                      model(x).detach().float().numpy())
    with dg.autocast("cpu", dtype=dg.float16):
        half = compiled(x)
    again = compiled(x)
    assert (plain.dtype, low.dtype, half.dtype, again.dtype) == (
        dg.float32, dg.bfloat16, dg.float16, dg.float32)
    np.testing.assert_array_equal(again.detach().numpy(), plain.detach().numpy())
    report = compiled.explain()
    assert "autocast changed from off to bfloat16" in report
    assert "autocast changed from bfloat16 to float16" in report


def test_exact_cast_pairs_fold_and_rounding_ones_stay():
    def f(x):
        return (x.float().to(dg.bfloat16) * 2,        # bf16 -> f32 -> bf16: x
                x.float().double().half(),            # bf16 -> f32 -> f64 -> f16: one cast
                x.float().bfloat16().float())         # the last pair only: x as float32

    def g(y):
        return y.bfloat16().float() * 2               # f32 -> bf16 -> f32 rounds: kept

    x = dg.randn(5).to(dg.bfloat16)
    graph, report = simplify(dg.jit.trace(f, (x,)).graph)
    graph, _ = dce(graph)
    casts = [n for n in graph.nodes if n.op is dg.ops.elementwise.CAST]
    assert [n.attrs["dtype"] for n in casts] == [np.float16, np.float32]
    assert all(n.inputs[0] is graph.inputs[0] for n in casts)
    for a, b in zip(graph(x._data), f(x)):
        np.testing.assert_array_equal(np.asarray(a, np.float64), b.double().numpy())
    kept, _ = simplify(dg.jit.trace(g, (dg.randn(5),)).graph)
    assert sum(n.op is dg.ops.elementwise.CAST for n in kept.nodes) == 2


def test_casts_fuse_with_their_elementwise_neighbours():
    def f(x, w):
        with dg.autocast("cpu"):
            return dg.relu(x @ w).float() * 3 + 1

    compiled = dg.compile(f)
    x, w = dg.randn(4, 4), dg.randn(4, 4)
    np.testing.assert_array_equal(compiled(x, w).numpy(), f(x, w).numpy())
    fused = [n for n in compiled._last.executable.graph.nodes if n.op is REGISTRY["fused"]]
    assert [[m.op.name for m in n.attrs["graph"].nodes] for n in fused] == [
        ["relu", "cast", "mul", "add"]]
