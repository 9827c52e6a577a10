"""Differential test of the compiler on generated transformers at real widths.

``test_generated_models.py`` draws sequence models of width 8-16 over five steps, which
never reach what the compiler chooses for real networks: the packed linear loop (and its
per-call rule for weights that change), attention fusion, norm fusion (LayerNorm after a
linear, RMSNorm written by hand), linear epilogues and joined projections. This grammar
draws transformers at the sizes those rules are chosen for: widths 32-800 (16k +- 1 among
them), 1-16 heads of 8-80 (not only powers of two, the attention's width apart from the
model's), sequences 1-200, batch 1-16; token ids through an embedding (tied to the output
or not) or floats; learned, sinusoidal or rotary positions; 1-3 blocks, pre- or
post-norm, ``nn.LayerNorm`` or LayerNorm/RMSNorm written by hand; attention by
``F.scaled_dot_product_attention``, by a hand-written softmax or by
``nn.MultiheadAttention`` (``batch_first`` both ways), with causal or padding masks (bool
or additive, ``-inf`` or a large negative), cross-attention to a memory, a KV cache passed
in and returned; MLPs with exact or tanh GELU, ReLU, SiLU or SwiGLU; dropout (eval);
residual scalings.

Each model is built twice from one description, with dualgraph and with torch, and given
one random state. In eval mode under ``no_grad`` on one or two threads: ``dg.compile``
must match eager (float32, ``capture/check.py``'s tolerance: rtol 1e-4, atol 1e-5 plus
1e-4 x the value's largest element), eager must match torch (the same tolerance), and
torch's ONNX export (``dynamo=False``) loaded by ``dg.onnx.load`` must match torch. Every
third seed also trains: two AdamW steps with ``clip_grad_norm_`` in one function, compiled
against eager, in float64 (rtol 1e-6: a float32 gradient that is zero in exact arithmetic,
such as a key projection's bias under softmax, is rounding noise whose sign AdamW's first
step turns into a whole step of ``lr``), or in float32 comparing losses and gradients
(the packed per-call rule runs on float32 only).

CI runs ``DG_TFM_EXAMPLES`` seeds from ``DG_TFM_FIRST`` (default 3 from 0). A campaign::

    PYTHONPATH=$PWD python -m tests.test_generated_transformers --seeds 0:500

prints each failing seed with its traceback, then how often each lowering rule fired and
each kernel was called in the compiled code (and the packed linear loop's calls, by its
constant or per-call packing), so a campaign shows which paths it reached; ``--seed 17``
prints one model's description; a campaign stopped by SIGTERM prints what it reached.
"""
from __future__ import annotations

import collections
import math
import os
import random
import re
import signal
import sys
import warnings

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.capture.check import _close

try:   # (pytest puts tests/ on the path; python -m tests.<module> does not)
    from fuzzing import campaign, campaign_parser, chosen_seeds
    from test_generated_cnns import assert_close, reached, using_cores
except ImportError:
    from tests.fuzzing import campaign, campaign_parser, chosen_seeds
    from tests.test_generated_cnns import assert_close, reached, using_cores

EXAMPLES = int(os.environ.get("DG_TFM_EXAMPLES", "3"))
FIRST = int(os.environ.get("DG_TFM_FIRST", "0"))
# The most float32 elements of one activation (tokens x width) and of one attention's
# scores (batch x heads x queries x keys): the CPU time of the runs of each model
TOKENS_BUDGET = 16 * 1024
SCORES_BUDGET = 64 * 1024
VOCAB = 97
CLASSES = 7
HITS: collections.Counter = collections.Counter()   # what a campaign's models reached


# -- the description ----------------------------------------------------------------------

