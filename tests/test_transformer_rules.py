"""Transformer inference under the lowering rules, on shapes outside the benchmark suite:
the attention kernel against torch (heads 1, 3 and 12; sequences 1, 7 and 129; additive,
causal and padding masks, rows with every key masked), and small Hugging-Face-style
encoders (separate q/k/v linears, post- or pre-norm, RMSNorm) compiled and loaded from
torch's ONNX export, against eager dualgraph, torch and onnxruntime, with the rules
``constant_linears``, ``join_linears``, ``linear_norm`` and ``fuse_attention`` firing."""
import math

import numpy as np
import pytest
import torch

import dualgraph as dg
from benchmarks.unseen_transformers import rms_norm
from dualgraph.ops.attention import ATTENTION


def _heads(batch, heads, seq, width, rng):
    """q, k, v as a projection's strided head views (batch, heads, seq, width)."""
    qkv = rng.standard_normal((batch, seq, 3, heads, width)).astype(np.float32)
    return qkv.transpose(2, 0, 3, 1, 4)


@pytest.mark.parametrize("batch,heads,seq,mask", [
    (1, 1, 1, "none"), (3, 3, 7, "causal"), (1, 12, 129, "additive"), (3, 1, 129, "padding"),
    (1, 3, 7, "all-masked"), (3, 12, 1, "padding"), (1, 3, 129, "causal")])
def test_attention_kernel_equals_torch(batch, heads, seq, mask):
    rng = np.random.default_rng(seq + heads)
    q, k, v = _heads(batch, heads, seq, 8 if heads == 12 else 5, rng)
    attrs = dict(scale=0.3, divide=False, fill=None, heads_out=True)
    extra, tmask = [], None
    if mask == "additive":        # broadcast over the heads
        m = rng.standard_normal((batch, 1, seq, seq)).astype(np.float32)
        extra, tmask = [m], torch.tensor(m)
    elif mask in ("causal", "all-masked", "padding"):
        m = np.triu(np.ones((seq, seq), bool), 1)[None, None]
        if mask == "padding":     # the last keys of each sequence; a row of one key keeps it
            m = np.zeros((batch, 1, 1, seq), bool)
            m[:, :, :, max(1, seq - 2):] = True
        if mask == "all-masked":  # the first query sees no key: torch gives NaN there
            m = np.broadcast_to(m, (batch, heads, seq, seq)).copy()
            m[:, :, 0, :] = True
        extra, attrs["fill"] = [m], float("-inf")
        tmask = torch.zeros(m.shape).masked_fill(torch.tensor(m), float("-inf"))
    got = dg.dispatch.apply(ATTENTION, *[dg.tensor(np.ascontiguousarray(a))
                                         for a in (q, np.swapaxes(k, -1, -2), v)],
                            *[dg.tensor(a) for a in extra], **attrs).numpy()
    tq, tk, tv = (torch.tensor(np.ascontiguousarray(a)) for a in (q, k, v))
    s = tq @ tk.transpose(-1, -2) * 0.3
    want = ((s if tmask is None else s + tmask).softmax(-1) @ tv).transpose(1, 2).numpy()
    assert got.shape == want.shape == (batch, seq, heads, v.shape[-1])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any() == (mask == "all-masked")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_attention_kernel_plans_by_layout():
    """The kernel works out a plan once per kind of call (shapes and strides): calls of one
    shape with operands laid out otherwise (contiguous, strided head views, heads of 24
    and 64 wide), with and without a mask, in turns, each equal torch's."""
    rng = np.random.default_rng(5)
    cases = []
    for width in (24, 64):
        q, k, v = _heads(2, 3, 9, width, rng)
        cases += [(q, k, v), tuple(np.ascontiguousarray(a) for a in (q, k, v))]
    mask = rng.standard_normal((2, 1, 9, 9)).astype(np.float32)
    for _ in range(2):
        for (q, k, v), masked in ((c, m) for c in cases for m in (False, True)):
            got = ATTENTION.kernel(q, np.swapaxes(k, -1, -2), v, *([mask] if masked else []),
                                   scale=0.5, divide=True, fill=None, heads_out=False)
            tq, tk, tv = (torch.tensor(np.ascontiguousarray(a)) for a in (q, k, v))
            s = tq @ tk.transpose(-1, -2) / 0.5 + (torch.tensor(mask) if masked else 0)
            np.testing.assert_allclose(got, (s.softmax(-1) @ tv).numpy(), rtol=1e-5,
                                       atol=1e-5)


