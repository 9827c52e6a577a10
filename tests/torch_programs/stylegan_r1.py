"""A StyleGAN2-style training loop at toy size, written the way rosinality's stylegan2-pytorch
is: equalized learning rate (weights drawn at unit scale and multiplied by
``1 / math.sqrt(fan_in)`` at every call, ``F.conv2d``/``F.linear`` on the scaled weight),
``F.leaky_relu(x, 0.2) * math.sqrt(2)``, a mapping network with ``PixelNorm``
(``torch.rsqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-8)``), modulated and
demodulated convolutions as one grouped ``F.conv2d`` over the batch reshaped to channels,
noise injection with a learned weight, nearest upsampling, a discriminator with a
minibatch standard-deviation layer (groups by ``min(batch, 4)``, ``torch.sqrt(var +
1e-8)``, ``repeat``), the non-saturating logistic losses by ``F.softplus``, lazy R1
regularisation every other step (``real_img.requires_grad = True``, ``grad_real, =
autograd.grad(outputs=real_pred.sum(), inputs=real_img, create_graph=True)``), Adam with
``betas=(0, 0.99)`` and lr scaled by ``reg_every / (reg_every + 1)``, ``requires_grad(model,
flag)`` toggled between the two updates, and an EMA generator accumulated through
``dict(named_parameters())`` and ``.data.mul_(decay).add_(..., alpha=1 - decay)``. The
noise and latents come from NumPy."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
from torch import autograd, nn
from torch.nn import functional as F


class PixelNorm(nn.Module):
    def forward(self, input):
        return input * torch.rsqrt(torch.mean(input ** 2, dim=1, keepdim=True) + 1e-8)


class EqualLinear(nn.Module):
    def __init__(self, in_dim, out_dim, bias_init=0.0, lr_mul=1.0, activation=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.zeros(out_dim).fill_(bias_init))
        self.activation = activation
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul

    def forward(self, input):
        out = F.linear(input, self.weight * self.scale, bias=self.bias * self.lr_mul)
        if self.activation:
            out = F.leaky_relu(out, 0.2) * math.sqrt(2)
        return out


class EqualConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, stride=1, padding=0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_channel, in_channel, kernel_size,
                                               kernel_size))
        self.scale = 1 / math.sqrt(in_channel * kernel_size ** 2)
        self.stride, self.padding = stride, padding
        self.bias = nn.Parameter(torch.zeros(out_channel))

    def forward(self, input):
        return F.conv2d(input, self.weight * self.scale, bias=self.bias, stride=self.stride,
                        padding=self.padding)


class ModulatedConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, style_dim, demodulate=True,
                 upsample=False):
        super().__init__()
        self.eps = 1e-8
        self.kernel_size, self.in_channel, self.out_channel = kernel_size, in_channel, out_channel
        self.upsample, self.demodulate = upsample, demodulate
        self.scale = 1 / math.sqrt(in_channel * kernel_size ** 2)
        self.padding = kernel_size // 2
        self.weight = nn.Parameter(torch.randn(1, out_channel, in_channel, kernel_size,
                                               kernel_size))
        self.modulation = EqualLinear(style_dim, in_channel, bias_init=1)

    def forward(self, input, style):
        batch, in_channel, height, width = input.shape
        style = self.modulation(style).view(batch, 1, in_channel, 1, 1)
        weight = self.scale * self.weight * style
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(batch, self.out_channel, 1, 1, 1)
        weight = weight.view(batch * self.out_channel, in_channel, self.kernel_size,
                             self.kernel_size)
        if self.upsample:
            input = F.interpolate(input, scale_factor=2, mode="nearest")
            height, width = input.shape[2:]
        input = input.view(1, batch * in_channel, height, width)
        out = F.conv2d(input, weight, padding=self.padding, groups=batch)
        _, _, height, width = out.shape
        return out.view(batch, self.out_channel, height, width)


class NoiseInjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, image, noise):
        return image + self.weight * noise


class StyledConv(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, style_dim, upsample=False):
        super().__init__()
        self.conv = ModulatedConv2d(in_channel, out_channel, kernel_size, style_dim,
                                    upsample=upsample)
        self.noise = NoiseInjection()
        self.activate_bias = nn.Parameter(torch.zeros(1, out_channel, 1, 1))

    def forward(self, input, style, noise):
        out = self.noise(self.conv(input, style), noise)
        return F.leaky_relu(out + self.activate_bias, 0.2) * math.sqrt(2)


class Generator(nn.Module):
    def __init__(self, style_dim=8, n_mlp=2, channels=6):
        super().__init__()
        layers = [PixelNorm()]
        for _ in range(n_mlp):
            layers.append(EqualLinear(style_dim, style_dim, lr_mul=0.01, activation=True))
        self.style = nn.Sequential(*layers)
        self.input = nn.Parameter(torch.randn(1, channels, 4, 4))
        self.conv1 = StyledConv(channels, channels, 3, style_dim)
        self.conv2 = StyledConv(channels, channels, 3, style_dim, upsample=True)
        self.to_rgb = ModulatedConv2d(channels, 3, 1, style_dim, demodulate=False)
        self.rgb_bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, z, noises):
        w = self.style(z)
        out = self.input.repeat(z.shape[0], 1, 1, 1)
        out = self.conv1(out, w, noises[0])
        out = self.conv2(out, w, noises[1])
        return self.to_rgb(out, w) + self.rgb_bias


class Discriminator(nn.Module):
    def __init__(self, channels=6):
        super().__init__()
        self.conv0 = EqualConv2d(3, channels, 3, padding=1)
        self.conv1 = EqualConv2d(channels, channels, 3, stride=2, padding=1)
        self.stddev_group, self.stddev_feat = 4, 1
        self.final_conv = EqualConv2d(channels + 1, channels, 3, padding=1)
        self.final_linear = nn.Sequential(EqualLinear(channels * 4 * 4, channels,
                                                      activation=True),
                                          EqualLinear(channels, 1))

    def forward(self, input):
        out = F.leaky_relu(self.conv0(input), 0.2) * math.sqrt(2)
        out = F.leaky_relu(self.conv1(out), 0.2) * math.sqrt(2)
        batch, channel, height, width = out.shape
        group = min(batch, self.stddev_group)
        stddev = out.view(group, -1, self.stddev_feat, channel // self.stddev_feat, height,
                          width)
        stddev = torch.sqrt(stddev.var(0, unbiased=False) + 1e-8)
        stddev = stddev.mean([2, 3, 4], keepdims=True).squeeze(2)
        stddev = stddev.repeat(group, 1, height, width)
        out = torch.cat([out, stddev], 1)
        out = F.leaky_relu(self.final_conv(out), 0.2) * math.sqrt(2)
        return self.final_linear(out.view(batch, -1))


def d_logistic_loss(real_pred, fake_pred):
    return F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()


def d_r1_loss(real_pred, real_img):
    grad_real, = autograd.grad(outputs=real_pred.sum(), inputs=real_img, create_graph=True)
    return grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()


def g_nonsaturating_loss(fake_pred):
    return F.softplus(-fake_pred).mean()


def requires_grad(model, flag=True):
    for p in model.parameters():
        p.requires_grad = flag


def accumulate(model1, model2, decay=0.999):
    par1 = dict(model1.named_parameters())
    par2 = dict(model2.named_parameters())
    for k in par1.keys():
        par1[k].data.mul_(decay).add_(par2[k].data, alpha=1 - decay)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    generator, discriminator, g_ema = Generator(), Discriminator(), Generator()
    with torch.no_grad():
        for module in (generator, discriminator):
            for p in module.parameters():
                p.copy_(torch.from_numpy(rng.normal(0, 1, p.shape).astype(np.float32)))
            for name, p in module.named_parameters():
                if "bias" in name and "modulation" not in name:
                    p.mul_(0.1)
    g_ema.load_state_dict(generator.state_dict())
    g_ema.eval()
    d_reg_every, r1 = 2, 1.0
    d_reg_ratio = d_reg_every / (d_reg_every + 1)
    g_optim = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.0, 0.99))
    d_optim = torch.optim.Adam(discriminator.parameters(), lr=2e-3 * d_reg_ratio,
                               betas=(0 ** d_reg_ratio, 0.99 ** d_reg_ratio))
    gen = torch.compile(generator) if compile == "model" else generator
    disc = torch.compile(discriminator) if compile == "model" else discriminator

    def d_step(real_img, z, noises):
        fake_img = gen(z, noises)
        fake_pred = disc(fake_img)
        real_pred = disc(real_img)
        d_loss = d_logistic_loss(real_pred, fake_pred)
        discriminator.zero_grad()
        d_loss.backward()
        d_optim.step()
        return d_loss.detach(), real_pred.mean().detach(), fake_pred.mean().detach()

    def d_reg_step(real_img):
        real_img.requires_grad = True
        real_pred = disc(real_img)
        r1_loss = d_r1_loss(real_pred, real_img)
        discriminator.zero_grad()
        (r1 / 2 * r1_loss * d_reg_every + 0 * real_pred[0]).backward()
        d_optim.step()
        return r1_loss.detach()

    def g_step(z, noises):
        fake_img = gen(z, noises)
        fake_pred = disc(fake_img)
        g_loss = g_nonsaturating_loss(fake_pred)
        generator.zero_grad()
        g_loss.backward()
        g_optim.step()
        return g_loss.detach()

    if compile is True:
        d_step, d_reg_step, g_step = (torch.compile(d_step), torch.compile(d_reg_step),
                                      torch.compile(g_step))
    log = []
    for i in range(steps):
        real_img = torch.from_numpy(np.tanh(rng.normal(0, 1, (4, 3, 8, 8))).astype(np.float32))
        z = torch.from_numpy(rng.normal(0, 1, (4, 8)).astype(np.float32))
        noises = [torch.from_numpy(rng.normal(0, 1, (4, 1, s, s)).astype(np.float32))
                  for s in (4, 8)]
        requires_grad(generator, False)
        requires_grad(discriminator, True)
        d_loss, real_score, fake_score = d_step(real_img, z, noises)
        r1_loss = torch.zeros(())
        if i % d_reg_every == 0:
            r1_loss = d_reg_step(real_img.clone())
        requires_grad(generator, True)
        requires_grad(discriminator, False)
        g_loss = g_step(z, noises)
        accumulate(g_ema, generator, 0.5)
        log.append([d_loss.item(), real_score.item(), fake_score.item(), r1_loss.item(),
                    g_loss.item()])
    with torch.no_grad():
        z = torch.from_numpy(rng.normal(0, 1, (2, 8)).astype(np.float32))
        noises = [torch.zeros(2, 1, s, s) for s in (4, 8)]
        sample = g_ema(z, noises)
    return {"log": log, "sample": sample[:, :, :2, :2].flatten().tolist()}
