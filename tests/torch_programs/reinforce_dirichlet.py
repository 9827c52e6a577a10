"""REINFORCE with a learned baseline on a contextual allocation task, as policy-gradient
tutorials write it for portfolio and mixed action spaces: a ``Dirichlet`` policy over
weights (concentrations by ``F.softplus`` plus one), a ``Categorical`` choice and a
``LowRankMultivariateNormal`` continuous action, their ``log_prob`` summed and weighted by
normalised discounted returns (reversed ``cumsum`` over ``flip`` with discount powers),
``entropy`` bonuses, an ``OneHotCategorical`` whose ``log_prob`` reads the one-hot
actions, a value baseline by ``F.smooth_l1_loss`` and ``clip_grad_value_``. The actions
come from a seeded NumPy generator (each framework draws its own numbers)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import (Categorical, Dirichlet, LowRankMultivariateNormal,
                                 OneHotCategorical)


class Policy(nn.Module):
    def __init__(self, obs=4, assets=3, choices=4, act=2, hidden=16):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs, hidden), nn.ELU())
        self.alpha = nn.Linear(hidden, assets)
        self.logits = nn.Linear(hidden, choices)
        self.loc = nn.Linear(hidden, act)
        self.factor = nn.Parameter(torch.zeros(act, 1))
        self.log_diag = nn.Parameter(torch.zeros(act))
        self.value = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        weights = Dirichlet(F.softplus(self.alpha(h)) + 1.0)
        choice = Categorical(logits=self.logits(h))
        onehot = OneHotCategorical(logits=self.logits(h))
        cov_factor = self.factor.expand(obs.shape[0], -1, -1)
        move = LowRankMultivariateNormal(self.loc(h), cov_factor, self.log_diag.exp())
        return weights, choice, onehot, move, self.value(h).squeeze(-1)


def discounted(rewards, gamma):
    """Returns-to-go of a [T] reward sequence: a reversed cumulative sum scaled by powers."""
    powers = gamma ** torch.arange(rewards.shape[0], dtype=rewards.dtype)
    return torch.flip(torch.cumsum(torch.flip(rewards * powers, [0]), 0), [0]) / powers


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    policy = Policy()
    policy.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                                .astype(np.float32))
                            for k, v in policy.state_dict().items()})
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.01)
    net = torch.compile(policy) if compile == "model" else policy

    def update(obs, w, c, a, rewards):
        weights, choice, onehot, move, value = net(obs)
        returns = discounted(rewards, 0.95)
        advantage = returns - value.detach()
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        logp = weights.log_prob(w) + choice.log_prob(c) + move.log_prob(a)
        logp = logp + onehot.log_prob(F.one_hot(c, 4).float()) * 0.5
        entropy = weights.entropy().mean() + choice.entropy().mean() + move.entropy().mean()
        loss = -(logp * advantage).mean() - 0.01 * entropy \
            + 0.5 * F.smooth_l1_loss(value, returns)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy.parameters(), 0.5)
        optimizer.step()
        return loss, entropy

    if compile is True:
        update = torch.compile(update)
    losses = []
    for _ in range(steps):
        t = 8
        obs = torch.from_numpy(rng.normal(0, 1, (t, 4)).astype(np.float32))
        w = torch.from_numpy(rng.dirichlet([1.0, 2.0, 1.5], t).astype(np.float32))
        c = torch.from_numpy(rng.integers(0, 4, t))
        a = torch.from_numpy(rng.normal(0, 1, (t, 2)).astype(np.float32))
        rewards = torch.from_numpy(rng.normal(0, 1, t).astype(np.float32))
        losses.append([v.item() for v in update(obs, w, c, a, rewards)])
    return {"losses": losses}
