"""A WGAN-GP on a toy 2-D distribution (eight Gaussians on a ring), written the way the
PyTorch ports of the paper's toy code are: an MLP generator and critic, ``n_critic`` critic
updates per generator update, the critic's parameters switched with ``p.requires_grad =
True/False`` around the two phases, fake samples ``netG(noise).detach()`` for the critic,
a gradient penalty on random interpolates ``(alpha * real + (1 - alpha) * fake)
.requires_grad_(True)`` from ``torch.autograd.grad(outputs, inputs, grad_outputs=
torch.ones_like(...), create_graph=True, retain_graph=True, only_inputs=True)[0]`` and
``((gradients.norm(2, dim=1) - 1) ** 2).mean()``, the Wasserstein estimate ``D(real).mean()
- D(fake).mean()`` logged with ``.item()``, and Adam with ``betas=(0.5, 0.9)``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.autograd as autograd
import torch.nn as nn

DIM, LAMBDA = 32, 0.1


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(2, DIM), nn.ReLU(True), nn.Linear(DIM, DIM),
                                  nn.ReLU(True), nn.Linear(DIM, 2))

    def forward(self, noise):
        return self.main(noise)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(2, DIM), nn.LeakyReLU(0.2), nn.Linear(DIM, DIM),
                                  nn.Tanh(), nn.Linear(DIM, 1))

    def forward(self, inputs):
        return self.main(inputs).view(-1)


def calc_gradient_penalty(netD, real_data, fake_data, alpha):
    alpha = alpha.expand(real_data.size())
    interpolates = (alpha * real_data + (1 - alpha) * fake_data).requires_grad_(True)
    disc_interpolates = netD(interpolates)
    gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                              grad_outputs=torch.ones_like(disc_interpolates),
                              create_graph=True, retain_graph=True, only_inputs=True)[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean() * LAMBDA


def eight_gaussians(rng, batch):
    centers = [(np.cos(a), np.sin(a)) for a in np.arange(8) * np.pi / 4]
    idx = rng.integers(0, 8, batch)
    pts = np.array(centers)[idx] * 2 + rng.normal(0, 0.02, (batch, 2))
    return (pts / 1.414).astype(np.float32)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=16, critic_iters=3):
    netG, netD = Generator(), Critic()
    init_weights(netG, seed)
    init_weights(netD, seed + 1)
    optimizerD = torch.optim.Adam(netD.parameters(), lr=1e-3, betas=(0.5, 0.9))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=1e-3, betas=(0.5, 0.9))
    rng = np.random.default_rng(seed + 2)

    def critic_step(real, noise, alpha):
        netD.zero_grad()
        D_real = netD(real).mean()
        fake = netG(noise).detach()
        D_fake = netD(fake).mean()
        gradient_penalty = calc_gradient_penalty(netD, real, fake, alpha)
        D_cost = D_fake - D_real + gradient_penalty
        D_cost.backward()
        optimizerD.step()
        return D_cost, D_real - D_fake

    def generator_step(real, noise):
        netG.zero_grad()
        G = netD(netG(noise)).mean()
        G_cost = -G
        G_cost.backward()
        optimizerG.step()
        return G_cost

    if compile == "model":
        netG, netD = torch.compile(netG), torch.compile(netD)
    elif compile:
        critic_step, generator_step = torch.compile(critic_step), torch.compile(generator_step)
    d_costs, w_dists, g_costs = [], [], []
    for _ in range(steps):
        for p in netD.parameters():
            p.requires_grad = True
        for _ in range(critic_iters):
            real = torch.tensor(eight_gaussians(rng, batch))
            noise = torch.tensor(rng.normal(size=(batch, 2)).astype(np.float32))
            alpha = torch.tensor(rng.uniform(size=(batch, 1)).astype(np.float32))
            d_cost, w_dist = critic_step(real, noise, alpha)
            d_costs.append(d_cost.item())
            w_dists.append(w_dist.item())
        for p in netD.parameters():
            p.requires_grad = False
        noise = torch.tensor(rng.normal(size=(batch, 2)).astype(np.float32))
        g_costs.append(generator_step(real, noise).item())
    with torch.no_grad():
        samples = netG(torch.tensor(rng.normal(size=(4, 2)).astype(np.float32)))
    return {"d_costs": d_costs, "w_dists": w_dists, "g_costs": g_costs,
            "samples": samples.flatten().tolist()}