@pytest.mark.parametrize("batch,heads,seq,width,mask,ahead_bytes", [
    (16, 4, 128, 64, "padding", None),    # 6 MiB of operands: past AHEAD_BYTES
    (16, 3, 197, 64, "none", None),
    (2, 5, 77, 24, "causal", 0),          # rows of 96 bytes: lines cut across row starts
    (1, 1, 7, 5, "additive", 0)])
def test_attention_kernel_prefetching_gives_the_same_bits(batch, heads, seq, width, mask,
                                                          ahead_bytes, monkeypatch):
    """Head blocks that prefetch the next block's operands (``AHEAD``: strided head views
    of a projection, and contiguous ones, whose ``kt`` the BLAS reads untransposed) give
    the bits of the blocks that do not, and torch's values (float32, 1e-5)."""
    from dualgraph.kernels import attention
    rng = np.random.default_rng(seq)
    q, k, v = _heads(batch, heads, seq, width, rng)
    m, tmask, fill = None, 0, None
    if mask == "padding":
        m = np.zeros((batch, 1, 1, seq), bool)
        m[:, :, :, seq - 9:] = True
    elif mask == "causal":
        m = np.triu(np.ones((seq, seq), bool), 1)[None, None]
    if m is not None:
        fill, tmask = float("-inf"), torch.zeros(m.shape).masked_fill(torch.tensor(m),
                                                                        float("-inf"))
    elif mask == "additive":
        m = rng.standard_normal((batch, heads, seq, seq)).astype(np.float32)
        tmask = torch.tensor(m)
    for operands in ((q, np.swapaxes(k, -1, -2), v),
                     tuple(np.ascontiguousarray(a) for a in (q, np.swapaxes(k, -1, -2), v))):
        runs = []
        for threshold in (1 << 62, attention.AHEAD_BYTES if ahead_bytes is None
                          else ahead_bytes):
            monkeypatch.setattr(attention, "AHEAD_BYTES", threshold)
            monkeypatch.setattr(attention, "_plans", {})
            runs.append(attention.attend(*operands, m, 0.125, False, fill, True))
            assert attention._plans and next(iter(attention._plans.values())).ahead == (
                threshold != 1 << 62)
        np.testing.assert_array_equal(runs[0], runs[1])
    tq, tk, tv = (torch.tensor(np.ascontiguousarray(a)) for a in (q, k, v))
    want = ((tq @ tk.transpose(-1, -2) * 0.125 + tmask).softmax(-1) @ tv).transpose(1, 2)
    np.testing.assert_allclose(runs[1], want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch,mask_shape,boolean", [
    ((2, 2, 3), (2, 1, 1, 1, 7), False),   # padding mask of the first batch dim only
    ((2, 2, 3), (1, 1, 3, 6, 7), True),    # per head and query, the same for every batch
    ((2, 2, 3), (2, 2, 3, 1, 7), False),   # every batch dim and head, one row for all
    ((2, 3), (6, 1), False),            # broadcast over the keys (copied) and the batch
    ((3,), (3, 6, 7), True),            # one batch dim (the "heads"), a mask per block
    ((), (1, 7), False),                # no batch dims at all
    ((4,), (7,), False)])
def test_attention_kernel_reads_masks_of_every_broadcast(batch, mask_shape, boolean):
    """The kernel reads a mask as it is laid out, (B', H', Q', Lk) with 1 where it
    broadcasts: masks broadcast along some batch dims, the heads, the queries or the keys
    give what the ops one by one give (the kernel's fallback, ``scale`` 1 and not)."""
    rng = np.random.default_rng(len(mask_shape))
    q, v = (rng.standard_normal(batch + (6, 5)).astype(np.float32) for _ in range(2))
    v = np.concatenate([v, v[..., :1, :]], axis=-2)               # 7 keys
    kt = rng.standard_normal(batch + (5, 7)).astype(np.float32)
    mask = (rng.random(mask_shape) < 0.3 if boolean
            else rng.standard_normal(mask_shape).astype(np.float32))
    for scale in (1.0, 0.4):
        attrs = dict(scale=scale, divide=False, fill=-1e4 if boolean else None,
                     heads_out=False)
        got = ATTENTION.kernel(q, kt, v, mask, **attrs)
        tq, tkt, tv, tm = map(torch.tensor, (q, kt, v, mask))
        s = tq @ tkt * scale
        s = s.masked_fill(tm, -1e4) if boolean else s + tm
        np.testing.assert_allclose(got, (s.softmax(-1) @ tv).numpy(), rtol=1e-5, atol=1e-6)


