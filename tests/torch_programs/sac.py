"""Soft actor-critic as Spinning Up's PyTorch SAC writes it, on a toy continuous task: an
``MLPActorCritic`` with a squashed Gaussian actor (``Normal(mu, std)``, the sample
``mu + std * eps`` with ``eps`` from NumPy as ``rsample`` would reparametrise it,
``logp_pi = pi_distribution.log_prob(pi_action).sum(axis=-1)`` minus the tanh correction
``(2*(np.log(2) - pi_action - F.softplus(-2*pi_action))).sum(axis=1)``,
``torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)``), twin Q networks over
``torch.cat([obs, act], dim=-1)`` squeezed with ``torch.squeeze(q, -1)``, a target copy made by
``deepcopy`` whose parameters are frozen (``p.requires_grad = False``) and updated by
polyak averaging in place (``p_targ.data.mul_(polyak); p_targ.data.add_((1 - polyak) *
p.data)``) under ``no_grad``, ``itertools.chain`` of both Q networks' parameters in one
Adam, the Q parameters frozen during the policy step and unfrozen after, and an
automatically tuned temperature (``log_alpha`` a leaf tensor with its own Adam)."""
import itertools
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions.normal import Normal

LOG_STD_MAX, LOG_STD_MIN = 2, -20


def mlp(sizes, activation, output_activation=nn.Identity):
    layers = []
    for j in range(len(sizes) - 1):
        act = activation if j < len(sizes) - 2 else output_activation
        layers += [nn.Linear(sizes[j], sizes[j + 1]), act()]
    return nn.Sequential(*layers)


class SquashedGaussianMLPActor(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden_sizes, activation, act_limit):
        super().__init__()
        self.net = mlp([obs_dim] + list(hidden_sizes), activation, activation)
        self.mu_layer = nn.Linear(hidden_sizes[-1], act_dim)
        self.log_std_layer = nn.Linear(hidden_sizes[-1], act_dim)
        self.act_limit = act_limit

    def forward(self, obs, eps, deterministic=False, with_logprob=True):
        net_out = self.net(obs)
        mu = self.mu_layer(net_out)
        log_std = self.log_std_layer(net_out)
        log_std = torch.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)
        std = torch.exp(log_std)
        pi_distribution = Normal(mu, std)
        pi_action = mu if deterministic else mu + std * eps
        if with_logprob:
            logp_pi = pi_distribution.log_prob(pi_action).sum(axis=-1)
            logp_pi -= (2 * (np.log(2) - pi_action - F.softplus(-2 * pi_action))).sum(axis=1)
        else:
            logp_pi = None
        pi_action = torch.tanh(pi_action)
        pi_action = self.act_limit * pi_action
        return pi_action, logp_pi


class MLPQFunction(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden_sizes, activation):
        super().__init__()
        self.q = mlp([obs_dim + act_dim] + list(hidden_sizes) + [1], activation)

    def forward(self, obs, act):
        q = self.q(torch.cat([obs, act], dim=-1))
        return torch.squeeze(q, -1)


class MLPActorCritic(nn.Module):
    def __init__(self, obs_dim, act_dim, act_limit, hidden_sizes=(32, 32), activation=nn.ReLU):
        super().__init__()
        self.pi = SquashedGaussianMLPActor(obs_dim, act_dim, hidden_sizes, activation, act_limit)
        self.q1 = MLPQFunction(obs_dim, act_dim, hidden_sizes, activation)
        self.q2 = MLPQFunction(obs_dim, act_dim, hidden_sizes, activation)


def init_weights(module, rng):
    state = module.state_dict()
    for name, v in state.items():
        fan_in = v.shape[1] if v.dim() > 1 else v.shape[0]
        state[name] = torch.tensor(rng.normal(0, 1 / np.sqrt(fan_in), tuple(v.shape))
                                   .astype(np.float32))
    module.load_state_dict(state)


def replay(rng, n, obs_dim=3, act_dim=2):
    """Transitions of a point pushed towards the origin: reward -|next obs|."""
    o = rng.normal(size=(n, obs_dim)).astype(np.float32)
    a = rng.uniform(-1, 1, (n, act_dim)).astype(np.float32)
    o2 = o.copy()
    o2[:, :act_dim] += 0.5 * a
    r = -np.linalg.norm(o2, axis=1).astype(np.float32)
    d = (rng.random(n) < 0.1).astype(np.float32)
    return {k: torch.as_tensor(v) for k, v in dict(obs=o, act=a, rew=r, obs2=o2, done=d).items()}


