"""Compiled == eager for whole training steps: 20 steps of losses and final parameters for
MLP + SGD-momentum, CNN + Adam, LSTM + Adam and a small GPT + AdamW."""
from __future__ import annotations

import re

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F

STEPS = 20


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)   # BN cancels a bias
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(h.flatten(1))


class CharLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.cell = nn.LSTMCell(6, 8)
        self.head = nn.Linear(8, 11)

    def forward(self, tokens):
        h = c = dg.zeros(tokens.shape[0], 8)
        logits = []
        for t in range(tokens.shape[1]):            # a Python loop over time, traced
            h, c = self.cell(self.emb(tokens[:, t]), (h, c))
            logits.append(self.head(h))
        return dg.stack(logits, 1)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        # no qkv bias: the key bias has a zero gradient in exact arithmetic, so its float
        # noise, magnified by AdamW, would differ between any two evaluation orders
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=13, d=16, t=8):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList([Block(d, 2), Block(d, 2)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(dg.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def setups():
    rng = np.random.default_rng(0)
    return {
        "mlp-sgd": (MLP, lambda p: dg.optim.SGD(p, lr=0.1, momentum=0.9),
                    dg.tensor(rng.standard_normal((16, 12)), dtype=dg.float32),
                    dg.tensor(rng.integers(0, 5, 16))),
        "cnn-adam": (CNN, lambda p: dg.optim.Adam(p, lr=1e-2),
                     dg.tensor(rng.standard_normal((8, 1, 8, 8)), dtype=dg.float32),
                     dg.tensor(rng.integers(0, 5, 8))),
        "lstm-adam": (CharLSTM, lambda p: dg.optim.Adam(p, lr=1e-2),
                      dg.tensor(rng.integers(0, 11, (4, 6))),
                      dg.tensor(rng.integers(0, 11, (4, 6)))),
        "gpt-adamw": (GPT, lambda p: dg.optim.AdamW(p, lr=3e-3, weight_decay=0.01),
                      dg.tensor(rng.integers(0, 13, (3, 8))),
                      dg.tensor(rng.integers(0, 13, (3, 8)))),
    }


def train(name, compiled):
    make_model, make_opt, x, y = setups()[name]
    dg.manual_seed(0)
    model = make_model()
    opt = make_opt(model.parameters())

    def step(x, y):
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    fn = dg.compile(step) if compiled else step
    losses = [fn(x, y).item() for _ in range(STEPS)]
    return losses, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}, fn


@pytest.mark.parametrize("name", ["mlp-sgd", "cnn-adam", "lstm-adam", "gpt-adamw"])
def test_compiled_training_equals_eager(name):
    eager_losses, eager_params, _ = train(name, False)
    losses, params, fn = train(name, True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-4, atol=1e-6)
    assert losses[-1] < losses[0]
    for key in eager_params:
        np.testing.assert_allclose(params[key], eager_params[key], rtol=1e-4, atol=1e-5,
                                   err_msg=key)
    assert len(fn.cache) == 2          # the first step (creates optimiser state), the rest
    # Adam's first step only creates state tensors (which the graph reads as inputs), so
    # the second call traces the same graph and reuses its compiled code; SGD's first
    # momentum step copies the gradient instead of blending it in: another graph.
    first, later = fn.cache.values()
    assert (first.executable is later.executable) == (name != "mlp-sgd")
    assert ("compiled code is reused" in fn.explain()) == (name != "mlp-sgd")
    assert "graph break" not in fn.explain().split("\n", 1)[1]
    # the whole optimiser update: one node, one loop call
    assert re.search(r"lower: .*\(grouped \d+.*\n(    .*\n)*    group_updates: \d+ \w+ nodes",
                     fn.explain())
    update = "k_sgd_update" if name == "mlp-sgd" else "k_adam_update"
    assert f"{update}(" not in fn.code and f"{update}_group(" in fn.code
    if name == "cnn-adam":             # each conv and its weight gradient: one im2col
        lines = [line for line in fn.explain().splitlines()
                 if line.strip().startswith("lower:") and "shared" in line]
        assert lines and all(re.search(r"\bshared 1\b", line) for line in lines)


def _rnn_language_model_run(compile_step: bool) -> list:
    """Three steps of an LSTM language model that returns its hidden state after
    ``loss.backward()`` and feeds it, detached, to the next step (as word-level language
    models carry it across batches)."""
    dg.manual_seed(0)
    lstm, head = nn.LSTM(4, 8), nn.Linear(8, 3)
    opt = dg.optim.SGD(list(lstm.parameters()) + list(head.parameters()), lr=0.1)

    def step(x, h, c, y):
        opt.zero_grad()
        out, (h, c) = lstm(x, (h, c))
        loss = F.cross_entropy(head(out).reshape(-1, 3), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss, h, c

    step = dg.compile(step) if compile_step else step
    rng = np.random.default_rng(1)
    h, c, losses = dg.zeros(1, 2, 8), dg.zeros(1, 2, 8), []
    for _ in range(3):
        x = dg.tensor(rng.standard_normal((5, 2, 4)).astype(np.float32))
        y = dg.tensor(rng.integers(0, 3, (5, 2)))
        loss, h, c = step(x, h.detach(), c.detach(), y)
        losses.append((loss.item(), h.detach().numpy().copy()))
    return losses


def test_a_step_may_return_tensors_whose_history_its_backward_freed():
    """The hidden state returned after backward() (its history freed, as in eager) is a
    plain result, not differentiated again; values equal eager's."""
    for (loss_e, h_e), (loss_c, h_c) in zip(_rnn_language_model_run(False),
                                            _rnn_language_model_run(True)):
        np.testing.assert_allclose(loss_c, loss_e, rtol=1e-5)
        np.testing.assert_allclose(h_c, h_e, rtol=1e-5, atol=1e-6)
