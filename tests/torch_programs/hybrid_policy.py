"""A policy-gradient update with a hybrid action space, as RL libraries write it with
``torch.distributions``: a discrete head ``Categorical(logits=...)``, a continuous head
``Independent(Normal(mu, log_std.exp()), 1)`` with a state-independent ``nn.Parameter``
log-std, and a Bernoulli "fire" switch ``Bernoulli(logits=...)``; ``log_prob`` of logged
actions (from a NumPy-driven behaviour policy, with its old log-probabilities), importance
ratios ``(new_logp - old_logp).exp()`` with PPO's clipped objective, ``entropy()`` of all
three heads as a bonus, the KL from the old policy by ``kl_divergence(old, new)`` (an early
stop when its mean passes a target, as Spinning Up's PPO does, read with ``.item()`` outside
the step), normalised advantages ``(adv - adv.mean()) / (adv.std() + 1e-8)``, a Huber value
loss (``F.smooth_l1_loss``) and ``Normal.cdf`` for the probability of a positive action;
``clip_grad_norm_`` returning the norm that is logged."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Bernoulli, Categorical, Independent, Normal
from torch.distributions.kl import kl_divergence


class HybridPolicy(nn.Module):
    def __init__(self, obs_dim, n_discrete, act_dim, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(),
                                  nn.Linear(hidden, hidden), nn.Tanh())
        self.logits = nn.Linear(hidden, n_discrete)
        self.mu = nn.Linear(hidden, act_dim)
        self.log_std = nn.Parameter(-0.5 * torch.ones(act_dim))
        self.fire = nn.Linear(hidden, 1)
        self.value = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        discrete = Categorical(logits=self.logits(h))
        continuous = Independent(Normal(self.mu(h), self.log_std.exp()), 1)
        fire = Bernoulli(logits=self.fire(h).squeeze(-1))
        return discrete, continuous, fire, self.value(h).squeeze(-1)


def init_weights(module, rng):
    for name, p in module.named_parameters():
        if name == "log_std":
            continue
        if p.dim() > 1:
            scale = 0.01 if name.startswith(("logits", "mu", "fire")) else 1 / np.sqrt(p.shape[1])
            p.data.copy_(torch.tensor(rng.normal(0, scale, tuple(p.shape)), dtype=torch.float32))
        else:
            p.data.zero_()


def rollout(rng, n, obs_dim=4, n_discrete=3, act_dim=2):
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    a_d = rng.integers(0, n_discrete, n)
    a_c = rng.normal(0, 0.6, (n, act_dim)).astype(np.float32)
    a_f = (rng.random(n) < 0.5).astype(np.float32)
    reward = (obs[:, 0] * (a_d == 1) - np.abs(a_c - obs[:, 1:3]).sum(1) + a_f * obs[:, 3])
    old_logp = (np.log(1 / n_discrete) - 0.5 * ((a_c / 0.6) ** 2).sum(1)
                - act_dim * np.log(0.6 * np.sqrt(2 * np.pi)) + np.log(0.5))
    t = lambda v, dt=torch.float32: torch.as_tensor(v, dtype=dt)
    return (t(obs), t(a_d, torch.long), t(a_c), t(a_f), t(reward.astype(np.float32)),
            t(old_logp.astype(np.float32)))


def main(steps=10, compile=False, seed=0, batch=64, clip=0.2, target_kl=0.5):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    policy = HybridPolicy(4, 3, 2)
    init_weights(policy, rng)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    data = [rollout(rng, batch) for _ in range(steps)]
    with torch.no_grad():
        old = [policy(d[0]) for d in data]
    net = policy

    def update(obs, a_d, a_c, a_f, reward, old_logp, old_d, old_c, old_f):
        discrete, continuous, fire, value = net(obs)
        logp = discrete.log_prob(a_d) + continuous.log_prob(a_c) + fire.log_prob(a_f)
        adv = reward - value.detach()
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        ratio = (logp - old_logp).exp()
        clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * adv
        loss_pi = -(torch.min(ratio * adv, clipped)).mean()
        entropy = (discrete.entropy() + continuous.entropy() + fire.entropy()).mean()
        loss_v = F.smooth_l1_loss(value, reward)
        kl = (kl_divergence(old_d, discrete) + kl_divergence(old_c, continuous)
              + kl_divergence(old_f, fire)).mean()
        loss = loss_pi + 0.5 * loss_v - 0.01 * entropy
        optimizer.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(policy.parameters(), max_norm=0.5)
        optimizer.step()
        p_pos = 1 - continuous.base_dist.cdf(torch.zeros_like(a_c))
        return loss, entropy, kl, norm, p_pos.mean()

    if compile == "model":
        net = torch.compile(policy)
    elif compile:
        update = torch.compile(update)
    losses, entropies, kls, norms, p_pos = [], [], [], [], []
    for d, o in zip(data, old):
        loss, entropy, kl, norm, pp = update(*d, *o[:3])
        losses.append(loss.item())
        entropies.append(entropy.item())
        kls.append(kl.item())
        norms.append(norm.item())
        p_pos.append(pp.item())
        if kl.item() > target_kl:
            break
    with torch.no_grad():
        discrete, continuous, fire, _ = policy(data[0][0][:8])
    return {"losses": losses, "entropies": entropies, "kls": kls, "grad_norms": norms,
            "p_positive": p_pos, "greedy": discrete.probs.argmax(-1).tolist(),
            "mean_action": continuous.mean[:2].flatten().tolist(),
            "fire_probs": fire.probs[:4].tolist(), "log_std": policy.log_std.tolist()}
