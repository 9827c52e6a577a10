"""A TRPO policy update written as the classic PyTorch implementations (ikostrikov's
``pytorch-trpo``, Spinning Up) write it: a categorical policy and a value network; the
surrogate ``(exp(logp - logp_old) * adv).mean()`` differentiated with
``torch.autograd.grad`` into a flat vector (``torch.cat([g.view(-1) ...])``); the
Fisher-vector product as the gradient of ``(grad_kl * v).sum()`` where ``grad_kl`` came
from ``autograd.grad(kl, params, create_graph=True)``, plus damping; conjugate gradient in a
Python loop; the step scaled to the trust region; a backtracking line search that writes
candidate parameters with ``torch.nn.utils.vector_to_parameters`` and reads the old ones
with ``parameters_to_vector``, checking the KL and the improvement under
``torch.no_grad()``. The value network takes Adam steps on returns (the compiled step).
Episodes come from a NumPy-simulated chain with NumPy-drawn actions."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class Policy(nn.Module):
    def __init__(self, obs=6, actions=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs, 16), nn.Tanh(), nn.Linear(16, actions))

    def forward(self, x):
        return F.log_softmax(self.body(x), dim=-1)


def flat_grad(y, params, **kwargs):
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(y, params, **kwargs)])


def conjugate_gradient(fvp, b, iters=6, tol=1e-10):
    x = torch.zeros_like(b)
    r, p = b.clone(), b.clone()
    rr = torch.dot(r, r)
    for _ in range(iters):
        Ap = fvp(p)
        alpha = rr / torch.dot(p, Ap)
        x += alpha * p
        r -= alpha * Ap
        new_rr = torch.dot(r, r)
        if new_rr < tol:
            break
        p = r + new_rr / rr * p
        rr = new_rr
    return x


def rollout(rng, policy, n=48):
    obs = rng.normal(size=(n, 6)).astype(np.float32)
    with torch.no_grad():
        probs = policy(torch.from_numpy(obs)).exp().numpy().astype(np.float64)
    probs /= probs.sum(1, keepdims=True)
    actions = np.array([rng.choice(3, p=p) for p in probs])
    rewards = (actions == (obs[:, 0] > 0) + (obs[:, 1] > 0.5)).astype(np.float32)
    returns = rewards + 0.5 * np.roll(rewards, -1)
    return (torch.from_numpy(obs), torch.from_numpy(actions),
            torch.from_numpy(returns.astype(np.float32)))


def trpo_step(policy, value, obs, actions, returns, max_kl=0.01, damping=0.1):
    params = list(policy.parameters())
    with torch.no_grad():
        advantages = returns - value(obs).squeeze(-1)
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        old_logp_all = policy(obs)
    old_logp = old_logp_all.gather(1, actions[:, None]).squeeze(1)

    def surrogate():
        logp = policy(obs).gather(1, actions[:, None]).squeeze(1)
        return (torch.exp(logp - old_logp) * advantages).mean()

    def kl():
        logp_all = policy(obs)
        return (old_logp_all.exp() * (old_logp_all - logp_all)).sum(1).mean()

    def fvp(v):
        grad_kl = flat_grad(kl(), params, create_graph=True)
        return flat_grad((grad_kl * v).sum(), params) + damping * v

    g = flat_grad(surrogate(), params)
    direction = conjugate_gradient(fvp, g)
    shs = 0.5 * torch.dot(direction, fvp(direction))
    full_step = direction * torch.sqrt(2 * max_kl / shs)
    old = parameters_to_vector(params)
    with torch.no_grad():
        base = surrogate().item()
        for fraction in 0.5 ** np.arange(6):
            vector_to_parameters(old + float(fraction) * full_step, params)
            if kl().item() <= max_kl and surrogate().item() > base:
                return float(fraction), surrogate().item() - base
        vector_to_parameters(old, params)
    return 0.0, 0.0


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    policy, value = Policy(), nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
    for module in (policy, value):
        module.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                                    .astype(np.float32))
                                for k, v in module.state_dict().items()})
    optimizer = torch.optim.Adam(value.parameters(), lr=1e-2)
    vnet = torch.compile(value) if compile == "model" else value

    def value_step(obs, returns):
        optimizer.zero_grad()
        loss = F.mse_loss(vnet(obs).squeeze(-1), returns)
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        value_step = torch.compile(value_step)
    value_losses, fractions, improvements, mean_returns = [], [], [], []
    for _ in range(steps):
        obs, actions, returns = rollout(rng, policy)
        mean_returns.append(returns.mean().item())
        fraction, improvement = trpo_step(policy, vnet, obs, actions, returns)
        fractions.append(fraction)
        improvements.append(improvement)
        for _ in range(3):
            value_losses.append(value_step(obs, returns).item())
    return {"value_losses": value_losses, "fractions": fractions,
            "improvements": improvements, "mean_returns": mean_returns,
            "policy": parameters_to_vector(policy.parameters())[:40].tolist()}
