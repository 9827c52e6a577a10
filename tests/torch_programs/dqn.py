"""A deep Q-network on a small deterministic grid, written the way the PyTorch DQN tutorial
and its descendants are: a replay memory of ``Transition`` namedtuples, a policy network and
a target network copied with ``load_state_dict(policy.state_dict())`` and then updated by a
soft (Polyak) update under ``@torch.no_grad()`` (``mul_``/``add_`` over zipped
parameters and ``torch.lerp``-style ``lerp_``), Q(s, a) read with ``gather(1, actions)``,
the next state's value from ``target(next).max(1).values`` with a ``torch.where`` over the
terminal mask, Huber loss, ``clip_grad_value_`` and ε-greedy actions whose random draws
come from a seeded NumPy generator. Mid-training the networks and the optimiser are saved
with ``torch.save`` and loaded back with ``torch.load`` into fresh objects, as a resumed
run does, and ``model.train()`` / ``model.eval()`` switch around the acting code."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import os
import random
import tempfile
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

Transition = namedtuple("Transition", ("state", "action", "next_state", "reward", "done"))


class Grid:
    """A 4x4 grid: start at a corner, reach the opposite corner (+1), each step costs."""

    def __init__(self, size=4, limit=10):
        self.size, self.limit = size, limit

    def reset(self, start):
        self.pos, self.t = list(start), 0
        return self.state()

    def state(self):
        s = np.zeros(2 * self.size + 1, dtype=np.float32)
        s[self.pos[0]] = 1.0
        s[self.size + self.pos[1]] = 1.0
        s[-1] = self.t / self.limit
        return s

    def step(self, a):
        dr, dc = [(0, 1), (1, 0), (0, -1), (-1, 0)][a]
        self.pos = [min(max(self.pos[0] + dr, 0), self.size - 1),
                    min(max(self.pos[1] + dc, 0), self.size - 1)]
        self.t += 1
        goal = self.pos == [self.size - 1, self.size - 1]
        return self.state(), 1.0 if goal else -0.05, goal or self.t >= self.limit


class DQN(nn.Module):
    def __init__(self, n_obs=9, n_actions=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_obs, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_actions))

    def forward(self, x):
        return self.net(x)


@torch.no_grad()
def soft_update(target, policy, tau):
    for i, (tp, pp) in enumerate(zip(target.parameters(), policy.parameters())):
        if i % 2 == 0:
            tp.mul_(1.0 - tau).add_(pp, alpha=tau)
        else:
            tp.lerp_(pp, tau)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((rng.uniform(-1, 1, tuple(v.shape)) * 0.3).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, gamma=0.95, batch=16):
    policy, target = DQN(), DQN()
    init_weights(policy, seed)
    target.load_state_dict(policy.state_dict())
    optimizer = torch.optim.RMSprop(policy.parameters(), lr=1e-3, momentum=0.5)
    env, rng = Grid(), np.random.default_rng(seed + 1)
    memory = deque(maxlen=200)
    sampler = random.Random(seed)

    def optimize(state, action, next_state, reward, done):
        q = policy(state).gather(1, action)
        with torch.no_grad():
            next_q = target(next_state).max(1).values
        expected = reward + gamma * torch.where(done, torch.zeros_like(next_q), next_q)
        loss = F.smooth_l1_loss(q, expected.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy.parameters(), 1.0)
        optimizer.step()
        return loss

    if compile == "model":
        policy = torch.compile(policy)
    elif compile:
        optimize = torch.compile(optimize)
    losses, returns = [], []
    for episode in range(steps):
        if episode == steps // 2:       # resume from a checkpoint, as a restarted run does
            path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
            torch.save({"policy": policy.state_dict(), "target": target.state_dict(),
                        "optimizer": optimizer.state_dict(), "episode": episode}, path)
            ckpt = torch.load(path)
            assert ckpt["episode"] == episode
            policy.load_state_dict(ckpt["policy"])
            target = DQN()
            target.load_state_dict(ckpt["target"])
            optimizer.load_state_dict(ckpt["optimizer"])
        state, total = env.reset((0, int(rng.integers(0, 2)))), 0.0
        eps = max(0.1, 0.9 - 0.1 * episode)
        for _ in range(env.limit):
            policy.eval()
            with torch.no_grad():
                q = policy(torch.from_numpy(state)[None])
            policy.train()
            a = int(rng.integers(0, 4)) if rng.random() < eps else int(q.argmax(1))
            nxt, r, done = env.step(a)
            memory.append(Transition(state, a, nxt, r, done))
            state, total = nxt, total + r
            if len(memory) >= batch:
                b = Transition(*zip(*sampler.sample(list(memory), batch)))
                loss = optimize(torch.tensor(np.stack(b.state)),
                                torch.tensor(b.action).unsqueeze(1),
                                torch.tensor(np.stack(b.next_state)),
                                torch.tensor(b.reward, dtype=torch.float32),
                                torch.tensor(b.done))
                losses.append(loss.item())
                soft_update(target, policy, 0.1)
            if done:
                break
        returns.append(total)
    with torch.no_grad():
        q0 = target(torch.from_numpy(env.reset((0, 0)))[None])
    return {"losses": losses, "returns": returns, "q0": q0[0].tolist()}
