"""A character-level LSTM language model trained on Python's own standard library, in one
file.

    python examples/char_lstm.py                # 500 steps, about a minute on 2 cores
    python examples/char_lstm.py --steps 2000 --compile

The text is the source of a few stdlib modules (every Python install has them), so the
model learns to write something that looks like Python. The model is Karpathy's char-rnn:
an embedding, an ``nn.LSTM`` and a linear head. Training uses random windows of the text
(truncated backpropagation through time); generation carries the LSTM state from one
character to the next, so each new character costs one step, not a pass over the context.
It prints the train and validation loss every ``--eval-interval`` steps and a sample at
the end. ``--compile`` captures the whole training step (forward, backward, Adam update)
into one static graph with ``dg.compile``.
"""
import argparse
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
parser.add_argument("--seq-len", type=int, default=48, help="characters per window")
parser.add_argument("--n-embd", type=int, default=32)
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--lr", type=float, default=1e-2)
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
    ix = dg.randint(0, len(source) - args.seq_len - 1, (args.batch_size,)).numpy()
    window = ix[:, None] + np.arange(args.seq_len)
    return dg.from_numpy(source[window]), dg.from_numpy(source[window + 1])


# ------------------------------------------------------------------------------ model

class CharLSTM(nn.Module):
    def __init__(self, vocab_size, n_embd, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, n_embd)
        self.lstm = nn.LSTM(n_embd, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, idx, targets=None, state=None):
        """Logits (B, T, vocab) and the final (h, c); the mean cross-entropy instead when
        ``targets`` are given."""
        out, state = self.lstm(self.embed(idx), state)
        logits = self.head(out)
        if targets is None:
            return logits, state
        B, T = idx.shape
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))

    @dg.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0):
        """Extend ``idx`` (B, T): read the prompt once, then one character per step."""
        logits, state = self(idx)
        out = [idx]
        for _ in range(max_new_tokens):
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            # inverse-CDF sampling: the first index whose cumulative probability passes u
            u = dg.rand(idx.shape[0], 1)
            nxt = (probs.cumsum(dim=-1) < u).sum(dim=-1, keepdim=True)
            nxt = nxt.clamp(max=probs.shape[-1] - 1)
            out.append(nxt)
            logits, state = self(nxt, state=state)
        return dg.cat(out, dim=1)


model = CharLSTM(vocab_size, args.n_embd, args.hidden)
n_params = sum(p.numel() for p in model.parameters())
print(f"LSTM: {args.n_embd}-dim embedding, {args.hidden} hidden units, "
      f"{n_params:,} parameters")

# --------------------------------------------------------------------------- training

optimizer = dg.optim.Adam(model.parameters(), lr=args.lr)


def train_step(x, y):
    loss = model(x, y)
    optimizer.zero_grad()
    loss.backward()
    # LSTMs occasionally see a gradient spike; clipping keeps one bad batch harmless
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


if args.compile:
    train_step = dg.compile(train_step)


@dg.no_grad()
def estimate_loss():
    """Mean loss over a few random batches of each split."""
    out = {}
    for name, source in (("train", train_data), ("val", val_data)):
        out[name] = np.mean([model(*get_batch(source)).item()
                             for _ in range(args.eval_batches)])
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

prompt = dg.tensor([[stoi[c] for c in "def "]])
sample = model.generate(prompt, args.sample_len, temperature=args.temperature)
print("sample:")
print(decode(sample[0].tolist()))
