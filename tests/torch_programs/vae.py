"""A variational autoencoder and its training loop, written the way the classic PyTorch
example is: an MLP encoder to (mu, logvar), the reparameterisation trick, a sigmoid decoder,
binary cross-entropy plus the KL term summed over the batch, Adam, and sampling from the
prior at the end. The noise of the reparameterisation comes from a seeded NumPy generator
and is passed in, so that every framework (and a compiled step) sees the same draws."""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim


class VAE(nn.Module):
    def __init__(self, d_in=64, d_hidden=32, d_latent=4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc21 = nn.Linear(d_hidden, d_latent)
        self.fc22 = nn.Linear(d_hidden, d_latent)
        self.fc3 = nn.Linear(d_latent, d_hidden)
        self.fc4 = nn.Linear(d_hidden, d_in)
        self.d_in = d_in

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar, eps):
        std = torch.exp(0.5 * logvar)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x, eps):
        mu, logvar = self.encode(x.view(-1, self.d_in))
        z = self.reparameterize(mu, logvar, eps)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, recon_x.size(-1)), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.normal(0.0, 0.2, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch_size=8, sizes=(64, 32, 4), side=8):
    d_in, d_hidden, d_latent = sizes
    model = VAE(d_in, d_hidden, d_latent)
    init_weights(model, seed)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed + 1)
    images = rng.uniform(0.0, 1.0, (steps, batch_size, 1, side, side)).astype(np.float32)

    def train_step(data, eps):
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data, eps)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":  # as train.py scripts do: the module keeps its methods
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    model.train()
    losses = []
    for i in range(steps):
        data = torch.from_numpy(images[i])
        eps = torch.tensor(rng.normal(0.0, 1.0, (batch_size, d_latent)), dtype=torch.float32)
        losses.append(train_step(data, eps).item() / batch_size)
    model.eval()
    with torch.no_grad():
        z = torch.tensor(rng.normal(0.0, 1.0, (4, d_latent)), dtype=torch.float32)
        sample = model.decode(z)
    return {"losses": losses, "sample_means": sample.mean(dim=1).tolist()}
