"""MoCo v2 as its official PyTorch code writes it (single process): a query encoder and a
momentum key encoder made by building the same network twice and copying
(``param_k.data.copy_(param_q.data)``, ``param_k.requires_grad = False``), the key encoder
updated under ``@torch.no_grad()`` by ``param_k.data = param_k.data * m + param_q.data *
(1.0 - m)`` (assigning ``.data``), a queue of negatives kept as a buffer
(``self.register_buffer("queue", torch.randn(dim, K))`` normalised by
``nn.functional.normalize(self.queue, dim=0)``) and a pointer buffer
(``self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))``), the dequeue
writing ``self.queue[:, ptr:ptr + batch_size] = keys.T`` at ``ptr = int(self.queue_ptr)``
and ``self.queue_ptr[0] = ptr``; logits from ``torch.einsum("nc,nc->n", [q, k])`` and
``torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])``, divided by the temperature,
with ``torch.zeros(logits.shape[0], dtype=torch.long)`` labels; SGD with momentum and weight
decay, and the top-1 accuracy of the contrastive task. Two augmented views of toy vectors
stand in for the images."""
import numpy as np
import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, in_dim=10, dim=8, hidden=24):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def forward(self, x):
        return self.fc(x)


class MoCo(nn.Module):
    def __init__(self, base_encoder, dim=8, K=24, m=0.9, T=0.2, queue=None):
        super().__init__()
        self.K, self.m, self.T = K, m, T
        self.encoder_q = base_encoder(dim=dim)
        self.encoder_k = base_encoder(dim=dim)
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data.copy_(param_q.data)
            param_k.requires_grad = False
        self.register_buffer("queue", queue)
        self.queue = nn.functional.normalize(self.queue, dim=0)
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0
        self.queue[:, ptr:ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K
        self.queue_ptr[0] = ptr

    def forward(self, im_q, im_k):
        q = self.encoder_q(im_q)
        q = nn.functional.normalize(q, dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = self.encoder_k(im_k)
            k = nn.functional.normalize(k, dim=1)
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1)
        logits /= self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return logits, labels


def views(rng, n, in_dim=10):
    """Two noisy, randomly scaled views of each of n prototype vectors."""
    base = rng.normal(size=(n, in_dim))
    aug = lambda: (base * rng.uniform(0.7, 1.3, (n, 1)) + rng.normal(0, 0.3, (n, in_dim)))
    return (torch.tensor(aug(), dtype=torch.float32), torch.tensor(aug(), dtype=torch.float32))


def init_weights(model, rng):
    for name, p in model.encoder_q.named_parameters():
        if p.dim() > 1:
            p.data.copy_(torch.from_numpy(rng.normal(0, 1 / np.sqrt(p.shape[1]), tuple(p.shape))
                                          .astype(np.float32)))
        elif not name.startswith("fc.1"):
            p.data.zero_()
    for param_q, param_k in zip(model.encoder_q.parameters(), model.encoder_k.parameters()):
        param_k.data.copy_(param_q.data)


def main(steps=10, compile=False, seed=0, batch=8):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    queue = torch.tensor(rng.normal(size=(8, 24)), dtype=torch.float32)
    model = MoCo(Encoder, queue=queue)
    init_weights(model, rng)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    data = [views(rng, batch) for _ in range(steps)]
    net = model

    def step(im_q, im_k):
        output, target = net(im_q=im_q, im_k=im_k)
        loss = criterion(output, target)
        acc1 = (output.argmax(1) == target).float().mean() * 100
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, acc1

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, accs = [], []
    for im_q, im_k in data:
        loss, acc1 = step(im_q, im_k)
        losses.append(loss.item())
        accs.append(acc1.item())
    return {"losses": losses, "acc1": accs, "queue_ptr": model.queue_ptr.tolist(),
            "queue": model.queue[:, :3].flatten().tolist(),
            "key_weight": model.encoder_k.fc[0].weight[0].tolist(),
            "running_mean": model.encoder_k.fc[1].running_mean[:4].tolist()}
