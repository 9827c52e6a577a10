"""Glow as rosinality's glow-pytorch writes it, scaled down: ``ActNorm`` initialised from
the first batch (a ``uint8`` buffer ``initialized`` and ``.data.copy_`` under ``no_grad``),
an invertible 1x1 convolution in both of that code's forms (``InvConv2d``: a weight
``F.conv2d`` applies, its log-determinant ``torch.slogdet(weight.squeeze().double())[1]
.float()``; ``InvConv2dLU``: the weight rebuilt from LU factors with ``torch.tril``,
``torch.triu``, ``torch.diag`` and fixed masks as buffers, the log-determinant
``torch.sum(w_s)``), an affine coupling whose net ends in a ``ZeroConv2d`` (``F.pad(...,
value=1)``, ``torch.exp(self.scale * 3)``), scale ``torch.sigmoid(log_s + 2)``,
``x.chunk(2, 1)``, the squeeze as ``view``/``permute``/``contiguous``, split priors with
``gaussian_log_p``, and the loss in bits per dimension with ``log(n_bins)``
dequantisation (the uniform noise drawn by NumPy here). Adam, ``clip_grad_norm_``.
Data: 8x8 two-channel images of smooth random blobs."""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

logabs = lambda x: torch.log(torch.abs(x))  # noqa: E731  (as the source spells it)


class ActNorm(nn.Module):
    def __init__(self, in_channel, logdet=True):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, in_channel, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, in_channel, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))
        self.logdet = logdet

    def initialize(self, input):
        with torch.no_grad():
            flatten = input.permute(1, 0, 2, 3).contiguous().view(input.shape[1], -1)
            mean = flatten.mean(1).unsqueeze(1).unsqueeze(2).unsqueeze(3).permute(1, 0, 2, 3)
            std = flatten.std(1).unsqueeze(1).unsqueeze(2).unsqueeze(3).permute(1, 0, 2, 3)
            self.loc.data.copy_(-mean)
            self.scale.data.copy_(1 / (std + 1e-6))

    def forward(self, input):
        _, _, height, width = input.shape
        if self.initialized.item() == 0:
            self.initialize(input)
            self.initialized.fill_(1)
        log_abs = logabs(self.scale)
        logdet = height * width * torch.sum(log_abs)
        if self.logdet:
            return self.scale * (input + self.loc), logdet
        return self.scale * (input + self.loc)


class InvConv2d(nn.Module):
    def __init__(self, in_channel, weight):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(weight).unsqueeze(2).unsqueeze(3))

    def forward(self, input):
        _, _, height, width = input.shape
        out = F.conv2d(input, self.weight)
        logdet = height * width * torch.slogdet(self.weight.squeeze().double())[1].float()
        return out, logdet


def lu_factors(w):
    """P, L, U of ``w`` (partial pivoting; what the source gets from ``scipy.linalg.lu``)."""
    n = w.shape[0]
    u, perm, lower = w.copy(), np.eye(n), np.eye(n)
    for k in range(n - 1):
        p = k + int(np.argmax(np.abs(u[k:, k])))
        u[[k, p]], perm[[k, p]], lower[[k, p], :k] = u[[p, k]], perm[[p, k]], lower[[p, k], :k]
        for i in range(k + 1, n):
            lower[i, k] = u[i, k] / u[k, k]
            u[i] -= lower[i, k] * u[k]
    return perm.T, lower, u


