"""GradNorm (Chen et al.) multi-task loss balancing as its public PyTorch implementations
write the training step: learnable task weights ``self.weights = torch.nn.Parameter(
torch.ones(n_tasks))``, the weighted loss backpropagated with ``retain_graph=True``, the
weights' own gradient then zeroed through ``model.weights.grad.data = model.weights.grad.data
* 0.0`` and replaced by ``torch.autograd.grad(grad_norm_loss, model.weights)[0]`` assigned
to ``.grad``, where ``grad_norm_loss`` is the L1 distance between each task's gradient norm
at the last shared layer (``torch.autograd.grad(task_loss[i], W.parameters(),
retain_graph=True)``, ``torch.norm(torch.mul(model.weights[i], gygw[0]))``) and a detached
target from the inverse training rates ``loss_ratio / loss_ratio.mean()`` raised to
``alpha``; the initial task losses kept from the first iteration (``if t == 0:
initial_task_loss = task_loss.data``, in a dict the step closes over), and after
``optimizer.step()`` the weights renormalised by rebinding their data
(``model.weights.data = model.weights.data * normalize_coeff``). Three regression and
classification heads on a shared trunk; Adam."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiTaskNet(nn.Module):
    def __init__(self, d=6, width=16, n_tasks=3):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d, width), nn.ReLU(), nn.Linear(width, width),
                                   nn.ReLU())
        self.reg1, self.reg2 = nn.Linear(width, 1), nn.Linear(width, 1)
        self.cls = nn.Linear(width, 3)
        self.weights = torch.nn.Parameter(torch.ones(n_tasks).float())

    def get_last_shared_layer(self):
        return self.trunk[2]

    def forward(self, x, y1, y2, y3):
        h = self.trunk(x)
        return torch.stack([F.mse_loss(self.reg1(h).squeeze(-1), y1),
                            F.l1_loss(self.reg2(h).squeeze(-1), y2),
                            F.cross_entropy(self.cls(h), y3)])


def main(steps=4, compile=False, seed=0, batch=16, alpha=1.5):
    rng = np.random.default_rng(seed)
    model = MultiTaskNet()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name != "weights":
                p.copy_(torch.from_numpy(rng.normal(0, 0.4, tuple(p.shape)).astype(np.float32)))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    data = []
    for _ in range(steps):
        x = rng.normal(0, 1, (batch, 6))
        data.append((torch.from_numpy(x.astype(np.float32)),
                     torch.from_numpy((x[:, 0] * 3).astype(np.float32)),
                     torch.from_numpy(np.sin(x[:, 1]).astype(np.float32)),
                     torch.from_numpy((x[:, 2] > 0).astype(np.int64) + (x[:, 3] > 1))))
    kept = {}
    net = model

    def step(t, x, y1, y2, y3):
        task_loss = net(x, y1, y2, y3)
        weighted_task_loss = torch.mul(model.weights, task_loss)
        if t == 0:
            kept["initial_task_loss"] = task_loss.data
        loss = torch.sum(weighted_task_loss)
        optimizer.zero_grad()
        loss.backward(retain_graph=True)
        model.weights.grad.data = model.weights.grad.data * 0.0
        W = model.get_last_shared_layer()
        norms = []
        for i in range(len(task_loss)):
            gygw = torch.autograd.grad(task_loss[i], W.parameters(), retain_graph=True)
            norms.append(torch.norm(torch.mul(model.weights[i], gygw[0])))
        norms = torch.stack(norms)
        loss_ratio = task_loss.data / kept["initial_task_loss"]
        inverse_train_rate = loss_ratio / loss_ratio.mean()
        mean_norm = norms.mean().detach()
        constant_term = (mean_norm * (inverse_train_rate ** alpha)).detach()
        grad_norm_loss = torch.sum(torch.abs(norms - constant_term))
        model.weights.grad = torch.autograd.grad(grad_norm_loss, model.weights)[0]
        optimizer.step()
        normalize_coeff = len(task_loss) / torch.sum(model.weights.data, dim=0)
        model.weights.data = model.weights.data * normalize_coeff
        return task_loss.detach(), grad_norm_loss.detach(), norms.detach()

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, gn_losses, norms, weights = [], [], [], []
    for t, batch_ in enumerate(data):
        task_loss, gn, n = step(t, *batch_)
        losses += task_loss.tolist()
        gn_losses.append(gn.item())
        norms += n.tolist()
        weights += model.weights.tolist()
    return {"losses": losses, "grad_norm_losses": gn_losses, "norms": norms,
            "weights": weights, "initial": kept["initial_task_loss"].tolist(),
            "trunk": model.trunk[2].weight[:2].flatten().tolist()}