def real_width(r, low=32, high=800):
    """A width of 16k +- 1 (or 16k) between ``low`` and ``high``."""
    k = r.randint(max(1, low // 16), high // 16)
    return max(low, min(high, 16 * k + r.choice([-1, 0, 0, 1])))


def heads_of(r, d):
    """(heads, head width) for a model of width ``d`` where the attention's width must be
    ``d`` (``nn.MultiheadAttention``): the most heads up to 16 that divide it, or fewer."""
    fits = [h for h in range(1, 17) if d % h == 0 and 8 <= d // h <= 80] or [1]
    h = r.choice(fits)
    return h, d // h


def describe(seed: int) -> dict:
    """The drawn model, as a dict of plain values (``text`` prints it)."""
    r = random.Random(seed)
    d = real_width(r)
    tokens = r.random() < 0.5
    batch = r.choice([1, 1, 2, 3, 4, 8, 16])
    seq = r.choice([1, 2, 3, 7, 8, 16, 17, 31, 32, 33, 64, 100, 128, 200])
    while batch * seq * d > TOKENS_BUDGET and batch > 1:
        batch //= 2
    while batch * seq * d > TOKENS_BUDGET:
        seq //= 2
    decode = r.random() < 0.2
    past = r.choice([1, 5, 16, 33]) if decode else 0
    cross = not decode and r.random() < 0.25
    memory = r.choice([1, 4, 9, 32]) if cross else 0
    mask = r.choice(["none", "causal_bool", "causal_add", "causal_flag", "pad_bool",
                     "pad_add", "pad_inf"])
    attn = r.choice(["sdpa", "sdpa", "hand", "hand", "mha_bf", "mha_tf"])
    if decode and attn.startswith("mha"):
        attn = "sdpa"
    if attn.startswith("mha"):
        heads, hd = heads_of(r, d)
        if mask == "causal_flag":
            mask = "causal_bool"
    else:
        heads, hd = r.randint(1, 16), r.choice([8, 12, 16, 24, 31, 32, 33, 40, 48, 64, 80])
        while heads * hd > 2 * d and heads > 1:
            heads -= 1
    keys = past + seq
    while batch * heads * seq * max(keys, memory) > SCORES_BUDGET and heads > 1:
        heads -= 1
    positions = r.choice(["none", "learned", "sinusoidal", "rotary"])
    if positions == "rotary" and (hd % 2 or attn.startswith("mha")):
        positions = "learned"
    blocks = []
    for _ in range(r.randint(1, 3)):
        mlp = r.choice(["gelu", "gelu_tanh", "relu", "silu", "swiglu"])
        hidden = (r.choice([2, 4]) * d if r.random() < 0.5
                  else real_width(r, d, min(4 * d, 1600)))
        blocks.append({
            "norm": r.choice(["layer", "hand_layer", "hand_rms"]),
            "order": r.choice(["pre", "post"]), "mlp": mlp, "hidden": hidden,
            "qkv": r.choice(["separate", "joined"]), "bias": r.random() < 0.7,
            "scale": r.choice([None, None, 0.5, round(1 / math.sqrt(6), 4)]),
            "dropout": r.choice([0.0, 0.1]), "cross": cross and r.random() < 0.7})
    if cross and not any(b["cross"] for b in blocks):
        blocks[0]["cross"] = True
    # two more calls of fewer rows (a retrace, then the graph of symbolic dims)
    shapes = [(batch, seq)] + [(r.randint(1, batch), r.randint(1, seq)) for _ in "ab"]
    head = (r.choice(["tied", "classes", "classes_last"]) if tokens
            else r.choice(["sequence", "classes"]))
    return {"seed": seed, "d": d, "tokens": tokens, "batch": batch, "seq": seq,
            "shapes": shapes,
            "past": past, "memory": memory, "mask": mask, "attn": attn, "heads": heads,
            "hd": hd, "positions": positions, "blocks": blocks, "head": head,
            "final_norm": r.random() < 0.7, "cores": r.choice([1, 2]),
            "train": ["none", "none", "float64", "float32"][seed % 3 + (seed % 6 == 5)]}


def text(desc: dict) -> str:
    blocks = desc["blocks"]
    top = {k: v for k, v in desc.items() if k != "blocks"}
    return f"{top}\n" + "\n".join(f"  block {i}: {b}" for i, b in enumerate(blocks))


# -- building the description with a library (torch or dualgraph) ----------------------------

def tables(desc):
    """The positions' constant tables (float32 NumPy): sinusoidal (T, d) or rotary cos/sin
    (T, hd), for every position the model reads (the past ones too)."""
    n = desc["past"] + desc["seq"]
    pos = np.arange(n, dtype=np.float64)[:, None]
    if desc["positions"] == "sinusoidal":
        d = desc["d"]
        freq = np.exp(-math.log(10000.0) * (np.arange(0, d, 2) / d))
        out = np.zeros((n, d))
        out[:, 0::2] = np.sin(pos * freq)
        out[:, 1::2] = np.cos(pos * freq)[:, :d // 2]
        return {"table": out.astype(np.float32)}
    hd = desc["hd"]
    freq = 1.0 / 10000.0 ** (np.arange(0, hd, 2) / hd)
    angles = np.concatenate([pos * freq] * 2, axis=1)
    return {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}


def build(desc, lib, training=False):
    """The description as ``lib``'s module (``lib``: ``torch`` or ``dualgraph``);
    ``forward(*inputs(desc))`` returns the output, or with a KV cache the output and each
    block's keys and values."""
    nn, F = lib.nn, lib.nn.functional
    d, heads, hd = desc["d"], desc["heads"], desc["hd"]
    past, seq = desc["past"], desc["seq"]

    class Norm(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind
            if kind == "layer":
                self.ln = nn.LayerNorm(d, eps=1e-5)
            else:
                self.weight = nn.Parameter(lib.ones(d))
                self.bias = nn.Parameter(lib.zeros(d)) if kind == "hand_layer" else None

        def forward(self, x):
            if self.kind == "layer":
                return self.ln(x)
            if self.kind == "hand_rms":
                return x * lib.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
            mu = x.mean(-1, keepdim=True)
            var = ((x - mu) * (x - mu)).mean(-1, keepdim=True)
            return (x - mu) / lib.sqrt(var + 1e-5) * self.weight + self.bias

    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        turned = lib.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + turned * sin

    def masked_scores(scores, keep, causal_keys):
        """The scores with the description's mask, hand-written (bool or additive)."""
        kind = desc["mask"]
        if kind.startswith("causal"):
            t = scores.shape[-2]
            future = lib.ones(t, causal_keys, dtype=lib.bool).triu(causal_keys - t + 1)
            if kind == "causal_add":
                return scores + lib.zeros(t, causal_keys).masked_fill(future, float("-inf"))
            return scores.masked_fill(future, float("-inf"))
        if kind.startswith("pad"):
            drop = ~keep[:, None, None, :]
            if kind == "pad_bool":
                return scores.masked_fill(drop, -1e9)
            fill = float("-inf") if kind == "pad_inf" else -1e4
            return scores + lib.zeros(drop.shape).masked_fill(drop, fill)
        return scores

    def sdpa_mask(keep, t, s):
        """(attn_mask, is_causal) for ``F.scaled_dot_product_attention``."""
        kind = desc["mask"]
        if kind == "causal_flag" and t == s:
            return None, True
        if kind.startswith("causal"):
            allowed = lib.ones(t, s, dtype=lib.bool).tril(s - t)
            if kind == "causal_add":
                return lib.zeros(t, s).masked_fill(~allowed, float("-inf")), False
            return allowed, False
        if kind.startswith("pad"):
            allowed = keep[:, None, None, :]
            if kind == "pad_bool":
                return allowed, False
            fill = float("-inf") if kind == "pad_inf" else -1e4
            return lib.zeros(allowed.shape).masked_fill(~allowed, fill), False
        return None, False

    class Attention(nn.Module):
        """Self- (or cross-) attention by its own projections, of width heads x hd."""

        def __init__(self, block, cross):
            super().__init__()
            inner, bias = heads * hd, block["bias"]
            self.joined = block["qkv"] == "joined" and not cross
            self.cross = cross
            if self.joined:
                self.qkv = nn.Linear(d, 3 * inner, bias=bias)
            else:
                self.q = nn.Linear(d, inner, bias=bias)
                self.k = nn.Linear(d, inner, bias=bias)
                self.v = nn.Linear(d, inner, bias=bias)
            self.out = nn.Linear(inner, d, bias=bias)

        def split(self, x):
            return x.reshape(x.shape[0], x.shape[1], heads, hd).transpose(1, 2)

        def forward(self, x, keep, rope, cache, memory):
            if self.joined:
                q, k, v = self.qkv(x).chunk(3, dim=-1)
            else:
                source = memory if self.cross else x
                q, k, v = self.q(x), self.k(source), self.v(source)
            q, k, v = self.split(q), self.split(k), self.split(v)
            if rope is not None and not self.cross:
                cos, sin = rope
                cos, sin = cos[past:past + x.shape[1]], sin[past:past + x.shape[1]]
                q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            if cache is not None:
                k, v = lib.cat([cache[0], k], 2), lib.cat([cache[1], v], 2)
            t, s = q.shape[2], k.shape[2]
            if self.cross:
                y = F.scaled_dot_product_attention(q, k, v)
            elif desc["attn"] == "sdpa":
                mask, causal = sdpa_mask(keep, t, s)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
            else:
                scores = masked_scores(q @ k.transpose(-2, -1) / math.sqrt(hd), keep, s)
                y = lib.softmax(scores, dim=-1) @ v
            y = self.out(y.transpose(1, 2).reshape(x.shape[0], t, heads * hd))
            return y, (k, v)

    class Multihead(nn.Module):
        """``nn.MultiheadAttention`` (``batch_first`` as drawn) with its mask arguments."""

        def __init__(self, block, cross):
            super().__init__()
            self.first = desc["attn"] == "mha_bf"
            self.cross = cross
            self.attn = nn.MultiheadAttention(d, heads, bias=block["bias"],
                                              batch_first=self.first)

        def forward(self, x, keep, rope, cache, memory):
            kv = memory if self.cross else x
            t, kind = x.shape[1], desc["mask"]
            options = {}
            if not self.cross and kind.startswith("causal"):
                future = lib.ones(t, t, dtype=lib.bool).triu(1)
                options["attn_mask"] = (lib.zeros(t, t).masked_fill(future, float("-inf"))
                                        if kind == "causal_add" else future)
            elif not self.cross and kind.startswith("pad"):
                options["key_padding_mask"] = (
                    ~keep if kind == "pad_bool" else lib.zeros(keep.shape).masked_fill(
                        ~keep, float("-inf") if kind == "pad_inf" else -1e4))
            if not self.first:
                x, kv = x.transpose(0, 1), kv.transpose(0, 1)
            y = self.attn(x, kv, kv, need_weights=False, **options)[0]
            return (y if self.first else y.transpose(0, 1)), None

    class Mlp(nn.Module):
        def __init__(self, block):
            super().__init__()
            kind, hidden = block["mlp"], block["hidden"]
            self.kind = kind
            self.up = nn.Linear(d, hidden, bias=block["bias"])
            if kind == "swiglu":
                self.gate = nn.Linear(d, hidden, bias=False)
            self.act = {"gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"),
                        "relu": nn.ReLU(), "silu": nn.SiLU(), "swiglu": nn.SiLU()}[kind]
            self.down = nn.Linear(hidden, d, bias=block["bias"])

        def forward(self, x):
            if self.kind == "swiglu":
                return self.down(self.act(self.gate(x)) * self.up(x))
            return self.down(self.act(self.up(x)))

    attention = Multihead if desc["attn"].startswith("mha") else Attention

    class Block(nn.Module):
        def __init__(self, block):
            super().__init__()
            self.pre, self.scale = block["order"] == "pre", block["scale"]
            self.norm1, self.attn = Norm(block["norm"]), attention(block, False)
            self.norm2, self.mlp = Norm(block["norm"]), Mlp(block)
            self.drop = nn.Dropout(0.0 if training else block["dropout"])
            self.cross = None
            if block["cross"]:
                self.norm3, self.cross = Norm(block["norm"]), attention(block, True)

        def residual(self, x, y):
            y = self.drop(y)
            return x + (y if self.scale is None else self.scale * y)

        def sublayer(self, x, norm, f):
            if self.pre:
                y, kv = f(norm(x))
                return self.residual(x, y), kv
            y, kv = f(x)
            return norm(self.residual(x, y)), kv

        def forward(self, x, keep, rope, cache, memory):
            x, kv = self.sublayer(x, self.norm1,
                                  lambda h: self.attn(h, keep, rope, cache, memory))
            if self.cross is not None:
                x = self.sublayer(x, self.norm3,
                                  lambda h: self.cross(h, keep, None, None, memory))[0]
            return self.sublayer(x, self.norm2, lambda h: (self.mlp(h), None))[0], kv

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            if desc["tokens"]:
                self.embed = nn.Embedding(VOCAB, d)
            if desc["positions"] == "learned":
                self.position = nn.Embedding(past + seq, d)
            elif desc["positions"] != "none":
                for name, value in tables(desc).items():
                    self.register_buffer(name, lib.tensor(value))
            self.blocks = nn.ModuleList([Block(b) for b in desc["blocks"]])
            self.norm = Norm(desc["blocks"][-1]["norm"]) if desc["final_norm"] else None
            if desc["head"].startswith("classes"):
                self.fc = nn.Linear(d, CLASSES)

        def forward(self, x, *extra):
            extra = list(extra)
            keep = extra.pop(0) if desc["mask"].startswith("pad") else None
            memory = extra.pop(0) if desc["memory"] else None
            x = self.embed(x) if desc["tokens"] else x
            kind, rope = desc["positions"], None
            if kind == "learned":
                x = x + self.position(lib.arange(past, past + x.shape[1]))
            elif kind == "sinusoidal":
                x = x + self.table[past:past + x.shape[1]]
            elif kind == "rotary":
                rope = (self.cos, self.sin)
            caches = []
            for i, block in enumerate(self.blocks):
                cache = (extra[2 * i], extra[2 * i + 1]) if past else None
                x, kv = block(x, keep, rope, cache, memory)
                caches += list(kv) if past else []
            if self.norm is not None:
                x = self.norm(x)
            head = desc["head"]
            if head == "tied":
                x = F.linear(x, self.embed.weight)
            elif head == "classes":
                x = self.fc(x.mean(1))
            elif head == "classes_last":
                x = self.fc(x[:, -1])
            return (x, *caches) if past else x

    return Model()


def state(reference, seed):
    """A random state for ``reference``'s parameters (float32 arrays): linear weights of
    Glorot's scale, norms' scales near 1 and biases near 0, embeddings of unit spread."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, value in reference.state_dict().items():
        shape = tuple(value.shape)
        if value.dtype != torch.float32 or key.endswith(("table", "cos", "sin")):
            continue
        if "embed" in key or "position" in key:
            v = rng.standard_normal(shape)
        elif len(shape) >= 2:
            v = rng.standard_normal(shape) * np.sqrt(2.0 / sum(shape))
        elif "norm" in key and key.endswith("weight"):
            v = rng.uniform(0.5, 1.5, shape)
        else:
            v = rng.standard_normal(shape) * 0.2
        out[key] = v.astype(np.float32)
    return out


def inputs(desc, seed, n=None, t=None) -> list[np.ndarray]:
    """The model's inputs (``n`` rows of ``t`` steps, or the description's): ids or
    floats, the padding mask's kept keys (True: attended; the first row keeps all), the
    memory, each block's cached keys and values."""
    rng = np.random.default_rng(seed)
    n, t, d = n or desc["batch"], t or desc["seq"], desc["d"]
    x = (rng.integers(0, VOCAB, (n, t)) if desc["tokens"]
         else rng.standard_normal((n, t, d)).astype(np.float32))
    out = [x]
    if desc["mask"].startswith("pad"):
        keys = desc["past"] + t
        lengths = rng.integers(1, keys + 1, n)
        lengths[0] = keys
        out.append(np.arange(keys)[None, :] < lengths[:, None])
    if desc["memory"]:
        out.append(rng.standard_normal((n, desc["memory"], d)).astype(np.float32))
    for _ in range(len(desc["blocks"]) if desc["past"] else 0):
        for _ in "kv":
            out.append(rng.standard_normal((n, desc["heads"], desc["past"], desc["hd"]))
                       .astype(np.float32))
    return out


# -- the checks ---------------------------------------------------------------------------

def as_list(values):
    return list(values) if isinstance(values, (tuple, list)) else [values]


def twins(desc):
    """The torch reference and the dualgraph model, with one random state."""
    reference = build(desc, torch).eval()
    weights = state(reference, desc["seed"])
    reference.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=False)
    model = build(desc, dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in weights.items()}, strict=False)
    return reference, model, weights


def check_inference(desc, reference, model, tmp_path=None) -> int:
    """Compiled against eager and eager against torch, under ``no_grad`` in eval mode, on
    the description's three shapes; torch's ONNX export through ``dg.onnx.load`` against
    torch, on the first shape."""
    description = text(desc)
    compiled = dg.compile(model)
    calls = [inputs(desc, desc["seed"] + i, *shape) for i, shape in enumerate(desc["shapes"])]
    with torch.no_grad(), dg.no_grad(), using_cores(desc["cores"]):
        for call, xs in enumerate(calls):
            want = as_list(reference(*map(torch.tensor, xs)))
            eager = as_list(model(*map(dg.tensor, xs)))
            got = as_list(compiled(*map(dg.tensor, xs)))
            for i, (w, e, g) in enumerate(zip(want, eager, got)):
                assert_close(e.numpy(), w.numpy(), f"call {call} output {i}: eager vs torch",
                             description)
                assert_close(g.numpy(), e.numpy(), f"call {call} output {i}: compiled vs "
                             "eager", description)
        HITS.update(reached(compiled))
        summary = compiled.explain().splitlines()[0]   # (a break runs a part eagerly)
        HITS["graph breaks"] += int(re.search(r"(\d+) graph break", summary).group(1))
        folder = tmp_path or os.environ.get("TMPDIR", "/tmp")
        path = os.path.join(str(folder), f"tfm_{os.getpid()}_{desc['seed']}.onnx")
        with torch.enable_grad():   # (no_grad's fast path of MultiheadAttention: no ONNX)
            torch.onnx.export(reference, tuple(map(torch.tensor, calls[0])), path,
                              dynamo=False, input_names=[f"x{i}" for i in range(len(calls[0]))])
        try:
            loaded = dg.onnx.load(path)
        finally:
            os.remove(path)
        xs = inputs(desc, desc["seed"] + 7)
        want = as_list(reference(*map(torch.tensor, xs)))
        got = as_list(loaded(*map(dg.tensor, xs)))
        for i, (w, g) in enumerate(zip(want, got)):
            assert_close(g.numpy(), w.numpy(), f"output {i}: dg.onnx.load vs torch",
                         description)
    return 2 * len(calls) + 1


def loss_of(desc, output, target):
    """A scalar loss of the model's (first) output: cross-entropy for logits, the mean
    square for a sequence."""
    F = dg.nn.functional
    if desc["head"] == "sequence":
        return (output * output).mean()
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))


