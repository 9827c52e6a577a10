"""A small Glow-style flow in the style of the normflows and nflows packages: invertible
1x1 convolutions initialised from ``torch.linalg.qr`` of a random matrix, in both forms
(``use_lu``: ``P, L, U = torch.lu_unpack(*Q.lu())``, a fixed permutation buffer, a
learned strictly lower ``L``, strictly upper ``U`` and log-diagonal, the weight assembled
by ``tril``/``triu``/``diag`` and inverted by ``torch.inverse`` in float64 then cast back;
plain: the weight itself, its log-determinant by ``torch.slogdet``), applied by
``F.conv2d`` of a ``W.view(C, C, 1, 1)``; ActNorm initialised from the first batch's
statistics; affine couplings on a channel split (``torch.chunk``) with a ``tanh``-bounded
log-scale; a dense invertible layer on the flattened output whose log-determinant is the
sum of ``log|diag U|`` of ``torch.linalg.lu_factor`` of its weight (differentiated through
the factorisation) and whose inverse is ``torch.linalg.lu_solve``; the loss in bits per
dimension; the reconstruction error of the inverse pass, samples drawn from the base
distribution and run backwards."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Invertible1x1Conv(nn.Module):
    def __init__(self, num_channels, Q, use_lu=False):
        super().__init__()
        self.num_channels = num_channels
        self.use_lu = use_lu
        if use_lu:
            P, L, U = torch.lu_unpack(*Q.lu())
            self.register_buffer("P", P)
            self.L = nn.Parameter(L)
            S = U.diag()
            self.register_buffer("sign_S", torch.sign(S))
            self.log_S = nn.Parameter(torch.log(torch.abs(S)))
            self.U = nn.Parameter(torch.triu(U, diagonal=1))
            self.register_buffer("eye", torch.diag(torch.ones(self.num_channels)))
        else:
            self.W = nn.Parameter(Q)

    def _assemble_W(self, inverse=False):
        L = torch.tril(self.L, diagonal=-1) + self.eye
        U = torch.triu(self.U, diagonal=1) + torch.diag(self.sign_S * torch.exp(self.log_S))
        if inverse:
            L_inv = torch.inverse(L.double()).type(self.log_S.dtype)
            U_inv = torch.inverse(U.double()).type(self.log_S.dtype)
            return U_inv @ L_inv @ self.P.t()
        return self.P @ L @ U

    def forward(self, x, reverse=False):
        if self.use_lu:
            W = self._assemble_W(inverse=reverse)
            log_det = torch.sum(self.log_S)
        else:
            W = torch.inverse(self.W.double()).type(self.W.dtype) if reverse else self.W
            log_det = torch.slogdet(self.W)[1]
        z = F.conv2d(x, W.view(*W.size(), 1, 1))
        log_det = log_det * x.size(2) * x.size(3)
        return z, -log_det if reverse else log_det


class ActNorm(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.log_scale = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.initialized = False

    def forward(self, x, reverse=False):
        if not self.initialized:
            with torch.no_grad():
                mean = x.mean(dim=(0, 2, 3), keepdim=True)
                std = x.std(dim=(0, 2, 3), keepdim=True)
                self.loc.data.copy_(-mean)
                self.log_scale.data.copy_(torch.log(1 / (std + 1e-6)))
            self.initialized = True
        hw = x.size(2) * x.size(3)
        if reverse:
            return x * torch.exp(-self.log_scale) - self.loc, -hw * self.log_scale.sum()
        return (x + self.loc) * torch.exp(self.log_scale), hw * self.log_scale.sum()


class AffineCoupling(nn.Module):
    def __init__(self, channels, hidden=8):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(channels // 2, hidden, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(hidden, channels, 3, padding=1))

    def forward(self, x, reverse=False):
        xa, xb = torch.chunk(x, 2, dim=1)
        log_s, t = self.net(xa).chunk(2, dim=1)
        log_s = torch.tanh(log_s)
        if reverse:
            yb = (xb - t) * torch.exp(-log_s)
            return torch.cat([xa, yb], dim=1), -log_s.flatten(1).sum(1)
        yb = xb * torch.exp(log_s) + t
        return torch.cat([xa, yb], dim=1), log_s.flatten(1).sum(1)


class LUDense(nn.Module):
    """An invertible dense layer on the flattened tensor (its weight stays square)."""

    def __init__(self, features, weight):
        super().__init__()
        self.weight = nn.Parameter(weight)

    def forward(self, x, reverse=False):
        shape = x.shape
        flat = x.flatten(1)
        LU, pivots = torch.linalg.lu_factor(self.weight)
        log_det = torch.log(torch.abs(torch.diagonal(LU))).sum()
        if reverse:
            out = torch.linalg.lu_solve(LU, pivots, flat.T).T
            return out.reshape(shape), -log_det
        return (flat @ self.weight.T).reshape(shape), log_det


class Glow(nn.Module):
    def __init__(self, channels, size, qs, dense_weight):
        super().__init__()
        self.flows = nn.ModuleList()
        for i, Q in enumerate(qs):
            self.flows.append(ActNorm(channels))
            self.flows.append(Invertible1x1Conv(channels, Q, use_lu=i % 2 == 0))
            self.flows.append(AffineCoupling(channels))
        self.dense = LUDense(channels * size * size, dense_weight)

    def forward(self, x):
        log_det = torch.zeros(x.size(0))
        for flow in self.flows:
            x, ld = flow(x)
            log_det = log_det + ld
        x, ld = self.dense(x)
        return x, log_det + ld

    def reverse(self, z):
        z, _ = self.dense(z, reverse=True)
        for flow in reversed(self.flows):
            z, _ = flow(z, reverse=True)
        return z


def nll_bits_per_dim(z, log_det):
    dims = z[0].numel()
    log_pz = -0.5 * (z ** 2 + math.log(2 * math.pi)).flatten(1).sum(1)
    return -(log_pz + log_det).mean() / (dims * math.log(2))


def make_batch(rng, n=6, channels=4, size=3):
    base = rng.normal(0, 1, (n, 1, size, size))
    x = np.concatenate([base, 0.5 * base ** 2, -base + rng.normal(0, 0.2, base.shape),
                        rng.normal(0, 0.5, base.shape)], axis=1)[:, :channels]
    return torch.from_numpy(x.astype(np.float32))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    channels, size = 4, 3
    qs = [torch.linalg.qr(torch.from_numpy(rng.normal(size=(channels, channels))
                                           .astype(np.float32)))[0] for _ in range(2)]
    features = channels * size * size
    dense = torch.from_numpy((np.eye(features) + rng.normal(0, 0.2, (features, features)))
                             .astype(np.float32))
    model = Glow(channels, size, qs, dense)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("net.2.weight"):
                p.copy_(torch.from_numpy(rng.normal(0, 0.05, p.shape).astype(np.float32)))
            elif ".net." in name:
                p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))
    model(make_batch(rng))            # ActNorm's data-dependent initialisation
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    net = torch.compile(model) if compile == "model" else model

    def train_step(x):
        optimizer.zero_grad()
        z, log_det = net(x)
        loss = nll_bits_per_dim(z, log_det)
        loss.backward()
        optimizer.step()
        return loss.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = [train_step(make_batch(rng)).item() for _ in range(steps)]
    x = make_batch(rng, n=3)
    with torch.no_grad():
        z, log_det = model(x)
        recon = model.reverse(z)
        samples = model.reverse(torch.from_numpy(rng.normal(0, 0.7, (2, channels, size, size))
                                                 .astype(np.float32)))
    return {"log": log, "log_det": log_det.tolist(), "recon": recon.flatten()[:8].tolist(),
            "inverts": bool((recon - x).abs().max() < 1e-4),
            "samples": samples.flatten()[:10].tolist(),
            "log_S": model.flows[1].log_S.detach().tolist()}
