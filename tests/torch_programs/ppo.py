"""Proximal policy optimisation with a Gaussian policy on a small continuous task, written
the way CleanRL-style PPO scripts are: an actor mean network and a state-independent
``nn.Parameter`` log standard deviation, ``torch.distributions.Normal`` with
``log_prob(...).sum(-1)`` and ``entropy().sum(-1)``, generalised advantage estimation in a
reversed loop over a preallocated ``torch.zeros`` buffer written in place, the clipped
surrogate (``ratio.clamp(1 - eps, 1 + eps)`` and ``torch.max`` of the two losses), a
clipped value loss, minibatches taken with a NumPy permutation, an ``approx_kl`` under
``torch.no_grad()``, ``clip_grad_norm_`` and the learning rate annealed by hand through
``optimizer.param_groups[0]["lr"]``. Actions come from a seeded NumPy generator (each
framework's ``Normal.sample`` draws its own numbers)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
from torch.distributions.normal import Normal


def layer_init(layer, rng, std=0.5):
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(rng.normal(0, std, tuple(layer.weight.shape))
                                        .astype(np.float32)))
        layer.bias.fill_(0.0)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim=3, act_dim=2, hidden=16, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden), rng), nn.Tanh(),
                                    layer_init(nn.Linear(hidden, 1), rng, std=0.1))
        self.actor_mean = nn.Sequential(layer_init(nn.Linear(obs_dim, hidden), rng),
                                        nn.Tanh(),
                                        layer_init(nn.Linear(hidden, act_dim), rng, 0.1))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim) - 0.5)

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action):
        mean = self.actor_mean(x)
        std = torch.exp(self.actor_logstd.expand_as(mean))
        probs = Normal(mean, std)
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)

    def forward(self, x, action):
        return self.get_action_and_value(x, action)


class Reach:
    """A point in the plane pushed by the action toward a goal; reward: minus the distance."""

    def __init__(self, rng):
        self.rng = rng

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, 2)
        self.t = 0
        return self.obs()

    def obs(self):
        return np.array([*self.pos, self.t / 8], dtype=np.float32)

    def step(self, a):
        self.pos = self.pos + 0.2 * np.clip(a, -1, 1)
        self.t += 1
        return self.obs(), -float(np.linalg.norm(self.pos - 0.5)), self.t >= 8


def main(steps=10, compile=False, seed=0, n_steps=32, gamma=0.99, lam=0.95, clip=0.2):
    agent = Agent(seed=seed)
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-3, eps=1e-5)
    rng = np.random.default_rng(seed + 1)
    env = Reach(rng)

    def update(obs, actions, logprobs, advantages, returns, values):
        _, newlogprob, entropy, newvalue = agent(obs, actions)
        logratio = newlogprob - logprobs
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
        adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
        newvalue = newvalue.view(-1)
        v_clipped = values + torch.clamp(newvalue - values, -clip, clip)
        v_loss = 0.5 * torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2).mean()
        loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
        optimizer.step()
        return loss, approx_kl

    if compile == "model":
        agent = torch.compile(agent)
    elif compile:
        update = torch.compile(update)
    obs_buf = torch.zeros((n_steps, 3))
    act_buf = torch.zeros((n_steps, 2))
    logp_buf, rew_buf = torch.zeros(n_steps), torch.zeros(n_steps)
    done_buf, val_buf = torch.zeros(n_steps), torch.zeros(n_steps)
    losses, kls, returns_seen = [], [], []
    next_obs = torch.tensor(env.reset())
    for iteration in range(steps):
        optimizer.param_groups[0]["lr"] = (1.0 - iteration / steps) * 3e-3
        for step in range(n_steps):
            obs_buf[step] = next_obs
            with torch.no_grad():
                mean = agent.actor_mean(next_obs[None])
                std = agent.actor_logstd.exp()
                action = mean + std * torch.tensor(rng.normal(size=(1, 2)).astype(np.float32))
                _, logp, _, value = agent(next_obs[None], action)
            act_buf[step], logp_buf[step], val_buf[step] = action[0], logp[0], value[0, 0]
            o, r, done = env.step(action[0].numpy())
            rew_buf[step], done_buf[step] = r, float(done)
            next_obs = torch.tensor(env.reset() if done else o)
        with torch.no_grad():
            next_value = agent.get_value(next_obs[None]).reshape(1)
            advantages = torch.zeros_like(rew_buf)
            lastgaelam = 0
            for t in reversed(range(n_steps)):
                nextnonterminal = 1.0 - done_buf[t]
                nextvalues = next_value if t == n_steps - 1 else val_buf[t + 1]
                delta = rew_buf[t] + gamma * nextvalues * nextnonterminal - val_buf[t]
                advantages[t] = lastgaelam = \
                    delta + gamma * lam * nextnonterminal * lastgaelam
            returns = advantages + val_buf
        returns_seen.append(rew_buf.sum().item())
        for epoch in range(2):
            order = rng.permutation(n_steps)
            for start in range(0, n_steps, 16):
                mb = torch.tensor(order[start:start + 16])
                loss, kl = update(obs_buf[mb], act_buf[mb], logp_buf[mb], advantages[mb],
                                  returns[mb], val_buf[mb])
                losses.append(loss.item())
                kls.append(kl.item())
    assert all(abs(k) < 1.0 for k in kls)   # (near 0: compared through the losses)
    return {"losses": losses, "rewards": returns_seen,
            "logstd": agent.actor_logstd.detach()[0].tolist()}
