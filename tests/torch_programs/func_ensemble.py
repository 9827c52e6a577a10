"""torch.func as its tutorials use it: model ensembling (``stack_module_state`` of several
MLPs, a ``copy.deepcopy`` base model, ``functional_call`` under ``vmap(..., in_dims=(0, 0,
None))`` for the same batch to every model and ``in_dims=(0, 0, 0)`` for a batch each),
the ensemble trained as one set of stacked parameters by Adam; per-sample gradients
(``vmap(grad(compute_loss), in_dims=(None, None, 0, 0))`` over ``{k: v.detach() for k, v
in model.named_parameters()}``) clipped per sample and averaged into ``p.grad`` by hand
(DP-SGD's core without the noise), SGD; and ``jacrev``/``hessian`` of a small network's
output with respect to its input (``torch.func.jacrev(f)(x)``, ``torch.func.hessian``).
Data: two interleaved spirals."""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, hessian, jacrev, stack_module_state, vmap


class SimpleMLP(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.fc1 = nn.Linear(2, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, 2)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def spirals(rng, n):
    t = rng.uniform(0.5, 3.0, n)
    label = rng.integers(0, 2, n)
    angle = t * 2.5 + label * np.pi
    x = np.stack([t * np.cos(angle), t * np.sin(angle)], 1) / 3 + rng.normal(0, 0.05, (n, 2))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(label)


def init_weights(model, rng):
    state = model.state_dict()
    for name, v in state.items():
        fan_in = v.shape[1] if v.dim() > 1 else v.shape[0]
        state[name] = torch.tensor(rng.normal(0, 1 / np.sqrt(fan_in), tuple(v.shape))
                                   .astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, num_models=4, batch=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    models = [SimpleMLP() for _ in range(num_models)]
    for m in models:
        init_weights(m, rng)
    params, buffers = stack_module_state(models)
    base_model = copy.deepcopy(models[0])

    def fmodel(params, buffers, x):
        return functional_call(base_model, (params, buffers), (x,))

    ensemble_opt = torch.optim.Adam(list(params.values()), lr=1e-2)

    def ensemble_step(minibatches, targets):
        ensemble_opt.zero_grad()
        logits = vmap(fmodel)(params, buffers, minibatches)           # a batch per model
        loss = F.cross_entropy(logits.reshape(-1, 2), targets.reshape(-1))
        loss.backward()
        ensemble_opt.step()
        return loss

    def ensemble_predict(x):
        return vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x)  # the same batch

    # per-sample gradients, clipped per sample (DP-SGD without the noise)
    model = SimpleMLP()
    init_weights(model, rng)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)

    def compute_loss(params, buffers, sample, target):
        batch = sample.unsqueeze(0)
        targets = target.unsqueeze(0)
        predictions = functional_call(model, (params, buffers), (batch,))
        return F.cross_entropy(predictions, targets)

    ft_compute_sample_grad = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))
    max_norm = 1.0

    def private_step(data, targets):
        p = {k: v.detach() for k, v in model.named_parameters()}
        b = {k: v.detach() for k, v in model.named_buffers()}
        per_sample = ft_compute_sample_grad(p, b, data, targets)
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in per_sample.values()]).norm(dim=0)
        factor = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for name, param in model.named_parameters():
            g = per_sample[name]
            param.grad = (g * factor.view(-1, *([1] * (g.dim() - 1)))).mean(0)
        sgd.step()
        return norms.mean()

    probe = SimpleMLP()
    init_weights(probe, rng)

    def net_out(x):
        return probe(x.unsqueeze(0)).squeeze(0)

    if compile == "model":
        # the Jacobian and Hessian differentiate through compiled calls
        probe = torch.compile(probe)
    elif compile:
        ensemble_step = torch.compile(ensemble_step)
        private_step = torch.compile(private_step)
    losses, norms = [], []
    for _ in range(steps):
        xs, ys = zip(*(spirals(rng, batch) for _ in range(num_models)))
        losses.append(ensemble_step(torch.stack(xs), torch.stack(ys)).item())
        x, y = spirals(rng, batch)
        norms.append(private_step(x, y).item())
    test_x, test_y = spirals(rng, 64)
    with torch.no_grad():
        predictions = ensemble_predict(test_x)
    votes = predictions.softmax(-1).mean(0).argmax(-1)
    point = torch.tensor([0.3, -0.2])
    jac = jacrev(net_out)(point)
    hess = hessian(lambda x: net_out(x).logsumexp(0))(point)
    return {"losses": losses, "clip_norms": norms,
            "ensemble_accuracy": [(votes == test_y).float().mean().item()],
            "fc3_weight": model.fc3.weight.detach().flatten().tolist(),
            "jacobian": jac.detach().flatten().tolist(),
            "hessian": hess.detach().flatten().tolist()}