class InvConv2dLU(nn.Module):
    def __init__(self, in_channel, weight):
        super().__init__()
        w_p, w_l, w_u = lu_factors(weight.astype(np.float64))
        w_s = np.diag(w_u)
        w_u = np.triu(w_u, 1)
        u_mask = np.triu(np.ones_like(w_u), 1)
        l_mask = u_mask.T
        w_p, w_l, w_s, w_u = (torch.from_numpy(a.astype(np.float32)) for a in (w_p, w_l, w_s, w_u))
        self.register_buffer("w_p", w_p)
        self.register_buffer("u_mask", torch.from_numpy(u_mask.astype(np.float32)))
        self.register_buffer("l_mask", torch.from_numpy(l_mask.astype(np.float32)))
        self.register_buffer("s_sign", torch.sign(w_s))
        self.register_buffer("l_eye", torch.eye(l_mask.shape[0]))
        self.w_l = nn.Parameter(w_l)
        self.w_s = nn.Parameter(logabs(w_s))
        self.w_u = nn.Parameter(w_u)

    def forward(self, input):
        _, _, height, width = input.shape
        weight = self.calc_weight()
        out = F.conv2d(input, weight)
        logdet = height * width * torch.sum(self.w_s)
        return out, logdet

    def calc_weight(self):
        weight = (self.w_p @ (self.w_l * self.l_mask + self.l_eye)
                  @ ((self.w_u * self.u_mask) + torch.diag(self.s_sign * torch.exp(self.w_s))))
        return weight.unsqueeze(2).unsqueeze(3)


class ZeroConv2d(nn.Module):
    def __init__(self, in_channel, out_channel):
        super().__init__()
        self.conv = nn.Conv2d(in_channel, out_channel, 3, padding=0)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()
        self.scale = nn.Parameter(torch.zeros(1, out_channel, 1, 1))

    def forward(self, input):
        out = F.pad(input, [1, 1, 1, 1], value=1)
        out = self.conv(out)
        return out * torch.exp(self.scale * 3)


class AffineCoupling(nn.Module):
    def __init__(self, in_channel, filter_size=16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channel // 2, filter_size, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(filter_size, filter_size, 1), nn.ReLU(inplace=True),
            ZeroConv2d(filter_size, in_channel))

    def forward(self, input):
        in_a, in_b = input.chunk(2, 1)
        log_s, t = self.net(in_a).chunk(2, 1)
        s = torch.sigmoid(log_s + 2)
        out_b = (in_b + t) * s
        logdet = torch.sum(torch.log(s).view(input.shape[0], -1), 1)
        return torch.cat([in_a, out_b], 1), logdet


class Flow(nn.Module):
    def __init__(self, in_channel, weight, conv_lu=True):
        super().__init__()
        self.actnorm = ActNorm(in_channel)
        self.invconv = (InvConv2dLU if conv_lu else InvConv2d)(in_channel, weight)
        self.coupling = AffineCoupling(in_channel)

    def forward(self, input):
        out, logdet = self.actnorm(input)
        out, det1 = self.invconv(out)
        out, det2 = self.coupling(out)
        logdet = logdet + det1
        if det2 is not None:
            logdet = logdet + det2
        return out, logdet


def gaussian_log_p(x, mean, log_sd):
    return -0.5 * math.log(2 * math.pi) - log_sd - 0.5 * (x - mean) ** 2 / torch.exp(2 * log_sd)


