"""Continual learning with elastic weight consolidation (Kirkpatrick et al.), as its popular
PyTorch ports write it: an ``EWC`` object (not a module) that, after each task, keeps
``self._means = {n: p.clone().detach() ...}`` and a diagonal Fisher in
``self._precision_matrices`` (squared gradients of the log-likelihood of the model's own
predictions, one sample at a time, accumulated with ``+= p.grad.data ** 2 / n``), both
dicts replaced when the next task begins, and a ``penalty(model)`` that sums
``(precision[n] * (p - means[n]) ** 2).sum()`` over ``named_parameters``; ``importance``
a Python float the loop changes per task. A multi-head network gets a new head for each
task (``self.heads.append(nn.Linear(...))``) whose parameters join the optimiser by
``optimizer.add_param_group``; the shared trunk's first layer has part of its inputs
frozen by a gradient hook (``p.register_hook(lambda g: g * mask)``). The training step
takes the task index; SGD with momentum; accuracy per task measured at the end."""
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class EWC(object):
    def __init__(self, model, dataset):
        self.model = model
        self.dataset = dataset
        self.params = {n: p for n, p in self.model.named_parameters()
                       if p.requires_grad and n.startswith("trunk")}
        self._means = {}
        self._precision_matrices = self._diag_fisher()
        for n, p in deepcopy(self.params).items():
            self._means[n] = p.data

    def _diag_fisher(self):
        precision_matrices = {}
        for n, p in deepcopy(self.params).items():
            p.data.zero_()
            precision_matrices[n] = p.data
        self.model.eval()
        for x, task in self.dataset:
            self.model.zero_grad()
            output = self.model(x.unsqueeze(0), task)
            label = output.max(1)[1].view(-1)
            loss = F.nll_loss(F.log_softmax(output, dim=1), label)
            loss.backward()
            for n, p in self.model.named_parameters():
                if n in precision_matrices:
                    precision_matrices[n].data += p.grad.data ** 2 / len(self.dataset)
        self.model.train()
        return {n: p for n, p in precision_matrices.items()}

    def penalty(self, model):
        loss = 0
        for n, p in model.named_parameters():
            if n in self._precision_matrices:
                _loss = self._precision_matrices[n] * (p - self._means[n]) ** 2
                loss += _loss.sum()
        return loss


class MultiHead(nn.Module):
    def __init__(self, d=8, width=16):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d, width), nn.ReLU(), nn.Linear(width, width),
                                   nn.ReLU())
        self.heads = nn.ModuleList()
        self.width = width

    def add_head(self, classes, rng):
        head = nn.Linear(self.width, classes)
        with torch.no_grad():
            for p in head.parameters():
                p.copy_(torch.from_numpy(rng.normal(0, 0.4, tuple(p.shape)).astype(np.float32)))
        self.heads.append(head)
        return head

    def forward(self, x, task):
        return self.heads[task](self.trunk(x))


def task_data(rng, task, n, d=8):
    y = rng.integers(0, 2, n)
    x = rng.normal(0, 1, (n, d))
    x[:, task] += np.where(y == 1, 2.0, -2.0)
    x[:, task + 3] += np.where(y == 1, -1.0, 1.0)
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)


def main(steps=4, compile=False, seed=0, batch=16, tasks=3):
    rng = np.random.default_rng(seed)
    model = MultiHead()
    with torch.no_grad():
        for p in model.trunk.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.4, tuple(p.shape)).astype(np.float32)))
    mask = torch.ones(16, 8)
    mask[:, 6:] = 0.0
    model.trunk[0].weight.register_hook(lambda g: g * mask)
    model.add_head(2, rng)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = {"ewc": None, "importance": 0.0}
    net = model

    def step(x, y, task):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x, task), y)
        if state["ewc"] is not None:
            loss = loss + state["importance"] * state["ewc"].penalty(model)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, tests = [], [task_data(rng, t, 32) for t in range(tasks)]
    for task in range(tasks):
        if task > 0:
            sample = [(x, task - 1) for x in task_data(rng, task - 1, 12)[0]]
            state["ewc"] = EWC(model, sample)
            state["importance"] = 20.0 * task
            head = model.add_head(2, rng)
            optimizer.add_param_group({"params": head.parameters(), "lr": 0.1})
        for _ in range(steps):
            x, y = task_data(rng, task, batch)
            losses.append(step(x, y, task).item())
    correct = []
    model.eval()
    with torch.no_grad():
        for task, (x, y) in enumerate(tests):
            correct.append(int((net(x, task).argmax(1) == y).sum()))
    fisher = state["ewc"]._precision_matrices["trunk.0.weight"]
    return {"losses": losses, "correct": correct, "fisher": fisher[:2].flatten().tolist(),
            "frozen": model.trunk[0].weight[:2, 6:].flatten().tolist(),
            "groups": [len(g["params"]) for g in optimizer.param_groups]}
