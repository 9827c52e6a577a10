"""A HiFi-GAN/MelGAN-style vocoder trained adversarially, written the way the reference
code is: a generator of ``weight_norm``-ed convolutions (``from torch.nn.utils import
weight_norm, remove_weight_norm``) upsampling a mel-like input by ``nn.ConvTranspose1d``
layers in an ``nn.ModuleList``, multi-receptive-field residual blocks of dilated
``Conv1d`` with ``get_padding(k, d)`` and ``F.leaky_relu(x, LRELU_SLOPE)``, the blocks'
outputs summed and divided by ``num_kernels``; ``init_weights`` by ``self.ups.apply``
testing ``m.__class__.__name__.find("Conv")``; a multi-period discriminator that pads by
``F.pad(x, (0, n_pad), "reflect")`` and views the signal as ``(b, c, t // p, p)`` for
``Conv2d`` with ``(k, 1)`` kernels, and a multi-scale discriminator over
``nn.AvgPool1d(4, 2, padding=2)`` poolings, each returning its feature maps; least-squares
GAN losses, the feature-matching loss, an L1 loss on log magnitudes of frames
(``Tensor.unfold`` windows times a Hann window against a DFT basis in real pairs),
``AdamW(betas=(0.8, 0.99))`` for each side, the generated audio ``.detach()``-ed for the
discriminator; ``remove_weight_norm`` before inference."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import AvgPool1d, Conv1d, Conv2d, ConvTranspose1d
from torch.nn.utils import remove_weight_norm, weight_norm

LRELU_SLOPE = 0.1


def get_padding(kernel_size, dilation=1):
    return int((kernel_size * dilation - dilation) / 2)


def init_weights(m, scale=0.5):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight_v.data.mul_(scale)


class ResBlock(nn.Module):
    def __init__(self, channels, kernel_size=3, dilation=(1, 3)):
        super().__init__()
        self.convs = nn.ModuleList([
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=d,
                               padding=get_padding(kernel_size, d))) for d in dilation])

    def forward(self, x):
        for c in self.convs:
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c(xt)
            x = xt + x
        return x

    def remove_weight_norm(self):
        for c in self.convs:
            remove_weight_norm(c)


class Generator(nn.Module):
    def __init__(self, mels=8, ch=16, rates=(2, 2), kernels=(3, 5)):
        super().__init__()
        self.num_kernels = len(kernels)
        self.conv_pre = weight_norm(Conv1d(mels, ch, 7, 1, padding=3))
        self.ups = nn.ModuleList()
        for i, u in enumerate(rates):
            self.ups.append(weight_norm(ConvTranspose1d(ch // 2 ** i, ch // 2 ** (i + 1),
                                                        u * 2, u, padding=u // 2)))
        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            c = ch // 2 ** (i + 1)
            for k in kernels:
                self.resblocks.append(ResBlock(c, k))
        self.conv_post = weight_norm(Conv1d(c, 1, 7, 1, padding=3))

    def forward(self, x):
        x = self.conv_pre(x)
        for i, up in enumerate(self.ups):
            x = F.leaky_relu(x, LRELU_SLOPE)
            x = up(x)
            xs = None
            for j in range(self.num_kernels):
                r = self.resblocks[i * self.num_kernels + j](x)
                xs = r if xs is None else xs + r
            x = xs / self.num_kernels
        x = F.leaky_relu(x)
        return torch.tanh(self.conv_post(x))

    def remove_weight_norm(self):
        for layer in self.ups:
            remove_weight_norm(layer)
        for block in self.resblocks:
            block.remove_weight_norm()
        remove_weight_norm(self.conv_pre)
        remove_weight_norm(self.conv_post)


class DiscriminatorP(nn.Module):
    def __init__(self, period):
        super().__init__()
        self.period = period
        self.convs = nn.ModuleList([
            weight_norm(Conv2d(1, 4, (5, 1), (3, 1), padding=(get_padding(5), 0))),
            weight_norm(Conv2d(4, 8, (5, 1), (3, 1), padding=(get_padding(5), 0))),
        ])
        self.conv_post = weight_norm(Conv2d(8, 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x):
        fmap = []
        b, c, t = x.shape
        if t % self.period != 0:
            n_pad = self.period - (t % self.period)
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)
        for layer in self.convs:
            x = F.leaky_relu(layer(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class DiscriminatorS(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([
            weight_norm(Conv1d(1, 8, 15, 1, padding=7)),
            weight_norm(Conv1d(8, 8, 41, 4, groups=4, padding=20)),
            weight_norm(Conv1d(8, 8, 5, 1, padding=2)),
        ])
        self.conv_post = weight_norm(Conv1d(8, 1, 3, 1, padding=1))

    def forward(self, x):
        fmap = []
        for layer in self.convs:
            x = F.leaky_relu(layer(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.periods = nn.ModuleList([DiscriminatorP(5)])
        self.scales = nn.ModuleList([DiscriminatorS(), DiscriminatorS()])
        self.meanpools = nn.ModuleList([AvgPool1d(4, 2, padding=2)])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for d in self.periods:
            for out, maps, signal in ((y_d_rs, fmap_rs, y), (y_d_gs, fmap_gs, y_hat)):
                r, f = d(signal)
                out.append(r)
                maps.append(f)
        for i, d in enumerate(self.scales):
            if i != 0:
                y = self.meanpools[i - 1](y)
                y_hat = self.meanpools[i - 1](y_hat)
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g):
        for rl, gl in zip(dr, dg):
            loss += torch.mean(torch.abs(rl - gl))
    return loss * 2


def discriminator_loss(disc_real_outputs, disc_generated_outputs):
    loss = 0
    for dr, dg in zip(disc_real_outputs, disc_generated_outputs):
        loss += torch.mean((1 - dr) ** 2) + torch.mean(dg ** 2)
    return loss


def generator_loss(disc_outputs):
    return sum(torch.mean((1 - dg) ** 2) for dg in disc_outputs)


class LogMagnitude(nn.Module):
    """|DFT| of Hann-windowed frames, the basis kept as real and imaginary rows."""

    def __init__(self, n_fft=8, hop=4):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        k = torch.arange(n_fft // 2 + 1, dtype=torch.float32)[:, None]
        n = torch.arange(n_fft, dtype=torch.float32)[None, :]
        self.register_buffer("cos", torch.cos(2 * math.pi * k * n / n_fft))
        self.register_buffer("sin", -torch.sin(2 * math.pi * k * n / n_fft))
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, audio):
        frames = F.pad(audio, (self.n_fft // 2, self.n_fft // 2), mode="reflect")
        frames = frames.squeeze(1).unfold(-1, self.n_fft, self.hop) * self.window
        re, im = frames @ self.cos.T, frames @ self.sin.T
        return torch.log(torch.clamp(torch.sqrt(re ** 2 + im ** 2 + 1e-9), min=1e-5))


def load(module, rng, scale=0.3):
    module.load_state_dict({k: torch.from_numpy(rng.normal(0, scale, tuple(v.shape))
                                                .astype(np.float32))
                            for k, v in module.state_dict().items()})


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    generator, mpd = Generator(), MultiDiscriminator()
    load(generator, rng)
    load(mpd, rng)
    generator.ups.apply(init_weights)
    mel = LogMagnitude()
    optim_g = torch.optim.AdamW(generator.parameters(), 2e-3, betas=(0.8, 0.99))
    optim_d = torch.optim.AdamW(mpd.parameters(), 2e-3, betas=(0.8, 0.99))
    gen = torch.compile(generator) if compile == "model" else generator

    def step(x, y):
        y_g_hat = gen(x)
        optim_d.zero_grad()
        y_d_rs, y_d_gs, _, _ = mpd(y, y_g_hat.detach())
        loss_disc = discriminator_loss(y_d_rs, y_d_gs)
        loss_disc.backward()
        optim_d.step()
        optim_g.zero_grad()
        loss_mel = F.l1_loss(mel(y), mel(y_g_hat)) * 45
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = mpd(y, y_g_hat)
        loss_gen_all = (generator_loss(y_d_gs) + feature_loss(fmap_rs, fmap_gs) + loss_mel)
        loss_gen_all.backward()
        optim_g.step()
        return loss_disc, loss_gen_all, loss_mel

    if compile is True:
        step = torch.compile(step)
    losses = []
    for _ in range(steps):
        x = torch.from_numpy(rng.normal(0, 1, (2, 8, 6)).astype(np.float32))
        y = torch.from_numpy(np.sin(np.linspace(0, 6, 24) * (1 + rng.uniform(0, 1, (2, 1, 1))))
                             .astype(np.float32))
        losses.append([v.item() for v in step(x, y)])
    generator.eval()
    generator.remove_weight_norm()
    with torch.no_grad():
        audio = generator(torch.from_numpy(rng.normal(0, 1, (1, 8, 6)).astype(np.float32)))
    return {"losses": losses, "audio": audio.flatten().tolist(),
            "params": sorted(n for n, _ in generator.named_parameters())[:4]}
