"""Magnitude pruning with ``torch.nn.utils.prune`` itself (round 12's prune_iterative
wrote its reparametrisation by hand), the way the PyTorch pruning tutorial and
lottery-ticket scripts use it: ``prune.l1_unstructured`` of a conv's weight, then
``prune.ln_structured(n=2, dim=0)`` of the same weight (a ``PruningContainer``: filters
chosen among what the first mask kept), ``prune.random_unstructured`` with ``amount=0``
(an identity mask), ``prune.global_unstructured`` over ``(module, "weight")`` pairs with
``pruning_method=prune.L1Unstructured`` applied again each round, ``custom_from_mask`` on a
bias; training through the ``weight_orig`` parameters and ``weight_mask`` buffers (the
forward pre-hooks recompute ``module.weight``), the sparsity read from the buffers
(``float(torch.sum(m.weight == 0)) / m.weight.nelement()``), ``prune.is_pruned``, the
pruning methods found among ``module._forward_pre_hooks.values()``, the state-dict keys,
and ``prune.remove`` before a final fine-tune with a fresh optimiser."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import prune


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3)
        self.conv2 = nn.Conv2d(6, 8, 3)
        self.fc1 = nn.Linear(8 * 2 * 2, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        x = x.view(-1, int(x.nelement() / x.shape[0]))
        return self.fc2(F.relu(self.fc1(x)))


def sparsity(module):
    return float(torch.sum(module.weight == 0)) / module.weight.nelement()


def data(rng, n=12):
    x = rng.normal(0, 1, (n, 1, 10, 10)).astype(np.float32)
    y = (x[:, 0, :5].mean((1, 2)) > x[:, 0, 5:].mean((1, 2))).astype(np.int64) \
        + 2 * (x[:, 0, :, :5].mean((1, 2)) > 0)
    return torch.from_numpy(x), torch.from_numpy(y)


def make_step(model, optimizer, compile):
    net = torch.compile(model) if compile == "model" else model

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return torch.compile(step) if compile is True else step


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = LeNet()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    prune.l1_unstructured(model.conv1, name="weight", amount=0.3)
    prune.ln_structured(model.conv1, name="weight", amount=0.5, n=2, dim=0)
    prune.random_unstructured(model.fc2, name="weight", amount=0)
    prune.custom_from_mask(model.fc2, name="bias", mask=torch.tensor([1.0, 1.0, 0.0, 1.0]))
    hooks = [type(h).__name__ for h in model.conv1._forward_pre_hooks.values()]
    container = list(model.conv1._forward_pre_hooks.values())[0]
    keys = sorted(model.state_dict().keys())
    parameters_to_prune = ((model.conv2, "weight"), (model.fc1, "weight"),
                           (model.fc2, "weight"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = make_step(model, optimizer, compile)
    losses, sparsities = [], []
    for _ in range(2):
        losses += [step(*data(rng)).item() for _ in range(steps // 2)]
        prune.global_unstructured(parameters_to_prune, pruning_method=prune.L1Unstructured,
                                  amount=0.25)
        sparsities.append([sparsity(m) for m in (model.conv1, model.conv2, model.fc1,
                                                  model.fc2)])
    pruned = prune.is_pruned(model)
    masks = model.conv1.weight_mask.sum().item(), model.fc1.weight_mask.sum().item()
    for module, name in parameters_to_prune + ((model.conv1, "weight"), (model.fc2, "bias")):
        prune.remove(module, name)
    step = make_step(model, torch.optim.SGD(model.parameters(), lr=0.02), compile)
    losses += [step(*data(rng)).item() for _ in range(2)]
    return {"losses": losses, "sparsities": sparsities, "masks": list(masks),
            "hooks": hooks + [len(container), int(pruned), int(prune.is_pruned(model))],
            "keys": keys, "after": sorted(model.state_dict().keys())}
