"""Linear layers on a weight packed once (``kernels/linear_packed.py``, the op
``linear_packed`` and the lowering rule ``linear_packed``): the loop against float64 and
torch on odd shapes (rows not a multiple of six, one to five rows past the last block,
outputs not a multiple of 64, 3-D and strided inputs, an ``out`` array), the op with every
epilogue and with LayerNorm against its decomposition and without Numba's loop; compiled
models with frozen weights against eager and torch; what the rule leaves alone."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from dualgraph import kernels, passes  # noqa: E402
from dualgraph.graph import Graph  # noqa: E402
from dualgraph.kernels import isa, linear_packed  # noqa: E402
from dualgraph.ops.epilogue import LINEAR_PACKED  # noqa: E402

F = np.float32
# rows, K, N: every remainder of rows by six, outputs in one partial panel, in whole
# panels, and past them; a K of one lane's worth and a long one; rows in several bands
# over whole panels, K past its last full block (the next block's weights prefetched
# across panels and back to the first for the next band)
SHAPES = [(1, 16, 32), (2, 33, 40), (3, 20, 70), (5, 64, 100), (6, 17, 32), (7, 37, 45),
          (13, 256, 96), (129, 24, 1030), (200, 300, 64), (32, 128, 512), (4, 40, 130),
          (1100, 520, 192)]


def _data(rows, k, n, seed=0):
    rng = np.random.default_rng(seed + rows + k + n)
    return (rng.standard_normal((rows, k)).astype(F), rng.standard_normal((n, k)).astype(F),
            rng.standard_normal(n).astype(F))


def test_pack_and_unpack():
    w = np.arange(80 * 3, dtype=F).reshape(80, 3)
    packed = linear_packed.pack(w)
    assert packed.shape == (2, 3, 64) and packed.flags.c_contiguous
    assert packed[1, 2, 4] == w[68, 2] and not packed[1, :, 16:].any()
    np.testing.assert_array_equal(linear_packed.unpack(packed, 80), w)


@pytest.mark.parametrize("rows,k,n", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_product_matches_float64_and_torch(rows, k, n, bias):
    x, w, b = _data(rows, k, n)
    got = linear_packed.product(x, linear_packed.pack(w), n, b if bias else None)
    exact = x.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    want = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w),
                                      torch.tensor(b) if bias else None).numpy()
    assert got.shape == (rows, n) and got.dtype == F
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("rows,k,n", [(7, 37, 45), (32, 128, 512), (1024, 256, 256)],
                         ids=["partial-panel", "one-thread", "threads"])
def test_prepared_product_equals_product_call_after_call(rows, k, n):
    """``Product``: the packing and the call worked out once (one thread and its entry
    kept, or the rows shared), the same bits as :func:`product` on every call."""
    x, w, _ = _data(rows, k, n)
    prepared = linear_packed.Product(w.T, rows)
    out = np.full((rows, n), np.nan, F)
    for scale in (1, -2):
        assert prepared(x * F(scale), out) is out
        np.testing.assert_array_equal(
            out, linear_packed.product(x * F(scale), linear_packed.pack(w), n))


def test_product_of_3d_strided_input_into_out():
    """A 3-D input, a strided view (copied once), an ``out`` written in place; an ``out``
    that is not contiguous is replaced by a fresh array; no rows, an empty result."""
    x, w, b = _data(2 * 9, 41, 70)
    x3 = x.reshape(2, 9, 41)
    packed = linear_packed.pack(w)
    want = x3 @ w.T + b
    out = np.full((2, 9, 70), np.nan, F)
    assert linear_packed.product(x3, packed, 70, b, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    wide = np.zeros((2, 9, 82), F)
    np.testing.assert_allclose(linear_packed.product(wide[..., :41] + x3, packed, 70, b),
                               want, rtol=1e-5, atol=1e-5)
    strided = np.zeros((2, 9, 140), F)[..., ::2]
    got = linear_packed.product(x3[:, ::-1], packed, 70, b, out=strided)
    np.testing.assert_allclose(got, want[:, ::-1], rtol=1e-5, atol=1e-5)
    assert linear_packed.product(x3[:, :0], packed, 70, b).shape == (2, 0, 70)


def _op(x, w, b, *rest, act="none", bounds=(-np.inf, np.inf), residual_at=None, eps=None):
    return LINEAR_PACKED.kernel(x, linear_packed.pack(w), b, *rest, act=act, bounds=bounds,
                                residual_at=residual_at, eps=eps)


def _decomposed(x, w, b, *rest, **attrs):
    tensors = [dg.tensor(a) for a in (x, linear_packed.pack(w), b, *rest)]
    return LINEAR_PACKED.decomposition(*tensors, **attrs).numpy()


@pytest.mark.parametrize("act,residual_at,eps", [
    ("none", None, None), ("gelu", None, None), ("clamp", "before", None),
    ("silu", "after", None), ("relu", None, 1e-5), ("none", "before", 1e-5),
    ("gelu_tanh", "after", 1e-6)])
def test_epilogues_and_norm_match_the_decomposition(act, residual_at, eps):
    x, w, b = _data(7, 37, 45)
    rng = np.random.default_rng(1)
    rest = []
    if eps is not None:
        rest += [rng.standard_normal(45).astype(F), rng.standard_normal(45).astype(F)]
    if residual_at:
        rest.append(rng.standard_normal((7, 45)).astype(F))
    attrs = dict(act=act, bounds=(0.0, 6.0) if act == "clamp" else (-np.inf, np.inf),
                 residual_at=residual_at, eps=eps)
    np.testing.assert_allclose(_op(x, w, b, *rest, **attrs),
                               _decomposed(x, w, b, *rest, **attrs), rtol=1e-5, atol=1e-5)


def test_without_the_loop_the_op_unpacks(monkeypatch):
    """Without Numba, and in float64, the op runs ``linear``'s kernel on the weight
    unpacked: the same values."""
    x, w, b = _data(7, 37, 45)
    want = _op(x, w, b, act="gelu")
    monkeypatch.setattr(kernels, "numba_available", lambda: False)
    np.testing.assert_allclose(_op(x, w, b, act="gelu"), want, rtol=1e-5, atol=1e-5)
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    got = LINEAR_PACKED.kernel(x64, linear_packed.pack(w64).astype(np.float64), b64,
                               act="none", bounds=(-np.inf, np.inf), residual_at=None,
                               eps=None)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, x64 @ w64.T + b64, rtol=1e-6, atol=1e-6)


def test_shape_errors_name_the_layout():
    x, w, b = _data(7, 37, 100)
    with pytest.raises(ValueError, match="linear_packed: packed weight"):
        LINEAR_PACKED.infer(x, linear_packed.pack(w)[:1], b, act="none",
                            bounds=(-np.inf, np.inf), residual_at=None, eps=None)


def _block(lib, k, n, norm):
    """A post-norm feed-forward block: LayerNorm(x + W2 gelu(W1 x)), then a linear without
    bias and a ReLU."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = nn.Linear(k, n), nn.Linear(n, k)
            self.norm = nn.LayerNorm(k) if norm else nn.Identity()
            self.head = nn.Linear(k, 33, bias=False)

        def forward(self, x):
            y = self.norm(x + self.down(nn.functional.gelu(self.up(x))))
            return nn.functional.relu(self.head(y))
    return Block()


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (1, 6), (2, 7), (3, 65)], ids=str)
@pytest.mark.parametrize("norm", [True, False])
def test_compiled_block_equals_eager_and_torch(shape, norm):
    """Frozen weights: the products ``linear_packed.constant_wins`` takes run packed (the
    up and down products of 195 rows, with their GELU, residual and LayerNorm epilogues),
    the others (the head's partial panel of 33 outputs) keep ``linear``'s kernels;
    compiled equals eager and torch either way."""
    torch.manual_seed(sum(shape))
    ref = _block(torch, 64, 128, norm).eval()
    ours = _block(dg, 64, 128, norm).eval()
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in
                          ref.state_dict().items()})
    x = np.random.default_rng(len(shape)).standard_normal(shape + (64,)).astype(F)
    compiled = dg.compile(ours)
    with dg.no_grad(), torch.no_grad():
        got = compiled(dg.tensor(x)).numpy()
        eager = ours(dg.tensor(x)).numpy()
        want = ref(torch.tensor(x)).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    packed = [n for n in compiled.optimized_graph.nodes if n.op is LINEAR_PACKED]
    rows = shape[0] * shape[1]
    assert len(packed) == sum(linear_packed.constant_wins(rows, k, n)
                              for k, n in ((64, 128), (128, 64), (64, 33)))
    assert shape != (3, 65) or len(packed) == 2 * (isa.vector_registers() >= 32)