def encoder(lib, width, heads, depth, norm):
    """A Hugging-Face-style encoder: q/k/v as three linears of one input, an additive
    padding mask from the ids (token 0), exact GELU; ``norm`` "post" (BERT's LayerNorm
    after each residual), "pre" (LayerNorm before each branch) or "rms" (T5's RMSNorm by
    ``rsqrt``, no biases, no scale on the scores)."""
    nn = lib.nn
    bias = norm != "rms"

    def layer_norm():
        return rms_norm(lib, width) if norm == "rms" else nn.LayerNorm(width)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(width, width, bias=bias)
                                              for _ in range(4))
            self.up = nn.Linear(width, 2 * width + 1, bias=bias)
            self.down = nn.Linear(2 * width + 1, width, bias=bias)
            self.ln1, self.ln2 = layer_norm(), layer_norm()

        def attend(self, x, mask):
            b, t, c = x.shape
            q, k, v = (f(x).view(b, t, heads, c // heads).transpose(1, 2)
                       for f in (self.q, self.k, self.v))
            s = q @ k.transpose(-1, -2)
            s = (s if norm == "rms" else s / math.sqrt(c // heads)) + mask
            return self.o((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c))

        def forward(self, x, mask):
            ffn = lambda h: self.down(nn.functional.gelu(self.up(h)))
            if norm == "post":
                x = self.ln1(x + self.attend(x, mask))
                return self.ln2(x + ffn(x))
            x = x + self.attend(self.ln1(x), mask)
            return x + ffn(self.ln2(x))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(50, width)
            self.layers = nn.ModuleList([Layer() for _ in range(depth)])

        def forward(self, ids):
            mask = (ids == 0).float()[:, None, None, :] * -1e9
            x = self.tokens(ids)
            for layer in self.layers:
                x = layer(x, mask)
            return x
    return Encoder()


def twins(width, heads, depth, norm, seed):
    torch.manual_seed(seed)
    ref = encoder(torch, width, heads, depth, norm).eval()
    ours = encoder(dg, width, heads, depth, norm).eval()
    ours.load_state_dict({k: dg.tensor(v.detach().numpy()) for k, v in
                          ref.state_dict().items()})
    return ours, ref


def ops_of(graph) -> dict:
    """``{op name: nodes}``, a ``linear_packed`` counted as the op it stands for (the
    ``linear_packed`` rule runs after the rules these tests check)."""
    found = {}
    for node in graph.nodes:
        name = _unpacked_name(node)
        found[name] = found.get(name, 0) + 1
    return found


def _unpacked_name(node) -> str:
    if node.op.name != "linear_packed":
        return node.op.name
    if node.attrs["eps"] is not None:
        return "linear_norm"
    plain = node.attrs["act"] == "none" and len(node.inputs) == 3
    return "linear" if plain else "linear_epilogue"


CASES = [(36, 3, 2, "post", 1, 7), (24, 1, 1, "pre", 3, 129), (48, 12, 2, "rms", 2, 9),
         (30, 3, 1, "post", 1, 1)]


@pytest.mark.parametrize("width,heads,depth,norm,batch,seq", CASES)
def test_encoder_compiled_and_onnx_loaded_equal_torch_and_onnxruntime(
        tmp_path, width, heads, depth, norm, batch, seq):
    ort = pytest.importorskip("onnxruntime")
    ours, ref = twins(width, heads, depth, norm, seq)
    ids = np.random.default_rng(seq).integers(1, 50, (batch, seq))
    ids[-1, max(1, seq - 3):] = 0          # padding at the end of the last sequence
    with torch.no_grad():
        want = ref(torch.tensor(ids)).numpy()
        path = str(tmp_path / "encoder.onnx")
        torch.onnx.export(ref, (torch.tensor(ids),), path, input_names=["ids"],
                          dynamo=False)
    compiled = dg.compile(ours)
    with dg.no_grad():
        got = compiled(dg.tensor(ids)).numpy()
        eager = ours(dg.tensor(ids)).numpy()
    loaded = dg.onnx.load(path)
    from_onnx = loaded(dg.tensor(ids)).numpy()
    runtime = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"ids": ids})[0]
    tol = dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, eager, **tol)
    np.testing.assert_allclose(got, want, **tol)
    np.testing.assert_allclose(from_onnx, runtime, **tol)
    np.testing.assert_allclose(from_onnx, want, **tol)
    for graph in (compiled.optimized_graph, loaded.executable.graph):
        ops = ops_of(graph)
        assert "matmul" not in ops                      # constant_linears (ONNX), attention
        assert ops.get("attention") == depth            # fuse_attention, the padding mask
        assert ops["linear"] == depth                   # join_linears: q, k, v as one
        if norm == "post":                              # linear_norm: every LayerNorm
            assert ops["linear_norm"] == 2 * depth and "layer_norm" not in ops
        if norm == "rms":                               # fuse_rms_norm: every RMSNorm
            assert ops["rms_norm"] == 2 * depth
        layouts = _weights(graph)        # linear_packed where it pays, else weights_kn
        assert layouts and all(v == _layout(node, batch * seq) for node, v in layouts.items())


