"""A character-level GPT trained on Python's own standard library, in one file.

    python examples/char_gpt.py                 # 500 steps, about a minute on 2 cores
    python examples/char_gpt.py --steps 2000 --compile

The text is the source of a few stdlib modules (every Python install has them), so the
model learns to write something that looks like Python. The model is nanoGPT's, shrunk:
token + position embeddings, pre-LayerNorm blocks of causal self-attention and a tanh-GELU
MLP, a final LayerNorm and a language-model head tied to the token embedding. It prints the
train and validation loss every ``--eval-interval`` steps and a sample at the end.
``--compile`` captures the whole training step (forward, backward, AdamW update) into one
static graph with ``dg.compile``.
"""
import argparse
import math
import os
import time
from pathlib import Path

# The matrices here are small: BLAS threads cost more than they save, and on a busy
# machine their spinning slows a step down several times. Set before NumPy loads BLAS.
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np

import dualgraph as dg
import dualgraph.nn.functional as F
from dualgraph import nn

# ----------------------------------------------------------------------------- config

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=500, help="optimiser steps")
parser.add_argument("--compile", action="store_true", help="dg.compile the training step")
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--block-size", type=int, default=64, help="context length")
parser.add_argument("--n-layer", type=int, default=2)
parser.add_argument("--n-head", type=int, default=4)
parser.add_argument("--n-embd", type=int, default=64)
parser.add_argument("--no-tie", action="store_true", help="untie the head from the embedding")
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--eval-interval", type=int, default=50)
parser.add_argument("--eval-batches", type=int, default=4)
parser.add_argument("--sample-len", type=int, default=300, help="characters to generate")
parser.add_argument("--temperature", type=float, default=0.8)
parser.add_argument("--seed", type=int, default=1337)
args = parser.parse_args()
dg.manual_seed(args.seed)

# ------------------------------------------------------------------------------- data
# A fixed list of modules, so the text (and the vocabulary) is the same on every run.

STDLIB = Path(os.__file__).parent
MODULES = ["argparse.py", "dataclasses.py", "functools.py", "textwrap.py"]
text = "".join((STDLIB / m).read_text(encoding="utf-8") for m in MODULES)
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
data = np.array([stoi[c] for c in text], dtype=np.int64)
split = int(0.9 * len(data))        # first 90% to train on, the rest to validate
train_data, val_data = data[:split], data[split:]
print(f"{len(text):,} characters from {', '.join(MODULES)}; vocabulary {vocab_size}")


def decode(ids):
    return "".join(chars[i] for i in ids)


def get_batch(source):
    """``batch_size`` random windows of the text; targets are the inputs shifted by one."""
    ix = dg.randint(0, len(source) - args.block_size - 1, (args.batch_size,)).numpy()
    window = ix[:, None] + np.arange(args.block_size)
    return dg.from_numpy(source[window]), dg.from_numpy(source[window + 1])


# ------------------------------------------------------------------------------ model

class CausalSelfAttention(nn.Module):
    """Multi-head attention where position t sees only positions <= t."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)     # q, k, v in one matmul
        self.c_proj = nn.Linear(n_embd, n_embd)
        pos = dg.arange(block_size)
        # a buffer, not a parameter: it moves and saves with the module but never trains
        self.register_buffer("causal", pos[:, None] >= pos[None, :], persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, heads, T, head size): each head attends independently
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
        att = att.masked_fill(~self.causal[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)  # heads side by side again
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU(approximate="tanh")         # GPT-2's GELU
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LayerNorm residual block: normalise, transform, add back."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, tie=True):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.apply(self._init_weights)
        if tie:     # one matrix both reads and writes tokens: fewer parameters, same quality
            self.lm_head.weight = self.wte.weight

    @staticmethod
    def _init_weights(module):
        # GPT-2's init: small normal weights, zero biases
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(dg.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))

    @dg.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0):
        """Extend ``idx`` (B, T) one sampled character at a time."""
        for _ in range(max_new_tokens):
            logits = self(idx[:, -self.block_size:])[:, -1, :]
            probs = F.softmax(logits / temperature, dim=-1)
            # inverse-CDF sampling: the first index whose cumulative probability passes u
            u = dg.rand(idx.shape[0], 1)
            nxt = (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)
            idx = dg.cat([idx, nxt.clamp(max=probs.shape[-1] - 1)], dim=1)
        return idx


model = GPT(vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd,
            tie=not args.no_tie)
n_params = sum(p.numel() for p in model.parameters())
print(f"GPT: {args.n_layer} layers, {args.n_head} heads, {args.n_embd} wide, "
      f"{n_params:,} parameters")

# --------------------------------------------------------------------------- training

optimizer = dg.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)


def train_step(x, y):
    loss = model(x, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


if args.compile:
    train_step = dg.compile(train_step)


@dg.no_grad()
def estimate_loss():
    """Mean loss over a few random batches of each split, in eval mode."""
    model.eval()
    out = {}
    for name, source in (("train", train_data), ("val", val_data)):
        out[name] = np.mean([model(*get_batch(source)).item()
                             for _ in range(args.eval_batches)])
    model.train()
    return out


start = time.perf_counter()
for step in range(args.steps + 1):
    if step % args.eval_interval == 0 or step == args.steps:
        losses = estimate_loss()
        print(f"step {step:5d}: train loss {losses['train']:.4f}, "
              f"val loss {losses['val']:.4f}  ({time.perf_counter() - start:.1f} s)")
    if step < args.steps:
        train_step(*get_batch(train_data))

# --------------------------------------------------------------------------- sampling

model.eval()
prompt = dg.tensor([[stoi[c] for c in "def "]])
sample = model.generate(prompt, args.sample_len, temperature=args.temperature)
print("sample:")
print(decode(sample[0].tolist()))
