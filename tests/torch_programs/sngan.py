"""A spectrally normalised GAN (Miyato et al.) written the way current PyTorch code spells
it with ``torch.nn.utils.parametrizations``: a DCGAN-style generator (``nn.ConvTranspose2d``
with ``nn.BatchNorm2d`` and ``nn.ReLU(True)``, ``Tanh`` output, its first layer under
``parametrizations.weight_norm``), a discriminator whose every ``nn.Conv2d`` and
``nn.Linear`` is wrapped by ``spectral_norm(...)`` (power iteration buffers ``_u``/``_v``
updated in training mode, frozen in eval) with ``nn.LeakyReLU(0.1)``, the hinge loss
(``F.relu(1.0 - d_real).mean() + F.relu(1.0 + d_fake).mean()`` and ``-d_fake.mean()``),
``Adam(betas=(0.0, 0.9))`` for both, two critic steps per generator step with
``fake.detach()``, and a hand-written parametrization registered by
``parametrize.register_parametrization`` (a learned output gain kept positive by
``softplus`` with a ``right_inverse``, assigned with ``layer.weight = ...``); the spectral
norm's largest singular value checked with ``torch.linalg.matrix_norm(..., ord=2)`` after
training, and an EMA-free sampling pass under ``torch.no_grad`` with ``G.eval()``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

nz, ngf, ndf = 8, 8, 8


class SoftplusGain(nn.Module):
    """A positive gain: the stored tensor is softplus's inverse of it."""

    def forward(self, X):
        return F.softplus(X)

    def right_inverse(self, Y):
        return Y + torch.log(-torch.expm1(-Y))


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            weight_norm(nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False)),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, 1, 4, 2, 1, bias=False),
            nn.Tanh())

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            spectral_norm(nn.Conv2d(1, ndf, 4, 2, 1)),
            nn.LeakyReLU(0.1),
            spectral_norm(nn.Conv2d(ndf, ndf * 2, 4, 2, 1)),
            nn.LeakyReLU(0.1))
        self.fc = spectral_norm(nn.Linear(ndf * 2 * 4 * 4, 1))
        self.gain = nn.Linear(1, 1, bias=False)
        parametrize.register_parametrization(self.gain, "weight", SoftplusGain())

    def forward(self, input):
        h = self.main(input)
        return self.gain(self.fc(h.view(h.size(0), -1))).view(-1)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name
    (the power iteration's vectors as unit vectors)."""
    rng = np.random.default_rng(seed)
    state, names = {}, model.state_dict()
    for name, v in names.items():
        norm_layer = name.rsplit(".", 1)[0] + ".running_mean" in names
        if "running" in name or "num_batches" in name or (norm_layer and name.endswith("bias")):
            state[name] = v
        elif norm_layer:
            state[name] = torch.tensor((1 + rng.normal(0, 0.02, tuple(v.shape)))
                                       .astype(np.float32))
        elif name.endswith("_u") or name.endswith("_v"):
            a = rng.normal(0, 1, tuple(v.shape))
            state[name] = torch.tensor((a / np.linalg.norm(a)).astype(np.float32))
        else:
            state[name] = torch.tensor(rng.normal(0, 0.2, tuple(v.shape)).astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch=6, n_critic=2):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    netG, netD = Generator(), Discriminator()
    init_weights(netG, seed)
    init_weights(netD, seed + 1)
    netD.gain.weight = torch.full((1, 1), 0.5)
    optD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.0, 0.9))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.0, 0.9))
    yy, xx = np.mgrid[0:16, 0:16]
    data = []
    for _ in range(steps):
        r = rng.uniform(3, 6, (batch, 1, 1))
        img = np.where((yy - 8) ** 2 + (xx - 8) ** 2 < r ** 2, 1.0, -1.0)[:, None]
        noise = rng.normal(0, 1, (n_critic + 1, batch, nz, 1, 1))
        data.append((torch.tensor(img, dtype=torch.float32),
                     torch.tensor(noise, dtype=torch.float32)))

    def d_step(real, z):
        optD.zero_grad()
        fake = netG(z)
        d_real = netD(real)
        d_fake = netD(fake.detach())
        errD = F.relu(1.0 - d_real).mean() + F.relu(1.0 + d_fake).mean()
        errD.backward()
        optD.step()
        return errD

    def g_step(z):
        optG.zero_grad()
        errG = -netD(netG(z)).mean()
        errG.backward()
        optG.step()
        return errG

    if compile == "model":
        netG, netD = torch.compile(netG), torch.compile(netD)
    elif compile:
        d_step, g_step = torch.compile(d_step), torch.compile(g_step)
    d_losses, g_losses = [], []
    for real, noise in data:
        netG.train()
        netD.train()
        for k in range(n_critic):
            d_losses.append(d_step(real, noise[k]).item())
        g_losses.append(g_step(noise[n_critic]).item())
    D = netD._orig_mod if hasattr(netD, "_orig_mod") else netD
    sigmas = [torch.linalg.matrix_norm(m.weight.detach().flatten(1), ord=2).item()
              for m in (D.main[0], D.main[2], D.fc)]
    netG.eval()
    netD.eval()
    with torch.no_grad():
        samples = netG(data[0][1][0])
        scores = netD(samples)
    return {"d_losses": d_losses, "g_losses": g_losses, "sigmas": sigmas,
            "gain": D.gain.weight.item(), "scores": scores.tolist(),
            "samples": samples[0, 0, 6:10, 6:10].flatten().tolist()}