def test_training_keeps_separate_linears_and_norms():
    """The rules read constant weights: a training step (parameters as inputs) keeps its
    linears and LayerNorms, and its gradients are eager's."""
    ours, _ = twins(36, 3, 1, "post", 0)
    ours.train()
    ids = np.random.default_rng(0).integers(1, 50, (2, 5))

    def step(fn):
        ours.zero_grad()
        loss = fn(dg.tensor(ids)).square().mean()
        loss.backward()
        return [loss.item()] + [p.grad.numpy().copy() for p in ours.parameters()]
    compiled = dg.compile(ours)
    got, want = step(compiled), step(ours)
    ops = ops_of(compiled._last.graph)
    assert "linear_norm" not in ops and ops["layer_norm"] == 2
    assert ops["linear"] + ops["linear_epilogue"] == 6     # (q, k, v not joined)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_frozen_linear_before_a_layer_norm_in_a_training_step():
    """A frozen linear's weight is a constant of the step, so ``linear_norm`` may join it
    with the LayerNorm after it; the norm's backward is then live for its weight's
    gradient though its input gradient is dead, and still reads the linear's output. (Only
    a reader's first output was asked whether it was needed: the linear was dropped and
    building the graph failed with a KeyError.)"""
    def run(compiled):
        dg.manual_seed(0)
        model = dg.nn.Sequential(dg.nn.Linear(12, 24), dg.nn.LayerNorm(24), dg.nn.GELU(),
                                 dg.nn.Linear(24, 4))
        model[0].requires_grad_(False)
        opt = dg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = dg.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        step = dg.compile(step) if compiled else step
        x, y = dg.randn(24, 12), dg.tensor(np.arange(24) % 4)
        return [step(x, y).item() for _ in range(3)] + [p.detach().numpy().copy()
                                                        for p in model.parameters()]
    for got, want in zip(run(True), run(False), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rule,op,shape", [("constant_linears", "matmul", (4, 5)),
                                           ("weights_kn", "linear", (5, 4))])
def test_a_weight_read_elsewhere_is_not_transposed(rule, op, shape):
    """``constant_linears`` leaves a matmul, ``weights_kn`` a linear, whose weight
    something else reads too (a weight tied to an embedding, here a ``neg``): a
    transposed copy would double it."""
    from dualgraph import passes
    from dualgraph.graph import Graph
    g = Graph()
    x = g.add_input((2, 4), "float32", name="x")
    w = g.add_constant(np.linspace(-1, 1, 20, dtype=np.float32).reshape(shape), name="w")
    (y,) = g.add_node(op, [x, w], names=["y"])
    (s,) = g.add_node("neg", [w], names=["s"])
    g.set_outputs([y, s])
    after, report = getattr(passes, rule)(g)
    assert not report.changed and ops_of(after) == ops_of(g)


def _weights(graph):
    """``{linear-like node: how its weight is read}``: "packed" for ``linear_packed``'s
    panels, "kn" where a ``permute`` of a constant makes it (``weights_kn``), "nk" where
    it is the constant itself."""
    found = {}
    for node in graph.nodes:
        if node.op.name == "linear_packed":
            assert node.inputs[1] in graph.constants
            found[node] = "packed"
        elif node.op.name in ("linear", "linear_relu", "linear_epilogue", "linear_norm"):
            w = node.inputs[1]
            permuted = w.producer is not None and w.producer.op.name == "permute"
            assert permuted or w in graph.constants
            found[node] = "kn" if permuted else "nk"
    return found


def _layout(node, rows):
    """The layout the rules give ``node``'s weight for an input of ``rows`` rows (None:
    symbolic): packed where ``linear_packed.constant_wins``, else (K, N) for two rows or
    more."""
    from dualgraph.kernels import linear_packed
    k = node.inputs[0].shape[-1]
    if linear_packed.constant_wins(rows, k, node.outputs[0].shape[-1]):
        return "packed"
    return "kn" if rows is None or rows > 1 else "nk"