def check_training(desc, weights) -> int:
    """Two AdamW steps (``clip_grad_norm_``) of a train-mode copy, compiled against eager:
    float64 losses and parameters (rtol 1e-6), or float32 losses and gradients."""
    description = text(desc)
    dtype = getattr(dg, desc["train"])
    models, steps = [], []
    for _ in range(2):
        model = build(desc, dg, training=True).train()
        model.load_state_dict({k: dg.tensor(v) for k, v in weights.items()}, strict=False)
        model.to(dtype)
        opt = dg.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

        def step(*xs, model=model, opt=opt):   # (the last argument: the targets)
            opt.zero_grad()
            out = model(*xs[:-1])
            loss = loss_of(desc, out[0] if isinstance(out, tuple) else out, xs[-1])
            loss.backward()
            dg.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss

        models.append(model)
        steps.append(step)
    steps[1] = dg.compile(steps[1])
    rtol = 1e-6 if desc["train"] == "float64" else 1e-4
    with using_cores(desc["cores"]):
        for call in range(2):
            xs = inputs(desc, desc["seed"] + 10 + call)
            n = desc["batch"] * (desc["seq"] if desc["head"] == "tied" else 1)
            target = np.random.default_rng(call).integers(
                0, VOCAB if desc["head"] == "tied" else CLASSES, n)
            args = [dg.tensor(x, dtype=dtype) if x.dtype == np.float32 else dg.tensor(x)
                    for x in xs] + [dg.tensor(target)]
            losses = [float(step(*args)) for step in steps]
            np.testing.assert_allclose(losses[1], losses[0], rtol=rtol,
                                       err_msg=f"step {call}: loss\n{description}")
    eager, compiled = (dict(m.named_parameters()) for m in models)
    for name, value in eager.items():
        if desc["train"] == "float64":
            np.testing.assert_allclose(compiled[name].detach().numpy(), value.detach().numpy(), rtol=1e-6,
                                       atol=1e-9, err_msg=f"{name}\n{description}")
        else:   # (float32: the last step's clipped gradients, near the largest one's size)
            assert_close(compiled[name].grad.numpy(), value.grad.numpy(),
                         f"{name}'s gradient", description)
    return 2