def test_training_keeps_its_weights():
    """A training step's weights are inputs, not constants: no packing, eager's gradients."""
    torch.manual_seed(0)
    model = _block(dg, 64, 128, True)
    x = dg.tensor(np.random.default_rng(0).standard_normal((8, 64)).astype(F))

    def step(fn):
        model.zero_grad()
        fn(x).square().mean().backward()
        return [p.grad.numpy().copy() for p in model.parameters()]
    compiled = dg.compile(model)
    got, want = step(compiled), step(model)
    assert not any(n.op is LINEAR_PACKED for n in compiled._last.graph.nodes)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["read elsewhere", "narrow", "partial panel", "float64",
                                  "few rows", "few multiply-adds"])
def test_the_rule_leaves_alone(case):
    """A weight something else reads (a copy would double it), fewer than 32 outputs,
    outputs not a multiple of 64 (a partial panel: OpenBLAS is faster), float64, fewer than ``MIN_ROWS`` static rows and fewer than ``MIN_MACS`` multiply-adds
    keep their ``linear``; 8 rows of 256 inputs and 128 outputs would be packed."""
    assert linear_packed.wanted(8, 256, 128) == (isa.vector_registers() >= 32)
    rows = {"few rows": 5, "few multiply-adds": 7}.get(case, 8)
    n = {"narrow": 20, "partial panel": 96}.get(case, 128)
    dtype = "float64" if case == "float64" else "float32"
    k = 16 if case == "few multiply-adds" else 256
    g = Graph()
    x = g.add_input((rows, k), dtype, name="x")
    w = g.add_constant(np.linspace(-1, 1, n * k).reshape(n, k).astype(dtype), name="w")
    (y,) = g.add_node("linear", [x, w], names=["y"])
    outputs = [y]
    if case == "read elsewhere":
        outputs.append(g.add_node("neg", [w], names=["s"])[0])
    g.set_outputs(outputs)
    after, report = passes.linear_packed(g)
    assert not report.changed and [n.op.name for n in after.nodes] == [
        n.op.name for n in g.nodes]