def main(steps=10, compile=False, seed=0, batch=32, gamma=0.99, polyak=0.9, lr=1e-3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    ac = MLPActorCritic(3, 2, act_limit=1.0)
    init_weights(ac, rng)
    ac_targ = deepcopy(ac)
    for p in ac_targ.parameters():
        p.requires_grad = False
    q_params = itertools.chain(ac.q1.parameters(), ac.q2.parameters())
    pi_optimizer = torch.optim.Adam(ac.pi.parameters(), lr=lr)
    q_optimizer = torch.optim.Adam(q_params, lr=lr)
    q_params = list(itertools.chain(ac.q1.parameters(), ac.q2.parameters()))
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha_optimizer = torch.optim.Adam([log_alpha], lr=lr)
    target_entropy = -2.0
    data = [(replay(rng, batch), torch.tensor(rng.normal(size=(batch, 2)), dtype=torch.float32),
             torch.tensor(rng.normal(size=(batch, 2)), dtype=torch.float32))
            for _ in range(steps)]
    pi = ac.pi

    def compute_loss_q(data, eps2):
        o, a, r, o2, d = data["obs"], data["act"], data["rew"], data["obs2"], data["done"]
        alpha = log_alpha.exp().detach()
        q1 = ac.q1(o, a)
        q2 = ac.q2(o, a)
        with torch.no_grad():
            a2, logp_a2 = pi(o2, eps2)
            q1_pi_targ = ac_targ.q1(o2, a2)
            q2_pi_targ = ac_targ.q2(o2, a2)
            q_pi_targ = torch.min(q1_pi_targ, q2_pi_targ)
            backup = r + gamma * (1 - d) * (q_pi_targ - alpha * logp_a2)
        loss_q1 = ((q1 - backup) ** 2).mean()
        loss_q2 = ((q2 - backup) ** 2).mean()
        return loss_q1 + loss_q2

    def compute_loss_pi(data, eps):
        o = data["obs"]
        alpha = log_alpha.exp().detach()
        pi_action, logp_pi = pi(o, eps)
        q1_pi = ac.q1(o, pi_action)
        q2_pi = ac.q2(o, pi_action)
        q_pi = torch.min(q1_pi, q2_pi)
        loss_pi = (alpha * logp_pi - q_pi).mean()
        return loss_pi, logp_pi

    def update(data, eps, eps2):
        q_optimizer.zero_grad()
        loss_q = compute_loss_q(data, eps2)
        loss_q.backward()
        q_optimizer.step()
        for p in q_params:
            p.requires_grad = False
        pi_optimizer.zero_grad()
        loss_pi, logp_pi = compute_loss_pi(data, eps)
        loss_pi.backward()
        pi_optimizer.step()
        for p in q_params:
            p.requires_grad = True
        alpha_optimizer.zero_grad()
        alpha_loss = -(log_alpha * (logp_pi.detach() + target_entropy)).mean()
        alpha_loss.backward()
        alpha_optimizer.step()
        with torch.no_grad():
            for p, p_targ in zip(ac.parameters(), ac_targ.parameters()):
                p_targ.data.mul_(polyak)
                p_targ.data.add_((1 - polyak) * p.data)
        return loss_q, loss_pi

    if compile == "model":
        pi = torch.compile(ac.pi)
    elif compile:
        update = torch.compile(update)
    q_losses, pi_losses = [], []
    for batch_data, eps, eps2 in data:
        loss_q, loss_pi = update(batch_data, eps, eps2)
        q_losses.append(loss_q.item())
        pi_losses.append(loss_pi.item())
    with torch.no_grad():
        action, _ = ac.pi(torch.ones(1, 3), torch.zeros(1, 2), deterministic=True,
                          with_logprob=False)
    return {"losses": q_losses, "pi_losses": pi_losses, "alpha": [log_alpha.exp().item()],
            "action": action.flatten().tolist(),
            "target_q": ac_targ.q1.q[0].weight[0].tolist()}