def check(seed: int, tmp_path=None) -> int:
    """Seed ``seed``'s model through every comparison; returns the comparisons made."""
    desc = describe(seed)
    reference, model, weights = twins(desc)
    done = check_inference(desc, reference, model, tmp_path)
    if desc["train"] != "none":
        done += check_training(desc, weights)
    return done


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("seed", range(FIRST, FIRST + EXAMPLES))
def test_generated_transformer_matches_eager_and_torch(seed, tmp_path):
    check(seed, tmp_path)


def counting_packed():
    """Count in ``HITS`` the packed linear loop's calls: on a weight packed once (the
    lowering rule's) or at each call (``per_call``'s choice, eager's and compiled's)."""
    from dualgraph.kernels import linear_packed
    product, per_call = linear_packed.product, linear_packed.per_call

    def counted_product(*args, **kwargs):
        HITS["linear_packed product"] += 1
        return product(*args, **kwargs)

    def counted_per_call(rows, k, n):
        taken = per_call(rows, k, n)
        if taken:
            narrow = k > linear_packed.PER_CALL_DEPTH
            HITS["linear_packed per call" + (" (narrow)" if narrow else " (short sum)")] += 1
        return taken

    linear_packed.product, linear_packed.per_call = counted_product, counted_per_call


def main(argv=None) -> int:
    """The long campaign: ``--seeds 0:500`` (or ``--seed 17``); prints each failure and
    what the models reached."""
    args = campaign_parser(__doc__.splitlines()[0], EXAMPLES).parse_args(argv)
    warnings.simplefilter("ignore")   # (torch's exporter's deprecation and folding notes)
    counting_packed()

    def announced(seed):   # (a crash of the process names its seed)
        print(f"seed {seed}", flush=True)
        return check(seed)

    def stop(signum, frame):   # (a campaign cut short still says what it reached)
        raise SystemExit(f"stopped by signal {signum} during the last seed announced")

    signal.signal(signal.SIGTERM, stop)
    try:
        return campaign(chosen_seeds(args, lambda seed: (text(describe(seed)),)), announced,
                        NotImplementedError)
    finally:
        for what, count in sorted(HITS.items()):
            print(f"{count:6d}  {what}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
