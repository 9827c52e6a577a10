"""A tiny LLaMA-style language model and its training loop, written the way such programs
are: ``RMSNorm`` written by hand (``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) +
eps)``) next to ``nn.RMSNorm``, rotary position embeddings from cos/sin caches kept in
``register_buffer(..., persistent=False)`` and applied with ``rotate_half`` over
``torch.chunk``, a SwiGLU feed-forward (``F.silu(w1(x)) * w3(x)``),
``F.scaled_dot_product_attention(..., is_causal=True)`` and, for the padded batch, with a
boolean ``attn_mask``; weight tying, ``clip_grad_value_``, a learning rate halved by hand
through ``optimizer.param_groups`` and greedy decoding with ``topk`` into a
preallocated buffer (an in-place slice write). Only ``import torch`` decides whether
PyTorch or dualgraph runs it."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    def __init__(self, head_dim, max_len, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        t = torch.arange(max_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)

    def forward(self, q, k):
        T = q.shape[-2]
        cos, sin = self.cos_cached[:, :, :T], self.sin_cached[:, :, :T]
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class Attention(nn.Module):
    def __init__(self, dim, n_heads, max_len):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.rotary = Rotary(self.head_dim, max_len)

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        q, k = self.rotary(q, k)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(B, T, C))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, n_heads, max_len, builtin_norm):
        super().__init__()
        norm = (lambda: nn.RMSNorm(dim, eps=1e-6)) if builtin_norm else (lambda: RMSNorm(dim))
        self.attention_norm, self.ffn_norm = norm(), norm()
        self.attention = Attention(dim, n_heads, max_len)
        self.feed_forward = FeedForward(dim, 2 * dim + dim // 2)

    def forward(self, x, mask=None):
        h = x + self.attention(self.attention_norm(x), mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, vocab=48, dim=32, n_heads=4, n_layers=2, max_len=16):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, n_heads, max_len, i % 2 == 1)
                                    for i in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens, mask=None):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, mask)
        return self.output(self.norm(h))


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, copied in."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.tensor((1.0 + rng.normal(0, 0.05, p.shape)).astype(np.float32)))
            else:
                p.copy_(torch.tensor(rng.normal(0, 0.05, p.shape).astype(np.float32)))


@torch.no_grad()
def generate(model, prompt, n_new):
    B, T0 = prompt.shape
    out = torch.zeros(B, T0 + n_new, dtype=torch.long)
    out[:, :T0] = prompt
    for t in range(T0, T0 + n_new):
        logits = model(out[:, :t])[:, -1, :]
        _, top = torch.topk(logits, k=1, dim=-1)
        out[:, t] = top[:, 0]
    return out


def main(steps=10, compile=False, seed=0):
    model = Llama()
    init_weights(model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    rng = np.random.default_rng(seed + 1)
    data = rng.integers(0, 48, size=(steps, 3, 13))
    lengths = [13, 9, 11]        # the last batch is padded to 13 with a padding mask

    def train_step(x, y, mask):
        logits = model(x, mask)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1),
                               ignore_index=-1)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    causal = torch.tril(torch.ones(12, 12, dtype=torch.bool))
    losses = []
    for it in range(steps):
        if it == steps // 2:
            for g in optimizer.param_groups:
                g["lr"] = g["lr"] * 0.5
        x = torch.tensor(data[it][:, :-1])
        y = torch.tensor(data[it][:, 1:])
        mask = None
        if it % 3 == 2:         # a padded batch: keys past each length are masked
            keep = torch.arange(12)[None, :] < torch.tensor(lengths)[:, None]
            mask = (causal[None] & keep[:, None, :])[:, None]
            y = y.masked_fill(~keep, -1)
        losses.append(train_step(x, y, mask).item())
    model.eval()
    out = generate(model, torch.tensor(data[0][:, :4]), 5)
    return {"losses": losses, "generated": out.tolist()}
