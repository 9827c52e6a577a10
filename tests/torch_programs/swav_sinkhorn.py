"""SwAV's swapped-prediction step, written as facebookresearch/swav's main_swav.py is:
the prototypes (a bias-free ``nn.Linear``) L2-normalised in place at every step through
``w = model.prototypes.weight.data.clone()``, ``F.normalize`` and ``copy_``; codes by the
Sinkhorn-Knopp iterations under ``torch.no_grad()`` (``torch.exp(out / eps).t()``, in-place
``Q /= sum_Q`` and row/column normalisations by ``sum(dim=..., keepdim=True)``); a queue of
past embeddings held in a tensor and shifted in place (``queue[i, bs:] = queue[i, :-bs]
.clone()``), used once filled by ``torch.mm`` with the prototypes' weight; the loss by
``torch.sum(q * F.log_softmax(x / temperature, dim=1), dim=1)`` over swapped crops;
the prototypes' gradients dropped for the first iterations (``p.grad = None`` for names
containing "prototypes"); SGD with a per-step cosine lr written into ``param_groups``
from a NumPy schedule."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SwAVNet(nn.Module):
    def __init__(self, in_dim=12, hidden=16, out_dim=8, n_prototypes=6):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden),
                                      nn.ReLU(inplace=True))
        self.projection_head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(),
                                             nn.Linear(hidden, out_dim))
        self.prototypes = nn.Linear(out_dim, n_prototypes, bias=False)

    def forward(self, inputs):
        if not isinstance(inputs, list):
            inputs = [inputs]
        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in inputs]), return_counts=True)[1], 0)
        start_idx, output = 0, None
        for end_idx in idx_crops:
            _out = self.backbone(torch.cat(inputs[start_idx:end_idx]))
            output = _out if start_idx == 0 else torch.cat((output, _out))
            start_idx = end_idx
        x = self.projection_head(output)
        x = nn.functional.normalize(x, dim=1, p=2)
        return x, self.prototypes(x)


@torch.no_grad()
def distributed_sinkhorn(out, epsilon=0.05, sinkhorn_iterations=3):
    Q = torch.exp(out / epsilon).t()
    B = Q.shape[1]
    K = Q.shape[0]
    sum_Q = torch.sum(Q)
    Q /= sum_Q
    for it in range(sinkhorn_iterations):
        sum_of_rows = torch.sum(Q, dim=1, keepdim=True)
        Q /= sum_of_rows
        Q /= K
        Q /= torch.sum(Q, dim=0, keepdim=True)
        Q /= B
    Q *= B
    return Q.t()


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = SwAVNet()
    with torch.no_grad():
        for p in model.parameters():
            std = 0.4 if p.dim() > 1 else 0.1
            p.copy_(torch.from_numpy(rng.normal(0, std, p.shape).astype(np.float32)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    lr_schedule = 0.01 + 0.5 * (0.1 - 0.01) * (1 + np.cos(np.pi * np.arange(steps) / steps))
    bs, crops_for_assign, nmb_crops, temperature = 6, [0, 1], [2, 1], 0.1
    queue = torch.zeros(len(crops_for_assign), 12, 8)
    net = torch.compile(model) if compile == "model" else model

    def train_step(inputs, iteration, queue, use_the_queue):
        with torch.no_grad():
            w = model.prototypes.weight.data.clone()
            w = nn.functional.normalize(w, dim=1, p=2)
            model.prototypes.weight.copy_(w)
        embedding, output = net(inputs)
        embedding = embedding.detach()
        loss = 0
        for i, crop_id in enumerate(crops_for_assign):
            with torch.no_grad():
                out = output[bs * crop_id: bs * (crop_id + 1)].detach()
                if use_the_queue:
                    out = torch.cat((torch.mm(queue[i], model.prototypes.weight.t()), out))
                queue[i, bs:] = queue[i, :-bs].clone()
                queue[i, :bs] = embedding[crop_id * bs: (crop_id + 1) * bs]
                q = distributed_sinkhorn(out)[-bs:]
            subloss = 0
            for v in np.delete(np.arange(np.sum(nmb_crops)), crop_id):
                x = output[bs * v: bs * (v + 1)] / temperature
                subloss -= torch.mean(torch.sum(q * F.log_softmax(x, dim=1), dim=1))
            loss += subloss / (np.sum(nmb_crops) - 1)
        loss /= len(crops_for_assign)
        optimizer.zero_grad()
        loss.backward()
        if iteration < 2:
            for name, p in model.named_parameters():
                if "prototypes" in name:
                    p.grad = None
        optimizer.step()
        return loss.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    base = rng.normal(0, 1, (bs, 12))
    for it in range(steps):
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr_schedule[it]
        crops = [torch.from_numpy((base + rng.normal(0, 0.3, base.shape)).astype(np.float32))
                 for _ in range(2)]
        small = torch.from_numpy((base[:, :10] + rng.normal(0, 0.3, (bs, 10))).astype(np.float32))
        small = F.pad(small, (0, 2))
        loss = train_step(crops + [small], it, queue, it >= 2)
        log.append(loss.item())
    return {"log": log, "queue": queue[0, :3].flatten().tolist(),
            "prototypes": model.prototypes.weight.detach().flatten().tolist()[:12],
            "running_var": model.backbone[1].running_var.tolist()}
