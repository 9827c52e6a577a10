"""A class-conditional diffusion UNet with self-attention, trained for classifier-free
guidance, as guided-diffusion-style code writes it: a cosine noise schedule
(``torch.cos(((t / T) + s) / (1 + s) * math.pi * 0.5) ** 2``, betas clipped at 0.999), float64
schedule tensors cast to float32 only when gathered (``.float()``), sinusoidal timestep
embeddings plus a class embedding whose label is dropped to a null class by
``torch.where(drop, torch.full_like(y, NULL), y)`` (the drop mask drawn in NumPy), residual
blocks with scale-shift conditioning (``scale, shift = emb_out.chunk(2, dim=1)``, ``h =
norm(h) * (1 + scale) + shift``), an attention block over the ``h * w`` positions
(``qkv.reshape(b * heads, 3 * ch, -1).split(ch, dim=1)``, ``torch.einsum("bct,bcs->bts", q *
scale, k * scale)``, ``softmax(weight.float(), dim=-1).type(weight.dtype)``), v-prediction
targets ``sqrt(a) * eps - sqrt(1 - a) * x0`` with a min-SNR weight ``torch.clamp(snr,
max=5) / snr``, AdamW with a warm-up ``LambdaLR`` and a deterministic DDIM sampler under
``torch.no_grad()`` that doubles the batch (``torch.cat([x, x])``) for the conditional and
unconditional predictions and mixes them by ``uncond + w * (cond - uncond)``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

T, CLASSES = 20, 3
NULL = CLASSES


def cosine_betas(steps, s=0.008):
    t = torch.linspace(0, steps, steps + 1, dtype=torch.float64)
    alphas_cumprod = torch.cos(((t / steps) + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return torch.clip(betas, 0, 0.999)


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, ch, emb_dim):
        super().__init__()
        self.in_layers = nn.Sequential(nn.GroupNorm(4, ch), nn.SiLU(), nn.Conv2d(ch, ch, 3,
                                                                                  padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_dim, 2 * ch))
        self.out_norm = nn.GroupNorm(4, ch)
        self.out_conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x, emb):
        h = self.in_layers(x)
        emb_out = self.emb_layers(emb)[..., None, None]
        scale, shift = emb_out.chunk(2, dim=1)
        h = self.out_norm(h) * (1 + scale) + shift
        return x + self.out_conv(F.silu(h))


class AttentionBlock(nn.Module):
    def __init__(self, ch, heads=2):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(4, ch)
        self.qkv = nn.Conv1d(ch, 3 * ch, 1)
        self.proj_out = nn.Conv1d(ch, ch, 1)

    def forward(self, x):
        b, c, *spatial = x.shape
        x_flat = x.reshape(b, c, -1)
        qkv = self.qkv(self.norm(x_flat))
        ch = c // self.heads
        q, k, v = qkv.reshape(b * self.heads, 3 * ch, -1).split(ch, dim=1)
        scale = 1 / math.sqrt(math.sqrt(ch))
        weight = torch.einsum("bct,bcs->bts", q * scale, k * scale)
        weight = torch.softmax(weight.float(), dim=-1).type(weight.dtype)
        a = torch.einsum("bts,bcs->bct", weight, v).reshape(b, -1, x_flat.shape[-1])
        return (x_flat + self.proj_out(a)).reshape(b, c, *spatial)


class UNet(nn.Module):
    def __init__(self, ch=8, emb_dim=16):
        super().__init__()
        self.ch = ch
        self.time_embed = nn.Sequential(nn.Linear(ch, emb_dim), nn.SiLU(),
                                        nn.Linear(emb_dim, emb_dim))
        self.label_emb = nn.Embedding(CLASSES + 1, emb_dim)
        self.inp = nn.Conv2d(1, ch, 3, padding=1)
        self.down = ResBlock(ch, emb_dim)
        self.pool = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.mid = ResBlock(ch, emb_dim)
        self.attn = AttentionBlock(ch)
        self.up = nn.Conv2d(2 * ch, ch, 3, padding=1)
        self.out = nn.Sequential(nn.GroupNorm(4, ch), nn.SiLU(), nn.Conv2d(ch, 1, 3, padding=1))

    def forward(self, x, t, y):
        emb = self.time_embed(timestep_embedding(t, self.ch)) + self.label_emb(y)
        h1 = self.down(self.inp(x), emb)
        h = self.attn(self.mid(self.pool(h1), emb))
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        return self.out(self.up(torch.cat([h, h1], dim=1)))


def extract(arr, t, ndim):
    out = arr[t].float()
    return out.reshape(-1, *([1] * (ndim - 1)))


def digits(rng, n):
    y = rng.integers(0, CLASSES, n)
    x = np.full((n, 1, 8, 8), -1.0, dtype=np.float32)
    for k, c in enumerate(y):
        x[k, 0, :, 2 * c + 1:2 * c + 3] = 1.0
    return torch.from_numpy(x), torch.from_numpy(y)


def main(steps=10, compile=False, seed=0, batch=6, p_uncond=0.3, guidance=2.0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    betas = cosine_betas(T)
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
    model = UNet()
    for name, p in model.named_parameters():
        if p.dim() > 1:
            fan_in = p[0].numel()
            p.data.copy_(torch.from_numpy(rng.normal(0, 1 / math.sqrt(fan_in), tuple(p.shape))
                                          .astype(np.float32)))
        elif "norm" not in name and "in_layers.0" not in name and "out.0" not in name:
            p.data.zero_()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    data = []
    for _ in range(steps):
        x0, y = digits(rng, batch)
        t = torch.from_numpy(rng.integers(0, T, batch))
        noise = torch.from_numpy(rng.normal(0, 1, x0.shape).astype(np.float32))
        drop = torch.from_numpy(rng.random(batch) < p_uncond)
        data.append((x0, y, t, noise, drop))
    net = model

    def step(x0, y, t, noise, drop):
        a = extract(alphas_cumprod, t, x0.dim())
        x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
        target = a.sqrt() * noise - (1 - a).sqrt() * x0
        y = torch.where(drop, torch.full_like(y, NULL), y)
        pred = net(x_t, t, y)
        snr = a / (1 - a)
        weight = torch.clamp(snr, max=5.0) / (snr + 1)
        loss = (weight * (pred - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = []
    for x0, y, t, noise, drop in data:
        losses.append(step(x0, y, t, noise, drop).item())
        scheduler.step()
    model.eval()
    y = torch.arange(CLASSES)
    x = torch.from_numpy(rng.normal(0, 1, (CLASSES, 1, 8, 8)).astype(np.float32))
    with torch.no_grad():
        for i in reversed(range(0, T, 4)):
            t = torch.full((CLASSES,), i, dtype=torch.long)
            out = net(torch.cat([x, x]), torch.cat([t, t]), torch.cat([y, torch.full_like(y,
                                                                                     NULL)]))
            cond, uncond = out.chunk(2)
            v = uncond + guidance * (cond - uncond)
            a = extract(alphas_cumprod, t, 4)
            a_prev = extract(alphas_cumprod, (t - 4).clamp(min=0), 4) if i >= 4 else \
                torch.ones_like(a)
            x0_pred = a.sqrt() * x - (1 - a).sqrt() * v
            eps = (1 - a).sqrt() * x + a.sqrt() * v
            x = a_prev.sqrt() * x0_pred + (1 - a_prev).sqrt() * eps
    return {"losses": losses, "lrs": scheduler.get_last_lr(),
            "samples": x.flatten()[::5].tolist(),
            "class_means": [float(x[k, 0, :, 2 * k + 1:2 * k + 3].mean()) for k in
                            range(CLASSES)]}
