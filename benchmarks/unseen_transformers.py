"""Transformers outside the suite (and W10's encoder measured the same way), for inference:
dualgraph (the module ``dg.compile``d and called under ``no_grad``; the torch export loaded
with ``dg.onnx.load``) against onnxruntime (the same export) and torch eager.

``python -m benchmarks.unseen_transformers [--models vit,encoder,bert,gpt,t5]
[--batches 1,16] [--rounds 5] [--threads 1]``. ``vit`` is a ViT-tiny-like model written as
timm writes it (16x16 patches of a 224x224 image by a strided convolution, a class token,
12 pre-LayerNorm blocks of width 192 with 3 heads, the q/k/v heads taken by ``reshape``,
``permute`` and ``unbind``, an exact-GELU MLP of 768, a linear head on the class token);
``encoder`` is W10's post-LayerNorm BERT-style encoder on int64 token ids; ``bert`` a
BERT-style encoder written as Hugging Face writes it (separate q/k/v linears, the scores
divided by sqrt(64), an additive padding mask); ``gpt`` a nanoGPT-style decoder (one q/k/v
linear split in three, the causal mask by ``masked_fill``, tanh GELU, an LM head on every
token); ``t5`` a T5-style pre-norm encoder (RMSNorm spelt with ``rsqrt``, no biases,
unscaled scores, a padding mask); ``distil`` (not run by default) the ``bert`` model with
6 layers of width 384 and 6 heads. The padded models' ids end in padding: row i of a batch
keeps its first 128 - 9 i tokens. The same random weights in both
libraries. ``--threads`` is every engine's thread count (environment variables set before
NumPy loads). Each implementation runs once per round, in turns, after an untimed call of
its own; reported: the best CPU time of a call (``time.process_time``) and the best wall
time, in ms, and each engine's ratio to onnxruntime's CPU time (``unseen_cnns.compare``).
Outputs are compared with torch's. ``--without constant_linears,join_linears`` also runs
dualgraph's two paths without those passes or rules, in the same rounds (a before/after in
one process).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile


def _threads(argv) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_known_args(argv)[0].threads


if __name__ == "__main__":   # before NumPy loads OpenBLAS
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
        os.environ[_name] = str(_threads(sys.argv[1:]))

import numpy as np  # noqa: E402

from .common import random_state  # noqa: E402
# (after NumPy: it sets one thread)
from .unseen_cnns import EXPORTER, EXPORTERS, compare, engines  # noqa: E402


def vit(lib, image=224, patch=16, width=192, depth=12, heads=3, hidden=768, classes=1000):
    """A ViT-tiny-like classifier, its attention written as timm's ``Attention``."""
    nn = lib.nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.scale = (width // heads) ** -0.5

        def forward(self, x):
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            att = (q @ k.transpose(-2, -1)) * self.scale
            x = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
            return self.proj(x)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(width, eps=1e-6)
            self.attn = Attention()
            self.norm2 = nn.LayerNorm(width, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(),
                                     nn.Linear(hidden, width))

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patches = nn.Conv2d(3, width, patch, patch)
            self.cls = nn.Parameter(lib.zeros(1, 1, width))
            self.pos = nn.Parameter(lib.zeros(1, (image // patch) ** 2 + 1, width))
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm = nn.LayerNorm(width, eps=1e-6)
            self.head = nn.Linear(width, classes)

        def forward(self, x):
            x = self.patches(x).flatten(2).transpose(1, 2)
            x = lib.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            x = self.norm(self.blocks(x))
            return self.head(x[:, 0])
    return ViT()


def encoder(lib):
    from .w10_encoder_infer import encoder as w10
    return w10(lib)


VOCAB, SEQ, PAD = 8192, 128, 0


def heads_of(x, heads):
    """(B, T, C) -> (B, heads, T, C / heads), as Hugging Face's ``transpose_for_scores``."""
    b, t, c = x.shape
    return x.view(b, t, heads, c // heads).transpose(1, 2)


def bert(lib, width=256, depth=4, heads=4, hidden=1024):
    """A BERT-style post-LayerNorm encoder written as Hugging Face's ``BertSelfAttention``:
    three separate q/k/v linears on one input, the scores divided by sqrt(head size), and
    an additive padding mask ``(1 - keep) * finfo.min`` made from the ids (token 0 is
    padding); exact-GELU FFN."""
    nn = lib.nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
            self.out = nn.Linear(width, width)
            self.ln1 = nn.LayerNorm(width, eps=1e-12)
            self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width)
            self.act = nn.GELU()
            self.ln2 = nn.LayerNorm(width, eps=1e-12)

        def forward(self, x, bias):
            q, k, v = (heads_of(f(x), heads) for f in (self.query, self.key, self.value))
            att = q @ k.transpose(-1, -2) / math.sqrt(width // heads) + bias
            y = (att.softmax(dim=-1) @ v).permute(0, 2, 1, 3).reshape(x.shape)
            x = self.ln1(self.out(y) + x)
            return self.ln2(self.down(self.act(self.up(x))) + x)

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, width)
            self.positions = nn.Embedding(SEQ, width)
            self.ln = nn.LayerNorm(width, eps=1e-12)
            self.layers = nn.ModuleList([Layer() for _ in range(depth)])

        def forward(self, ids):
            keep = (ids != PAD).float()[:, None, None, :]
            bias = (1.0 - keep) * lib.finfo(lib.float32).min
            x = self.ln(self.tokens(ids) + self.positions(lib.arange(ids.shape[1])))
            for layer in self.layers:
                x = layer(x, bias)
            return x
    return Bert()


def gpt(lib, width=384, depth=6, heads=6):
    """A nanoGPT-style pre-LayerNorm decoder: one q/k/v linear split in three, the causal
    mask by ``masked_fill`` with -inf, tanh-GELU MLP, an untied LM head on every token."""
    nn = lib.nn
    F = lib.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def attend(self, x):
            b, t, c = x.shape
            q, k, v = (heads_of(y, heads) for y in self.qkv(x).split(c, dim=2))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // heads))
            causal = lib.ones(t, t).tril().view(1, 1, t, t)
            att = att.masked_fill(causal == 0, float("-inf"))
            y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)
            return self.proj(y)

        def forward(self, x):
            x = x + self.attend(self.ln1(x))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, width)
            self.positions = nn.Embedding(SEQ, width)
            self.blocks = nn.ModuleList([Block() for _ in range(depth)])
            self.ln = nn.LayerNorm(width)
            self.head = nn.Linear(width, VOCAB, bias=False)

        def forward(self, ids):
            x = self.tokens(ids) + self.positions(lib.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))
    return GPT()


def rms_norm(lib, width):
    """RMSNorm as T5's ``T5LayerNorm`` writes it: the mean of squares, ``rsqrt``, a weight."""
    class RMSNorm(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = lib.nn.Parameter(lib.ones(width))

        def forward(self, x):
            return self.weight * (x * lib.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    return RMSNorm()


def t5(lib, width=256, depth=4, heads=4, hidden=1024):
    """A T5-style pre-norm encoder: RMSNorm written as T5's ``T5LayerNorm`` (the mean of
    squares, ``rsqrt``, a weight), linears without bias, unscaled scores with the additive
    padding mask, a ReLU FFN."""
    nn = lib.nn
    RMSNorm = lambda: rms_norm(lib, width)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = RMSNorm(), RMSNorm()
            self.q, self.k, self.v, self.o = (nn.Linear(width, width, bias=False)
                                              for _ in range(4))
            self.wi = nn.Linear(width, hidden, bias=False)
            self.wo = nn.Linear(hidden, width, bias=False)

        def forward(self, x, bias):
            h = self.norm1(x)
            q, k, v = (heads_of(f(h), heads) for f in (self.q, self.k, self.v))
            att = (q @ k.transpose(3, 2) + bias).softmax(dim=-1)
            x = x + self.o((att @ v).transpose(1, 2).reshape(x.shape))
            return x + self.wo(lib.relu(self.wi(self.norm2(x))))

    class T5(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(VOCAB, width)
            self.layers = nn.ModuleList([Layer() for _ in range(depth)])
            self.norm = RMSNorm()

        def forward(self, ids):
            bias = (ids == PAD).float()[:, None, None, :] * -1e9
            x = self.tokens(ids)
            for layer in self.layers:
                x = layer(x, bias)
            return self.norm(x)
    return T5()


def example(name: str, batch: int, rng) -> np.ndarray:
    if name == "vit":
        return rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
    ids = rng.integers(1, VOCAB, (batch, SEQ)).astype(np.int64)
    if name in ("bert", "t5", "distil"):     # padding: row i keeps its first SEQ - 9 i tokens
        for i in range(batch):
            ids[i, max(1, SEQ - 9 * i):] = PAD
    return ids


def distil(lib):
    """The BERT-style encoder at a DistilBERT-like depth with a MiniLM-like width: 6 layers
    of width 384, 6 heads, FFN 1536 (a shape outside the other models)."""
    return bert(lib, width=384, depth=6, heads=6, hidden=1536)


MODELS = {"vit": vit, "encoder": encoder, "bert": bert, "gpt": gpt, "t5": t5, "distil": distil}


def implementations(name: str, batch: int, threads: int, tmp: str, without=()) -> dict:
    """``{engine: (call, output of one call)}`` for one model and batch size; with
    ``without`` (pass or rule names), the compiled module and the import also run without
    them (``dg_compiled_without``, ``dg_onnx_load_without``), in the same rounds."""
    import torch

    import dualgraph as dg
    torch.set_num_threads(threads)
    dg.set_num_threads(threads)
    x = example(name, batch, np.random.default_rng(0))
    reference = MODELS[name](torch).eval()
    state = random_state(reference, 0)
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model = MODELS[name](dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    impls = engines(reference, model, x, os.path.join(tmp, f"{name}_{batch}.onnx"), threads)
    if without:
        from dualgraph.codegen import Executable
        off = {rule: False for rule in without}
        compiled = dg.compile(model, passes=off)
        imported = Executable(dg.onnx.load(os.path.join(tmp, f"{name}_{batch}.onnx"))
                              .executable.source_graph, passes=off)

        def run_compiled():
            with dg.no_grad():
                return compiled(dg.tensor(x)).numpy()
        impls["dg_compiled_without"] = (run_compiled, run_compiled())
        run_imported = lambda: np.asarray(imported.run([x])[0])
        impls["dg_onnx_load_without"] = (run_imported, run_imported())
    return impls


def measure(name: str, batch: int, threads: int, rounds: int, without=()) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return compare(implementations(name, batch, threads, tmp, without), rounds,
                       threads)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="vit,encoder,bert,gpt,t5")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--without", default="", help="comma-separated passes or rules: "
                        "dualgraph also runs without them, in the same rounds")
    parser.add_argument("--exporter", default="torchscript", choices=EXPORTERS,
                        help="torch's ONNX exporter for onnxruntime and dg.onnx.load")
    args = parser.parse_args(argv)
    EXPORTER[:] = [args.exporter]
    without = [r for r in args.without.split(",") if r]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
          f"{args.threads} thread(s) per engine", flush=True)
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            rows = measure(name, batch, args.threads, args.rounds, without)
            for engine, row in rows.items():
                print(f"{name} batch {batch} {engine}: {row}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
