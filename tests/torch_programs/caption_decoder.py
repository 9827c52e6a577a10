"""An image captioner as the "show, attend and tell"-with-Transformers tutorials write it:
a small CNN whose feature map, ``flatten(2).transpose(1, 2)``, is the memory of an
``nn.TransformerDecoder`` of ``nn.TransformerDecoderLayer(batch_first=True,
norm_first=True, activation="gelu")`` layers with a final ``nn.LayerNorm``; the causal
mask from ``nn.Transformer.generate_square_subsequent_mask`` (a float ``-inf`` mask) with
a boolean ``tgt_key_padding_mask`` (``tokens == PAD``); a prefix re-encoder of the
memory with rotary position embeddings whose ``cos``/``sin`` caches are non-persistent
buffers built by ``torch.einsum("i,j->ij")`` and applied by ``rotate_half``, attending by
``F.scaled_dot_product_attention(q, k, v, attn_mask=<bool>)`` and, for the captions'
self-attention block, ``is_causal=True``; the output head tied to the embedding
(``self.head.weight = self.embed.weight``); ``F.cross_entropy(label_smoothing=0.1,
ignore_index=PAD)`` on shifted captions; AdamW with a ``LambdaLR`` warm-up and greedy
decoding under ``torch.inference_mode()`` that stops at the end token."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS, VOCAB = 0, 1, 2, 12


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryAttention(nn.Module):
    def __init__(self, dim, heads=2, max_len=32):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        freqs = torch.einsum("i,j->ij", torch.arange(max_len).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)

    def forward(self, x, attn_mask=None, is_causal=False):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = self.cos_cached[:, :, :t], self.sin_cached[:, :, :t]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class Captioner(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(3, dim, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.Conv2d(dim, dim, 3, stride=2, padding=1))
        self.prefix = RotaryAttention(dim)
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.pos = nn.Parameter(torch.zeros(1, 16, dim))
        self.causal = RotaryAttention(dim)
        layer = nn.TransformerDecoderLayer(dim, nhead=2, dim_feedforward=32, dropout=0.0,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers=2, norm=nn.LayerNorm(dim))
        self.head = nn.Linear(dim, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def encode(self, images):
        memory = self.cnn(images).flatten(2).transpose(1, 2)
        n = memory.shape[1]
        band = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() <= 2
        return memory + self.prefix(memory, attn_mask=band)

    def forward(self, images, tokens):
        memory = self.encode(images)
        t = tokens.shape[1]
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.pos[:, :t]
        x = x + self.causal(x, is_causal=True)
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.decoder(x, memory, tgt_mask=mask, tgt_key_padding_mask=tokens == PAD,
                         tgt_is_causal=True)
        return self.head(h)


def batch(rng, n=4, size=8):
    images = rng.normal(0, 1, (n, 3, size, size)).astype(np.float32)
    captions = []
    for i in range(n):
        length = int(rng.integers(2, 6))
        words = (np.arange(length) + int(images[i, 0].mean() > 0) * 3) % (VOCAB - 3) + 3
        captions.append([BOS] + words.tolist() + [EOS])
    width = max(len(c) for c in captions)
    tokens = np.array([c + [PAD] * (width - len(c)) for c in captions])
    return torch.from_numpy(images), torch.from_numpy(tokens)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Captioner()
    state = model.state_dict()
    assert "prefix.cos_cached" not in state and "head.weight" in state
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.2, tuple(v.shape))
                                               .astype(np.float32)) for k, v in state.items()})
    assert model.head.weight is model.embed.weight
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    net = torch.compile(model) if compile == "model" else model

    def step(images, tokens):
        optimizer.zero_grad()
        logits = net(images, tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1),
                               ignore_index=PAD, label_smoothing=0.1)
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    losses = []
    for _ in range(steps):
        losses.append(step(*batch(rng)).item())
        scheduler.step()
    images, _ = batch(rng, n=2)
    model.eval()
    with torch.inference_mode():
        tokens = torch.full((2, 1), BOS)
        for _ in range(5):
            nxt = net(images, tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            if (nxt == EOS).all():
                break
        logits = net(images, tokens)
    return {"losses": losses, "tokens": tokens.tolist(),
            "logits": logits[:, -1].flatten().tolist()}