def test_the_rule_packs_symbolic_rows():
    """Rows of a symbolic dim (an import with dynamic batch and sequence) are packed: the
    loop serves any number of them (on a host where the rule packs at all)."""
    from dualgraph.shapes import Sym
    if not linear_packed.wanted(None, 16, 64):
        pytest.skip("no AVX-512 here: the rule packs nothing")
    g = Graph()
    x = g.add_input((Sym("B"), 16), "float32", name="x")
    w = g.add_constant(np.linspace(-1, 1, 64 * 16).reshape(64, 16).astype(F), name="w")
    (y,) = g.add_node("linear", [x, w], names=["y"])
    g.set_outputs([y])
    after, report = passes.linear_packed(g)
    assert report.changed and [n.op.name for n in after.nodes] == ["linear_packed"]


def test_each_output_is_one_chain_of_multiply_adds_over_k_in_order():
    """Inputs taken ``DEPTH`` steps of K at a time (the partial sums stored and taken up
    again) give the bits of one fused multiply-add after another over k = 0 .. K-1 (here
    worked out in float64: a float32 product is exact there and, on this data, the sum
    rounds as a fused multiply-add does), then the bias."""
    rows, k, n = 13, 2 * linear_packed.DEPTH + 44, 70
    x, w, b = _data(rows, k, n, seed=3)
    got = linear_packed.product(x, linear_packed.pack(w), n, b)
    sums = np.zeros((rows, n), F)
    for j in range(k):
        sums = (x[:, j, None].astype(np.float64) * w[:, j].astype(np.float64)
                + sums).astype(F)
    np.testing.assert_array_equal(got, sums + b)


