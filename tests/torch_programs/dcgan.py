"""A DCGAN and its training loop, written the way the classic PyTorch example is: a
generator of transposed convolutions with BatchNorm and ReLU ending in tanh, a discriminator
of strided convolutions with LeakyReLU ending in a sigmoid, BCELoss, two Adam optimisers
with betas (0.5, 0.999), ``fake.detach()`` for the discriminator's step, real and fake
labels made with ``torch.full``, and a fixed noise batch to sample from at the end. Random
8x8 images stand in for a dataset; the latent noise is drawn with NumPy and passed in."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

NZ, NGF, NDF, NC = 8, 8, 8, 1


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False),      # 1 -> 4
            nn.BatchNorm2d(NGF * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(NGF * 2, NC, 4, 2, 1, bias=False),      # 4 -> 8
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(NC, NDF, 4, 2, 1, bias=False),                   # 8 -> 4
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF, NDF * 2, 3, 1, 1, bias=False),
            nn.BatchNorm2d(NDF * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False),                # 4 -> 1
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def weights_init(model, rng):
    """The example's init (N(0, 0.02) convolutions, N(1, 0.02) BatchNorm weights, zero
    biases), drawn with NumPy so that every framework starts from the same weights."""
    state = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        if name.endswith("running_mean") or name.endswith("bias"):
            state[name] = torch.zeros(shape)
        elif name.endswith("running_var"):
            state[name] = torch.ones(shape)
        elif name.endswith("num_batches_tracked"):
            state[name] = value
        elif len(shape) == 1:   # a BatchNorm weight
            state[name] = torch.tensor(rng.normal(1.0, 0.02, shape).astype(np.float32))
        else:
            state[name] = torch.tensor(rng.normal(0.0, 0.02, shape).astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch_size=8):
    rng = np.random.default_rng(seed)
    netG, netD = Generator(), Discriminator()
    weights_init(netG, rng)
    weights_init(netD, rng)
    criterion = nn.BCELoss()
    fixed_noise = torch.tensor(rng.normal(0, 1, (4, NZ, 1, 1)), dtype=torch.float32)
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
    data = torch.tensor(np.tanh(rng.normal(0, 1, (steps, batch_size, NC, 8, 8))),
                        dtype=torch.float32)

    def train_step(real_cpu, noise):
        # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        b_size = real_cpu.size(0)
        label = torch.full((b_size,), real_label, dtype=torch.float)
        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean()
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean()
        errD = errD_real + errD_fake
        optimizerD.step()
        # (2) Update G: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)   # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean()
        optimizerG.step()
        return errD, errG, D_x, D_G_z1, D_G_z2

    if compile == "model":  # as train.py scripts do: the modules keep their methods
        netG, netD = torch.compile(netG), torch.compile(netD)
    elif compile:
        train_step = torch.compile(train_step)
    lossD, lossG, probs = [], [], []
    for i in range(steps):
        noise = torch.tensor(rng.normal(0, 1, (batch_size, NZ, 1, 1)), dtype=torch.float32)
        errD, errG, D_x, D_G_z1, D_G_z2 = train_step(data[i], noise)
        lossD.append(errD.item())
        lossG.append(errG.item())
        probs.append([D_x.item(), D_G_z1.item(), D_G_z2.item()])
    netG.eval()
    with torch.no_grad():
        fake = netG(fixed_noise).detach().cpu()
    return {"lossD": lossD, "lossG": lossG, "probs": probs,
            "sample_means": fake.mean(dim=(1, 2, 3)).tolist()}
