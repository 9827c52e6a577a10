"""A tiny denoising diffusion model (DDPM) on 8x8 images, written the way minimal DDPM
programs are: a linear beta schedule with ``torch.cumprod`` of the alphas, an ``extract``
helper that ``gather``s the schedule at each sample's timestep and reshapes it to
broadcast, sinusoidal time embeddings (``torch.exp(torch.arange(...) * -scale)``,
``torch.cat((emb.sin(), emb.cos()), dim=-1)``) through an MLP with ``nn.SiLU``, a small
U-Net of ``GroupNorm``/``SiLU`` residual blocks that add the projected time embedding as
``h + self.time_mlp(t)[:, :, None, None]``, down- and up-sampling with a skip
``torch.cat``, an exponential moving average of the weights kept in a ``copy.deepcopy``
of the model and updated in a ``@torch.no_grad()`` method with ``lerp_``, and ancestral
sampling in a reversed Python loop under ``model.eval()`` (``torch.no_grad()``, the noise
drawn from a seeded NumPy generator, ``torch.where`` over ``t > 0``)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def extract(a, t, x_shape):
    b = t.shape[0]
    out = a.gather(-1, t)
    return out.reshape(b, *((1,) * (len(x_shape) - 1)))


class SinusoidalPositionEmbeddings(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, time):
        half_dim = self.dim // 2
        embeddings = math.log(10000) / (half_dim - 1)
        embeddings = torch.exp(torch.arange(half_dim) * -embeddings)
        embeddings = time[:, None] * embeddings[None, :]
        return torch.cat((embeddings.sin(), embeddings.cos()), dim=-1)


class ResBlock(nn.Module):
    def __init__(self, dim_in, dim_out, time_dim, groups=4):
        super().__init__()
        self.time_mlp = nn.Sequential(nn.SiLU(), nn.Linear(time_dim, dim_out))
        self.norm1, self.conv1 = nn.GroupNorm(groups, dim_in), nn.Conv2d(dim_in, dim_out, 3,
                                                                         padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(groups, dim_out), nn.Conv2d(dim_out, dim_out, 3,
                                                                          padding=1)
        self.res_conv = nn.Conv2d(dim_in, dim_out, 1) if dim_in != dim_out else nn.Identity()

    def forward(self, x, t):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time_mlp(t)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.res_conv(x)


class TinyUNet(nn.Module):
    def __init__(self, ch=8, time_dim=16):
        super().__init__()
        self.time_mlp = nn.Sequential(SinusoidalPositionEmbeddings(ch), nn.Linear(ch, time_dim),
                                      nn.GELU(), nn.Linear(time_dim, time_dim))
        self.init_conv = nn.Conv2d(1, ch, 3, padding=1)
        self.down = ResBlock(ch, ch, time_dim)
        self.downsample = nn.Conv2d(ch, 2 * ch, 4, stride=2, padding=1)
        self.mid = ResBlock(2 * ch, 2 * ch, time_dim)
        self.upsample = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"),
                                      nn.Conv2d(2 * ch, ch, 3, padding=1))
        self.up = ResBlock(2 * ch, ch, time_dim)
        self.final = nn.Conv2d(ch, 1, 1)

    def forward(self, x, time):
        t = self.time_mlp(time)
        x = self.init_conv(x)
        skip = self.down(x, t)
        h = self.mid(self.downsample(skip), t)
        h = self.up(torch.cat((self.upsample(h), skip), dim=1), t)
        return self.final(h)


class EMA:
    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = copy.deepcopy(model)
        self.shadow.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for s, p in zip(self.shadow.parameters(), model.parameters()):
            s.lerp_(p, 1.0 - self.decay)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "norm" in k and
                         k.endswith("weight") else rng.normal(0, 0.15, tuple(v.shape)))
                        .astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, T=20, batch=8):
    betas = torch.linspace(1e-4, 0.2, T)
    alphas = 1.0 - betas
    alphas_cumprod = torch.cumprod(alphas, dim=0)
    alphas_cumprod_prev = F.pad(alphas_cumprod[:-1], (1, 0), value=1.0)
    sqrt_recip_alphas = torch.sqrt(1.0 / alphas)
    sqrt_ac, sqrt_1m_ac = torch.sqrt(alphas_cumprod), torch.sqrt(1.0 - alphas_cumprod)
    posterior_variance = betas * (1.0 - alphas_cumprod_prev) / (1.0 - alphas_cumprod)

    model = TinyUNet()
    init_weights(model, seed)
    ema = EMA(model, decay=0.9)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    rng = np.random.default_rng(seed + 1)
    grid = np.linspace(-1, 1, 8, dtype=np.float32)
    images = np.stack([np.tanh(4 * (grid[:, None] * np.cos(a) + grid[None, :] * np.sin(a)))
                       for a in rng.uniform(0, np.pi, 32)])[:, None].astype(np.float32)

    def p_losses(x_start, t, noise):
        x_noisy = extract(sqrt_ac, t, x_start.shape) * x_start \
            + extract(sqrt_1m_ac, t, x_start.shape) * noise
        predicted = model(x_noisy, t.float())
        return F.huber_loss(noise, predicted)

    def train_step(x, t, noise):
        optimizer.zero_grad()
        loss = p_losses(x, t, noise)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for step in range(steps):
        model.train()
        idx = rng.choice(len(images), batch, replace=False)
        x = torch.tensor(images[idx])
        t = torch.tensor(rng.integers(0, T, batch))
        noise = torch.tensor(rng.normal(size=x.shape).astype(np.float32))
        losses.append(train_step(x, t, noise).item())
        ema.update(model)

    @torch.no_grad()
    def sample(net, n=2):
        net.eval()
        img = torch.tensor(rng.normal(size=(n, 1, 8, 8)).astype(np.float32))
        for i in reversed(range(T)):
            t = torch.full((n,), i, dtype=torch.long)
            mean = extract(sqrt_recip_alphas, t, img.shape) * (
                img - extract(betas, t, img.shape) * net(img, t.float())
                / extract(sqrt_1m_ac, t, img.shape))
            noise = torch.tensor(rng.normal(size=img.shape).astype(np.float32))
            var = extract(posterior_variance, t, img.shape)
            img = torch.where(t[:, None, None, None] > 0, mean + torch.sqrt(var) * noise, mean)
        return img

    samples = sample(model)
    ema_samples = sample(ema.shadow)
    return {"losses": losses, "samples": samples.flatten()[:16].tolist(),
            "ema_samples": ema_samples.flatten()[:16].tolist()}