# -- a trained layer's product, its weight packed at each call (``linear_packed.per_call``) ---
# rows, K, N, whether the forward product is taken and whether the backward's input
# gradient (a sum over N) is: a short sum, a narrow product's long sum (N at most 128, from
# 256 rows), or left to the BLAS (a long wide sum, partial panels, few rows or multiply-adds)
PER_CALL = [(1024, 32, 512, True, False), (64, 128, 64, True, True),
            (13, 192, 128, True, True), (1024, 256, 64, True, True),
            (512, 512, 128, True, True), (128, 512, 128, False, True),
            (256, 256, 256, False, False), (300, 100, 100, False, False),
            (6, 16, 64, False, False)]


def _spy(monkeypatch):
    """The number of products the packed loop ran (through ``linear_packed.product``)."""
    calls = []
    product = linear_packed.product
    monkeypatch.setattr(linear_packed, "product",
                        lambda *a, **k: calls.append(a[0].shape) or product(*a, **k))
    return calls


@pytest.mark.parametrize("rows,k,n,forward,backward", PER_CALL, ids=str)
def test_trained_linear_packed_per_call_matches_torch(rows, k, n, forward, backward,
                                                      monkeypatch):
    """Eager ``linear`` forward and backward on a weight that needs its gradient: the
    products ``per_call`` takes run packed (counted), the others the BLAS; values and
    gradients agree with torch either way, a 3-D transposed input included."""
    calls = _spy(monkeypatch)
    x, w, b = _data(rows, k, n, seed=5)
    g = np.random.default_rng(1).standard_normal((rows, n)).astype(F)
    ours = [dg.tensor(a, requires_grad=True) for a in (x, w, b)]
    ref = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = dg.nn.functional.linear(*ours)
    (y * dg.tensor(g)).sum().backward()
    want = torch.nn.functional.linear(*ref)
    (want * torch.tensor(g)).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-5 * np.sqrt(max(k, rows)))
    np.testing.assert_allclose(y.detach().numpy(), want.detach().numpy(), **tol)
    for a, t in zip(ours, ref, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), **tol)
    taken = linear_packed.per_call(rows, k, n), linear_packed.per_call(rows, n, k)
    assert len(calls) == sum(taken) and taken == (forward, backward)
    x3 = dg.tensor(x.reshape(1, rows, k)).transpose(0, 1)       # (rows, 1, K), strided
    np.testing.assert_allclose(dg.nn.functional.linear(x3, *ours[1:]).detach().numpy(),
                               want.detach().numpy()[:, None], **tol)


def test_packed_per_call_carries_nan_and_inf_as_torch():
    """A NaN or an infinity in a row of the input gives that row's outputs as torch's."""
    x, w, b = _data(1024, 32, 512, seed=6)
    x[3, 5], x[700, 0], x[701, 31] = np.nan, np.inf, -np.inf
    assert linear_packed.per_call(1024, 32, 512)
    got = dg.nn.functional.linear(dg.tensor(x), dg.tensor(w), dg.tensor(b)).numpy()
    want = torch.nn.functional.linear(*(torch.tensor(a) for a in (x, w, b))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert np.isnan(got[3]).all() and np.isinf(got[700]).all()


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("rows", [1024, 5])
def test_compiled_training_step_runs_eager_products(relu, rows):
    """A compiled training step of ``Linear(32, 512)`` (a 2-D product: the specialised
    kernel, ``linear_relu`` with the relu) and ``Linear(512, 64)`` on a 3-D input: the
    same loops as eager, so the loss is eager's to the bit; the gradients agree."""
    torch.manual_seed(rows)
    model = dg.nn.Sequential(dg.nn.Linear(32, 512), *([dg.nn.ReLU()] if relu else []))
    head = dg.nn.Linear(512, 64)
    x = dg.tensor(np.random.default_rng(rows).standard_normal((rows, 32)).astype(F))

    def step(x):
        return head(model(x).reshape(rows, 1, 512).transpose(0, 1)).square().mean()

    def grads(fn):
        for p in (*model.parameters(), *head.parameters()):
            p.grad = None
        loss = fn(x)
        loss.backward()
        return loss.detach().numpy(), [p.grad.numpy().copy() for p in (*model.parameters(),
                                                               *head.parameters())]
    compiled = dg.compile(step)
    got, want = grads(compiled), grads(step)
    np.testing.assert_array_equal(got[0], want[0])
    for a, e in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)
