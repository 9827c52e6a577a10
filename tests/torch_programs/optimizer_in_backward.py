"""The optimiser step fused into the backward pass, as PyTorch's memory-saving tutorial
writes it: one ``torch.optim.AdamW([p], foreach=False)`` per parameter in a dict keyed by
the parameter, and ``p.register_post_accumulate_grad_hook(optimizer_hook)`` on every
parameter, the hook stepping that parameter's optimiser and zeroing its gradient as soon as
it is accumulated, so ``loss.backward()`` alone trains the model (there is no
``optimizer.step()`` in the loop). A per-parameter ``LambdaLR`` per optimiser is stepped
after each backward; the gradient norm is taken before it is consumed, by a tensor hook
(``p.register_hook``) that stores ``grad.norm()`` in a dict. Halfway the hooks are
removed by their handles and training goes on with one ordinary AdamW over the parameters
whose state is gathered from the per-parameter optimisers (``state_dict()`` of each), with
``clip_grad_norm_(..., error_if_nonfinite=True)``; evaluation runs under
``torch.autograd.set_detect_anomaly(True)``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_model():
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 2))


def batch(rng, n=20):
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = np.stack([np.sin(x[:, 0]) + x[:, 1] * x[:, 2], np.cos(x[:, 3]) - x[:, 4]], 1)
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.float32))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = make_model()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    params = list(model.parameters())
    optimizer_dict = {p: torch.optim.AdamW([p], lr=1e-2, foreach=False) for p in params}
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + 0.5 * s))
                  for o in optimizer_dict.values()]
    norms = {}

    def optimizer_hook(parameter):
        optimizer_dict[parameter].step()
        optimizer_dict[parameter].zero_grad()

    handles = []
    for i, p in enumerate(params):
        handles.append(p.register_post_accumulate_grad_hook(optimizer_hook))
        handles.append(p.register_hook(lambda grad, i=i: norms.__setitem__(i, grad.norm())))
    net = torch.compile(model) if compile == "model" else model

    def fused_step(x, y):
        loss = F.mse_loss(net(x), y)
        loss.backward()
        return loss

    losses, grad_norms = [], []
    for _ in range(steps):
        losses.append(fused_step(*batch(rng)).item())
        for s in schedulers:
            s.step()
        grad_norms.append([float(norms[i]) for i in range(len(params))])
    none_left = [p.grad is None for p in params]
    for h in handles:
        h.remove()

    optimizer = torch.optim.AdamW(params, lr=5e-3)
    for i, p in enumerate(params):
        optimizer.state[p] = optimizer_dict[p].state_dict()["state"][0]

    def step(x, y):
        optimizer.zero_grad()
        loss = F.mse_loss(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    for _ in range(steps):
        losses.append(step(*batch(rng)).item())
    with torch.autograd.set_detect_anomaly(True):
        x, y = batch(rng, 8)
        check = F.mse_loss(net(x), y)
    return {"losses": losses, "grad_norms": grad_norms, "none_left": none_left,
            "eval": [check.item()], "lrs": [schedulers[0].get_last_lr()[0]],
            "steps_taken": [int(optimizer.state[params[0]]["step"])],
            "out": model[4].weight.flatten().tolist()}
