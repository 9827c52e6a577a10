"""An actor-critic over sliding windows of a 1-D signal with prioritized replay, written the
way RL code of CleanRL and rlkit is: observations cut into windows by
``Tensor.unfold(1, size, step)`` and fed to a ``Conv1d`` encoder; categorical actions
embedded by ``nn.Embedding(padding_idx=0, max_norm=1.0)`` (the table renormalised in place
by every lookup); generalised advantage estimation by a Python loop over
``reversed(range(num_steps))`` writing into ``torch.zeros_like`` buffers with
``nextnonterminal = 1.0 - dones[t + 1]``; a prioritized replay buffer sampling by
``torch.searchsorted`` on the ``cumsum`` of its priorities ``** alpha`` (uniform numbers
from NumPy), importance weights ``(N * probs) ** -beta / max``, priorities written back
with ``index_put_`` and visit counts accumulated with ``index_put_(..., accumulate=True)``
over repeated indices; a clipped value loss and an entropy bonus from
``torch.distributions.Categorical(logits=...)``; ``clip_grad_norm_`` and Adam with
``eps=1e-5``, its lr annealed by hand through ``param_groups``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions.categorical import Categorical


class Agent(nn.Module):
    def __init__(self, n_actions=4, window=6, step=3, length=21, channels=5):
        super().__init__()
        self.window, self.step = window, step
        self.n_windows = (length - window) // step + 1
        self.encoder = nn.Sequential(nn.Conv1d(1, channels, 3, padding=1), nn.Tanh(),
                                     nn.Conv1d(channels, channels, 3, stride=2), nn.Tanh())
        self.prev_action = nn.Embedding(n_actions + 1, 4, padding_idx=0, max_norm=1.0)
        feat = channels * ((window - 3) // 2 + 1) * self.n_windows + 4
        self.critic = nn.Sequential(nn.Linear(feat, 16), nn.Tanh(), nn.Linear(16, 1))
        self.actor = nn.Sequential(nn.Linear(feat, 16), nn.Tanh(), nn.Linear(16, n_actions))

    def features(self, obs, prev_action):
        windows = obs.unfold(1, self.window, self.step)            # (B, n_windows, window)
        b, n, w = windows.shape
        h = self.encoder(windows.reshape(b * n, 1, w)).reshape(b, -1)
        return torch.cat([h, self.prev_action(prev_action)], dim=1)

    def get_value(self, obs, prev_action):
        return self.critic(self.features(obs, prev_action))

    def get_action_and_value(self, obs, prev_action, action):
        hidden = self.features(obs, prev_action)
        probs = Categorical(logits=self.actor(hidden))
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)

    def forward(self, obs, prev_action, action):
        return self.get_action_and_value(obs, prev_action, action)


class PrioritizedReplay:
    def __init__(self, capacity, alpha=0.6):
        self.capacity, self.alpha = capacity, alpha
        self.priorities = torch.ones(capacity)
        self.visits = torch.zeros(capacity, dtype=torch.long)

    def sample(self, u, beta):
        scaled = self.priorities ** self.alpha
        probs = scaled / scaled.sum()
        cdf = torch.cumsum(probs, dim=0)
        idx = torch.searchsorted(cdf, u).clamp(max=self.capacity - 1)
        weights = (self.capacity * probs[idx]) ** (-beta)
        self.visits.index_put_((idx,), torch.ones_like(idx), accumulate=True)
        return idx, weights / weights.max()

    def update(self, idx, td_errors):
        self.priorities.index_put_((idx,), td_errors.abs() + 1e-3)


def compute_gae(rewards, values, dones, next_value, next_done, gamma=0.99, gae_lambda=0.95):
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    agent = Agent()
    with torch.no_grad():
        for p in agent.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.4, p.shape).astype(np.float32)))
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-3, eps=1e-5)
    buffer = PrioritizedReplay(capacity=12)
    num_steps, num_envs = 4, 3
    net = torch.compile(agent) if compile == "model" else agent

    def update(obs, prev_actions, actions, old_logprobs, returns, old_values, advantages,
               weights):
        _, newlogprob, entropy, newvalue = net(obs, prev_actions, actions)
        ratio = (newlogprob - old_logprobs).exp()
        mb_adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        pg_loss = torch.max(-mb_adv * ratio, -mb_adv * torch.clamp(ratio, 0.8, 1.2))
        newvalue = newvalue.view(-1)
        v_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + torch.clamp(newvalue - old_values, -0.2, 0.2)
        v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - returns) ** 2)
        loss = (weights * (pg_loss + 0.5 * v_loss)).mean() - 0.01 * entropy.mean()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
        optimizer.step()
        return loss.detach(), (newvalue - returns).detach()

    if compile is True:
        update = torch.compile(update)
    log = []
    for iteration in range(steps):
        frac = 1.0 - iteration / steps
        optimizer.param_groups[0]["lr"] = frac * 3e-3
        obs = torch.from_numpy(rng.normal(0, 1, (num_steps, num_envs, 21)).astype(np.float32))
        actions = torch.from_numpy(rng.integers(0, 4, (num_steps, num_envs)))
        prev_actions = torch.cat([torch.zeros(1, num_envs, dtype=torch.long), actions[:-1] + 1])
        rewards = torch.from_numpy(rng.normal(0, 1, (num_steps, num_envs)).astype(np.float32))
        dones = torch.from_numpy((rng.random((num_steps, num_envs)) < 0.2).astype(np.float32))
        with torch.no_grad():
            flat = obs.reshape(-1, 21), prev_actions.reshape(-1)
            _, logprobs, _, values = agent.get_action_and_value(*flat, actions.reshape(-1))
            values = values.reshape(num_steps, num_envs)
            next_value = agent.get_value(obs[-1], actions[-1] + 1).reshape(1, -1)
        advantages, returns = compute_gae(rewards, values, dones, next_value, dones[-1])
        u = torch.from_numpy(rng.random(6).astype(np.float32))
        idx, weights = buffer.sample(u, beta=0.4 + 0.1 * iteration)
        loss, td = update(obs.reshape(-1, 21)[idx], prev_actions.reshape(-1)[idx],
                          actions.reshape(-1)[idx], logprobs[idx], returns.reshape(-1)[idx],
                          values.reshape(-1)[idx], advantages.reshape(-1)[idx], weights)
        buffer.update(idx, td)
        log.append([loss.item()] + advantages.flatten().tolist())
    return {"log": log, "priorities": buffer.priorities.tolist(),
            "visits": buffer.visits.tolist(),
            "embedding_norms": agent.prev_action.weight.norm(dim=1).tolist()}
