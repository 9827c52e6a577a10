"""A PPO update for a bounded continuous action with a Beta policy, as car-racing PPO code
writes it: a shared trunk with ``alpha = F.softplus(self.alpha_head(x)) + 1`` and ``beta``
likewise, ``torch.distributions.Beta(alpha, beta)``, actions drawn in NumPy from the
detached concentrations (``.detach().cpu().numpy()``) and scored with ``dist.log_prob(a)
.sum(dim=1)``; returns and GAE advantages computed in float64 (a ``torch.float64`` tensor
built from NumPy, normalised with ``(adv - adv.mean()) / (adv.std() + 1e-8)`` and cast by
``.float()``); the clipped surrogate ``torch.min(surr1, surr2)`` with ``torch.clamp(ratio,
1 - eps, 1 + eps)``, a ``F.smooth_l1_loss`` value loss, the entropy bonus, minibatches by
``BatchSampler(SubsetRandomSampler(...))``-style NumPy index lists, ``clip_grad_norm_``, and
the clipped fraction ``(torch.abs(ratio - 1.0) > clip).float().mean()`` logged; the value
baseline in float64 (the critic's head a ``nn.Linear(..., dtype=torch.float64)`` fed
``x.double()``)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Beta

OBS, ACT = 5, 2


class Net(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(OBS, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())
        self.alpha_head = nn.Linear(hidden, ACT)
        self.beta_head = nn.Linear(hidden, ACT)
        self.v = nn.Linear(hidden, 1, dtype=torch.float64)

    def forward(self, x):
        h = self.trunk(x)
        alpha = F.softplus(self.alpha_head(h)) + 1
        beta = F.softplus(self.beta_head(h)) + 1
        v = self.v(h.double())
        return (alpha, beta), v


def rollout(rng, net, n):
    """Observations, actions, their log-probabilities and the rewards of a toy task (the
    reward is larger for actions close to a target the observation encodes)."""
    obs = rng.normal(0, 1, (n, OBS)).astype(np.float32)
    with torch.no_grad():
        (alpha, beta), value = net(torch.from_numpy(obs))
    a, b = alpha.detach().cpu().numpy(), beta.detach().cpu().numpy()
    actions = rng.beta(a, b).astype(np.float32).clip(1e-4, 1 - 1e-4)
    with torch.no_grad():
        logp = Beta(alpha, beta).log_prob(torch.from_numpy(actions)).sum(dim=1)
    target = 1 / (1 + np.exp(-obs[:, :ACT]))
    rewards = 1 - np.abs(actions - target).sum(1)
    return obs, actions, logp, rewards.astype(np.float64), value.squeeze(1).numpy()


def gae(rewards, values, gamma=0.9, lam=0.95):
    advantages, last = np.zeros_like(rewards), 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        last = delta + gamma * lam * last
        advantages[t] = last
    return advantages, advantages + values


def main(steps=10, compile=False, seed=0, n=24, minibatch=8, clip=0.2):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = Net()
    for p in model.parameters():
        p.data.copy_(torch.from_numpy(rng.normal(0, 0.4, tuple(p.shape))).to(p.dtype))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    net = model

    def update(obs, actions, old_logp, adv, ret):
        (alpha, beta), value = net(obs)
        dist = Beta(alpha, beta)
        logp = dist.log_prob(actions).sum(dim=1)
        ratio = torch.exp(logp - old_logp)
        surr1 = ratio * adv
        surr2 = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv
        action_loss = -torch.min(surr1, surr2).mean()
        value_loss = F.smooth_l1_loss(value.squeeze(1), ret)
        entropy = dist.entropy().sum(dim=1).mean()
        loss = action_loss + 2.0 * value_loss.float() - 0.01 * entropy
        clip_fraction = (torch.abs(ratio - 1.0) > clip).float().mean()
        optimizer.zero_grad()
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        return loss, ratio.mean(), value_loss, entropy, clip_fraction, grad_norm

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        update = torch.compile(update)
    names = ("loss", "ratio", "value_loss", "entropy", "clipped", "grad_norm")
    logs = {k: [] for k in names + ("reward",)}
    for _ in range(steps):
        obs, actions, logp, rewards, values = rollout(rng, net, n)
        adv, ret = gae(rewards, values)
        adv = torch.tensor(adv, dtype=torch.float64)
        adv = ((adv - adv.mean()) / (adv.std() + 1e-8)).float()
        ret = torch.from_numpy(ret)
        logs["reward"].append(float(rewards.mean()))
        for _ in range(2):
            for idx in np.split(rng.permutation(n), n // minibatch):
                index = torch.from_numpy(idx)
                out = update(torch.from_numpy(obs)[index], torch.from_numpy(actions)[index],
                             logp[index], adv[index], ret[index])
                for key, value in zip(names, out):
                    logs[key].append(value.item())
    assert model.v.weight.dtype == torch.float64
    logs["v_weight"] = model.v.weight.flatten().tolist()
    return logs
