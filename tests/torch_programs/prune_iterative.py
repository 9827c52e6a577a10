"""Iterative global magnitude pruning written the way ``torch.nn.utils.prune`` works inside
(and as lottery-ticket code re-implements it): pruning a module's ``weight`` deletes the
parameter, registers the same Parameter as ``weight_orig`` and a ``weight_mask`` buffer,
sets the plain attribute ``weight = weight_orig * weight_mask`` and registers a forward
pre-hook that recomputes it before every call. The threshold is global over the layers
(``torch.kthvalue`` of the concatenated magnitudes of the surviving weights), the masks
are tightened in place (``mask.mul_``), NAdam keeps training the same Parameter objects
through the reparametrisation, and at the end ``remove`` makes the pruned weight a
Parameter again (``del module._parameters['weight_orig']``, the hook's handle removed),
followed by fine-tuning with a fresh optimiser. Reports the losses, the sparsity after
each round and the state-dict keys while pruned."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Masked:
    """The forward pre-hook: the weight as a function of the original and the mask."""

    def __init__(self, name):
        self.name = name

    def apply_mask(self, module):
        return getattr(module, self.name + "_orig") * getattr(module, self.name + "_mask")

    def __call__(self, module, inputs):
        setattr(module, self.name, self.apply_mask(module))


def prune(module, name="weight"):
    orig = getattr(module, name)
    hook = Masked(name)
    del module._parameters[name]
    module.register_parameter(name + "_orig", orig)
    module.register_buffer(name + "_mask", torch.ones_like(orig))
    setattr(module, name, hook.apply_mask(module))
    module._prune_handle = module.register_forward_pre_hook(hook)


def remove(module, name="weight"):
    weight = getattr(module, name)
    delattr(module, name)
    del module._parameters[name + "_orig"]
    del module._buffers[name + "_mask"]
    module._prune_handle.remove()
    del module._prune_handle
    module.weight = nn.Parameter(weight.detach())


def global_magnitude(layers, amount):
    """Tighten every mask so that ``amount`` of all weights are zero."""
    with torch.no_grad():
        scores = torch.cat([(m.weight_orig * m.weight_mask).abs().flatten() for m in layers])
        k = int(round(amount * scores.numel()))
        threshold = torch.kthvalue(scores, k).values
        for m in layers:
            m.weight_mask.mul_((m.weight_orig.abs() > threshold).float())
    return sum(int((m.weight_mask == 0).sum()) for m in layers) / scores.numel()


def batch(rng, n=32):
    x = rng.normal(size=(n, 10)).astype(np.float32)
    y = (x[:, :4].argmax(1) + (x[:, 4] > 1.0)) % 4
    return torch.from_numpy(x), torch.from_numpy(y)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = MLP()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    layers = [model.fc1, model.fc2, model.fc3]
    optimizer = torch.optim.NAdam(model.parameters(), lr=5e-3)
    data = [batch(rng) for _ in range(steps)]
    net = torch.compile(model) if compile == "model" else model

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    train = torch.compile(step) if compile is True else step
    losses, sparsity = [], []
    for x, y in data:
        losses.append(train(x, y).item())
    for layer in layers:
        prune(layer)
    keys = [sorted(model.state_dict())]
    for amount in (0.3, 0.5):
        sparsity.append(global_magnitude(layers, amount))
        for x, y in data:
            losses.append(train(x, y).item())
    for layer in layers:
        remove(layer)
    optimizer = torch.optim.NAdam(model.parameters(), lr=1e-3)
    for x, y in data[:2]:
        losses.append(train(x, y).item())
    zeros = [int((m.weight == 0).sum()) for m in layers]
    return {"losses": losses, "sparsity": sparsity, "keys": keys, "zeros": zeros,
            "fc2": model.fc2.weight.flatten()[:40].tolist(),
            "param_names": [[n for n, _ in model.named_parameters()]]}