class Block(nn.Module):
    def __init__(self, in_channel, n_flow, weights, split=True, conv_lu=True):
        super().__init__()
        squeeze_dim = in_channel * 4
        self.flows = nn.ModuleList([Flow(squeeze_dim, w, conv_lu=conv_lu and i % 2 == 0)
                                    for i, w in zip(range(n_flow), weights)])
        self.split = split
        if split:
            self.prior = ZeroConv2d(in_channel * 2, in_channel * 4)
        else:
            self.prior = ZeroConv2d(in_channel * 4, in_channel * 8)

    def forward(self, input):
        b_size, n_channel, height, width = input.shape
        squeezed = input.view(b_size, n_channel, height // 2, 2, width // 2, 2)
        squeezed = squeezed.permute(0, 1, 3, 5, 2, 4)
        out = squeezed.contiguous().view(b_size, n_channel * 4, height // 2, width // 2)
        logdet = 0
        for flow in self.flows:
            out, det = flow(out)
            logdet = logdet + det
        if self.split:
            out, z_new = out.chunk(2, 1)
            mean, log_sd = self.prior(out).chunk(2, 1)
            log_p = gaussian_log_p(z_new, mean, log_sd)
            log_p = log_p.view(b_size, -1).sum(1)
        else:
            zero = torch.zeros_like(out)
            mean, log_sd = self.prior(zero).chunk(2, 1)
            log_p = gaussian_log_p(out, mean, log_sd)
            log_p = log_p.view(b_size, -1).sum(1)
            z_new = out
        return out, logdet, log_p, z_new


class Glow(nn.Module):
    def __init__(self, in_channel, n_flow, n_block, rng):
        super().__init__()
        self.blocks = nn.ModuleList()
        n_channel = in_channel
        for i in range(n_block - 1):
            self.blocks.append(Block(n_channel, n_flow, orthogonal(rng, n_channel * 4, n_flow)))
            n_channel *= 2
        self.blocks.append(Block(n_channel, n_flow, orthogonal(rng, n_channel * 4, n_flow),
                                 split=False))

    def forward(self, input):
        log_p_sum = 0
        logdet = 0
        out = input
        z_outs = []
        for block in self.blocks:
            out, det, log_p, z_new = block(out)
            z_outs.append(z_new)
            logdet = logdet + det
            if log_p is not None:
                log_p_sum = log_p_sum + log_p
        return log_p_sum, logdet, z_outs


def orthogonal(rng, n, count):
    return [np.linalg.qr(rng.normal(size=(n, n)))[0].astype(np.float32) for _ in range(count)]


def calc_loss(log_p, logdet, image_size, n_bins, n_channel=2):
    n_pixel = image_size * image_size * n_channel
    loss = -math.log(n_bins) * n_pixel
    loss = loss + logdet + log_p
    return ((-loss / (math.log(2) * n_pixel)).mean(), (log_p / (math.log(2) * n_pixel)).mean(),
            (logdet / (math.log(2) * n_pixel)).mean())


def blobs(rng, n, size=8, channels=2):
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = np.zeros((n, channels, size, size))
    for i in range(n):
        for c in range(channels):
            cx, cy, r = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.1, 0.3)
            out[i, c] = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
    return out


def init_weights(model, seed):
    """Conv layers drawn by NumPy (the zero-initialised ones stay zero, as the source has)."""
    rng = np.random.default_rng(seed)
    state = model.state_dict()
    for name, v in state.items():
        if name.endswith("conv.weight") or name.endswith("conv.bias") or "w_" in name \
                or "mask" in name or "eye" in name or "sign" in name or "initialized" in name \
                or not name.endswith(("weight", "bias")) or "invconv" in name:
            continue
        fan_in = int(np.prod(v.shape[1:])) if v.dim() > 1 else 16
        state[name] = torch.tensor(rng.normal(0, 0.5 / math.sqrt(fan_in), tuple(v.shape))
                                   .astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch=8, n_bits=5):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = Glow(2, n_flow=2, n_block=2, rng=rng)
    init_weights(model, seed)
    n_bins = 2.0 ** n_bits
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = [torch.tensor(blobs(rng, batch), dtype=torch.float32) for _ in range(steps)]
    noise = [torch.tensor(rng.uniform(0, 1, (batch, 2, 8, 8)), dtype=torch.float32)
             for _ in range(steps)]
    forward = model

    def step(image, noise):
        image = image * 255
        image = torch.floor(image / 2 ** (8 - n_bits))
        image = image / n_bins - 0.5
        log_p, logdet, _ = forward(image + noise / n_bins)
        logdet = logdet.mean()
        loss, log_p, log_det = calc_loss(log_p, logdet, 8, n_bins)
        model.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 50.0)
        optimizer.step()
        return loss, log_p, log_det

    # the first batch initialises every ActNorm (data-dependent), eagerly as in the source
    with torch.no_grad():
        model(images[0] - 0.5)
    if compile == "model":
        forward = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, log_ps, log_dets = [], [], []
    for image, eps in zip(images, noise):
        loss, log_p, log_det = step(image, eps)
        losses.append(loss.item())
        log_ps.append(log_p.item())
        log_dets.append(log_det.item())
    weight = model.blocks[0].flows[0].invconv.calc_weight().squeeze()
    return {"losses": losses, "log_p": log_ps, "log_det": log_dets,
            "lu_weight": weight.detach().flatten()[:8].tolist(),
            "actnorm_scale": model.blocks[1].flows[1].actnorm.scale.detach().flatten().tolist()}
