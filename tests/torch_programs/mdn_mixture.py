"""A mixture density network (Bishop's inverse problem, as the pytorch-mdn style scripts
write it): one trunk whose head is cut by ``torch.tensor_split`` into mixture logits,
means and scales, the means reshaped by ``nn.Unflatten``; the likelihood built from
``torch.distributions``: ``MixtureSameFamily(Categorical(logits=...),
Independent(Normal(mu, sigma), 1))`` with ``F.softplus`` scales, trained on its negative
``log_prob`` with ``Adamax`` and ``ExponentialLR``; the mixture's ``mean`` and ``variance``,
the components' ``entropy`` and a ``kl_divergence`` between two heads read in evaluation."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, Independent, MixtureSameFamily, Normal


class MDN(nn.Module):
    def __init__(self, n_in=1, n_out=2, hidden=24, n_components=3):
        super().__init__()
        self.k, self.d = n_components, n_out
        self.trunk = nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())
        self.head = nn.Linear(hidden, n_components * (1 + 2 * n_out))
        self.unflatten = nn.Unflatten(1, (n_components, n_out))

    def forward(self, x):
        h = self.head(self.trunk(x))
        logits, mu, s = torch.tensor_split(h, (self.k, self.k + self.k * self.d), dim=1)
        sigma = F.softplus(self.unflatten(s)) + 1e-3
        mix = Categorical(logits=logits)
        comp = Independent(Normal(self.unflatten(mu), sigma), 1)
        return MixtureSameFamily(mix, comp)


def make_data(rng, n):
    y = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    x = (y + 0.3 * np.sin(3 * y) + rng.normal(0, 0.05, (n, 1))).astype(np.float32)
    target = np.concatenate([y, y ** 2], 1).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(target)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = MDN()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.Adamax(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    net = torch.compile(model) if compile == "model" else model

    def train_step(x, y):
        optimizer.zero_grad()
        dist = net(x)
        loss = -dist.log_prob(y).mean()
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        train_step = torch.compile(train_step)
    losses = []
    for _ in range(steps):
        x, y = make_data(rng, 32)
        losses.append(train_step(x, y).item())
        scheduler.step()
    x, y = make_data(rng, 5)
    with torch.no_grad():
        dist = net(x)
        other = net(x + 0.1)
        kl = torch.distributions.kl_divergence(dist.component_distribution,
                                               other.component_distribution)
        stats = [dist.mean, dist.variance, dist.mixture_distribution.probs,
                 dist.component_distribution.entropy(), kl, dist.log_prob(y)]
    return {"losses": losses, "eval": torch.cat([s.flatten() for s in stats]).tolist()}
