"""An advantage actor-critic on a small deterministic environment, written the way the
classic PyTorch reinforcement-learning examples are: a shared body with a policy head
(``F.softmax``) and a value head, ``torch.distributions.Categorical`` with ``log_prob`` and
``entropy``, a ``SavedAction`` namedtuple per step, discounted returns computed in Python
over ``reversed(rewards)`` and normalised with ``np.finfo(np.float32).eps``,
``F.smooth_l1_loss`` on each value, ``torch.stack(...).sum()`` of the per-step losses, Adam,
``clip_grad_norm_`` and an exponentially smoothed running reward. Episodes vary in length.

The update (the step that ``torch.compile`` wraps) takes the episode's states and actions
and re-evaluates them, as batched policy-gradient code does; the actions are drawn from the
policy's probabilities with a seeded NumPy generator, so that every framework takes the
same actions (``Categorical.sample`` draws from each framework's own stream; the greedy
evaluation at the end uses ``argmax``)."""
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

SavedAction = namedtuple("SavedAction", ["log_prob", "value"])
eps = np.finfo(np.float32).eps.item()


class Chain:
    """A walk on positions 0..n-1 with a drift: reaching the right end pays 1, every step
    costs a little, and an episode ends at either end or after ``limit`` steps."""

    def __init__(self, n=7, limit=12):
        self.n, self.limit = n, limit

    def reset(self, start):
        self.pos, self.t = start, 0
        return self.state()

    def state(self):
        s = np.zeros(self.n + 1, dtype=np.float32)
        s[self.pos] = 1.0
        s[-1] = self.t / self.limit
        return s

    def step(self, action):
        self.pos += 1 if action == 1 else -1 if action == 0 else 0
        self.t += 1
        done = self.pos <= 0 or self.pos >= self.n - 1 or self.t >= self.limit
        reward = 1.0 if self.pos >= self.n - 1 else -0.05
        return self.state(), reward, done


class Policy(nn.Module):
    def __init__(self, n_states=8, n_actions=3, hidden=16):
        super().__init__()
        self.affine1 = nn.Linear(n_states, hidden)
        self.action_head = nn.Linear(hidden, n_actions)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_prob = F.softmax(self.action_head(x), dim=-1)
        state_values = self.value_head(x)
        return action_prob, state_values


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor((rng.uniform(-1, 1, tuple(v.shape)) * 0.4).astype(np.float32))
        for name, v in model.state_dict().items()})


def discounted_returns(rewards, gamma):
    R, returns = 0.0, []
    for r in reversed(rewards):
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    return (returns - returns.mean()) / (returns.std() + eps)


def main(steps=10, compile=False, seed=0, gamma=0.9):
    torch.manual_seed(seed)
    model = Policy()
    init_weights(model, seed)
    optimizer = optim.Adam(model.parameters(), lr=3e-2)
    env = Chain()
    rng = np.random.default_rng(seed + 1)

    def update(states, actions, returns):
        probs, values = model(states)
        m = Categorical(probs)
        saved = [SavedAction(lp, v) for lp, v in zip(m.log_prob(actions), values)]
        policy_losses, value_losses = [], []
        for (log_prob, value), R in zip(saved, returns):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            value_losses.append(F.smooth_l1_loss(value, R.reshape(1)))
        optimizer.zero_grad()
        loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum() \
            - 0.01 * m.entropy().mean()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        update = torch.compile(update)
    running_reward, losses, lengths, rewards_seen = 0.0, [], [], []
    for i_episode in range(steps):
        state, ep_reward = env.reset(start=int(rng.integers(1, 5))), 0.0
        states, actions, rewards = [], [], []
        for t in range(env.limit):
            with torch.no_grad():
                probs, _ = model(torch.from_numpy(state).unsqueeze(0))
            p = probs[0].numpy().astype(np.float64)
            action = int(rng.choice(len(p), p=p / p.sum()))
            states.append(state)
            actions.append(action)
            state, reward, done = env.step(action)
            rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        returns = discounted_returns(rewards, gamma)
        loss = update(torch.tensor(np.stack(states)), torch.tensor(actions), returns)
        losses.append(loss.item())
        lengths.append(len(rewards))
        rewards_seen.append(running_reward)
    model.eval()
    greedy = []
    with torch.no_grad():
        for start in range(1, 6):
            probs, value = model(torch.from_numpy(env.reset(start)).unsqueeze(0))
            greedy.append(probs.argmax(dim=1).item())
            sample = Categorical(probs=probs).sample()
            assert sample.shape == (1,) and 0 <= int(sample) < 3
    return {"losses": losses, "running_reward": rewards_seen, "lengths": lengths,
            "greedy": greedy}