@pytest.mark.parametrize("rows", [1, 2, 7])
def test_weights_stored_kn_or_packed_for_products_of_two_rows_or_more(rows):
    """``weights_kn`` stores a frozen linear's weight (K, N) where its input has two rows
    or more, as a column-major view with the same values (an NN product); a product of
    one row (the batch-1 loop reads the weight's rows) keeps it (N, K). Compiled equals
    eager and torch for a linear with and without bias, an epilogue and a ReLU."""
    rng = np.random.default_rng(rows)
    state = {"0.weight": rng.standard_normal((33, 24)), "0.bias": rng.standard_normal(33),
             "2.weight": rng.standard_normal((5, 33)), "3.weight": rng.standard_normal((7, 5))}
    state = {k: v.astype(np.float32) for k, v in state.items()}

    def make(lib):
        nn = lib.nn
        return nn.Sequential(nn.Linear(24, 33), nn.GELU(), nn.Linear(33, 5, bias=False),
                             nn.Linear(5, 7, bias=False), nn.ReLU())
    ours, ref = make(dg), make(torch)
    ours.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    ref.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    x = rng.standard_normal((rows, 24)).astype(np.float32)
    compiled = dg.compile(ours)
    with dg.no_grad(), torch.no_grad():
        got, eager = compiled(dg.tensor(x)).numpy(), ours(dg.tensor(x)).numpy()
        want = ref(torch.tensor(x)).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    layouts = _weights(compiled.optimized_graph)
    assert len(layouts) == 3
    assert all(v == _layout(node, rows) for node, v in layouts.items())


@pytest.mark.parametrize("spelling", ["rsqrt", "functional", "no-weight"])
def test_rms_norm_fused_after_a_residual_equals_eager_and_torch(spelling):
    """RMSNorm of a residual sum (the sum read by nothing else): the rule makes it one
    ``rms_norm``, which the elementwise fusion puts after the add as a row epilogue."""
    rng = np.random.default_rng(3)
    x, r = (rng.standard_normal((3, 7, 67)).astype(np.float32) for _ in range(2))
    w = rng.uniform(0.5, 1.5, 67).astype(np.float32)

    def f(lib, x, r, w):
        s = x + r
        if spelling == "functional":
            return lib.nn.functional.rms_norm(s, (67,), w, 1e-6)
        y = s * lib.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6)
        return y if spelling == "no-weight" else y * w
    args = [dg.tensor(a) for a in (x, r, w)]
    compiled = dg.compile(lambda *a: f(dg, *a))
    got = compiled(*args).numpy()
    eager = f(dg, *args).numpy()
    want = f(torch, *(torch.tensor(a) for a in (x, r, w))).numpy()
    np.testing.assert_array_equal(got, eager)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    fused = [n for n in compiled.optimized_graph.nodes if n.op.name == "fused"]
    assert len(fused) == 1
    assert [n.op.name for n in fused[0].attrs["graph"].nodes] == ["add", "rms_norm"]


@pytest.mark.parametrize("norm", ["post", "rms"])
def test_rules_on_an_import_with_symbolic_batch_and_sequence(tmp_path, norm):
    """An export with dynamic batch and sequence dims: one import serves (2, 9), (3, 5) and
    (1, 1) ids with the rules applied over symbolic shapes, as onnxruntime computes."""
    ort = pytest.importorskip("onnxruntime")
    _, ref = twins(36, 3, 2, norm, 0)
    path = str(tmp_path / "dynamic.onnx")
    ids = np.random.default_rng(0).integers(1, 50, (2, 9))
    torch.onnx.export(ref, (torch.tensor(ids),), path, input_names=["ids"], dynamo=False,
                      dynamic_axes={"ids": {0: "B", 1: "T"}})
    loaded = dg.onnx.load(path)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch, seq in ((2, 9), (3, 5), (1, 1)):
        ids = np.random.default_rng(batch).integers(1, 50, (batch, seq))
        ids[-1, max(1, seq - 2):] = 0
        np.testing.assert_allclose(loaded(dg.tensor(ids)).numpy(),
                                   session.run(None, {"ids": ids})[0], rtol=1e-4, atol=1e-4)
    ops = ops_of(loaded.executable.graph)
    assert ops["linear"] == 2 and "matmul" not in ops
    layouts = _weights(loaded.executable.graph)                       # (symbolic rows)
    assert layouts and all(v == _layout(node, None) for node, v in layouts.items())
    assert ops["linear_norm" if norm == "post" else "rms_norm"] == 4
