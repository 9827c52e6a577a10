"""A classifier trained with softmax plus the center loss, and inputs normalised by running
statistics, the way their popular implementations keep state in buffers updated inside
``forward``: an ``RunningMeanStd`` observation normaliser (``mean``, ``var``, ``count``
buffers, the parallel-variance update written with ``self.mean.copy_(...)``,
``self.var.copy_(...)``, ``self.count += batch_count``) applied only ``if self.training``
updates it; class centers as a buffer moved towards their members after each step
(``torch.bincount(labels, minlength=C)``, ``centers.index_add_(0, labels, diff)``, divided by
``1 + counts``) under ``torch.no_grad()``; a histogram buffer bumped with
``self.seen[labels] += 1`` (torch's advanced-index ``+=``: a repeated label counts once per
batch); the center loss ``(features - centers[labels]).pow(2).sum(1).mean() / 2``; Adam
for the network, and an eval pass with the frozen statistics."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RunningMeanStd(nn.Module):
    def __init__(self, shape, epsilon=1e-4):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(epsilon))

    @torch.no_grad()
    def update(self, x):
        batch_mean, batch_var, batch_count = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta = batch_mean - self.mean
        tot = self.count + batch_count
        new_mean = self.mean + delta * batch_count / tot
        m2 = self.var * self.count + batch_var * batch_count \
            + delta ** 2 * self.count * batch_count / tot
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / tot)
        self.count += batch_count

    def forward(self, x):
        if self.training:
            self.update(x)
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-5, 5)


class CenterNet(nn.Module):
    def __init__(self, in_dim=6, feat_dim=4, n_classes=3):
        super().__init__()
        self.norm = RunningMeanStd(in_dim)
        self.body = nn.Sequential(nn.Linear(in_dim, 16), nn.ELU(), nn.Linear(16, feat_dim))
        self.classifier = nn.Linear(feat_dim, n_classes)
        self.register_buffer("centers", torch.zeros(n_classes, feat_dim))
        self.register_buffer("seen", torch.zeros(n_classes))

    def forward(self, x, labels=None):
        features = self.body(self.norm(x))
        if labels is not None:
            self.seen[labels] += 1
        return self.classifier(features), features


def batches(rng, n, in_dim=6):
    labels = rng.integers(0, 3, n)
    means = np.array([[3, 0, 0, 1, 0, 10], [0, 3, 0, 1, 0, 10], [0, 0, 3, 1, 0, 10]])
    x = means[labels] + rng.normal(0, 1.0, (n, in_dim)) * [1, 1, 1, 0.1, 5, 2]
    return torch.tensor(x, dtype=torch.float32), torch.from_numpy(labels)


def init_weights(model, rng):
    for name, p in model.named_parameters():
        if p.dim() > 1:
            p.data.copy_(torch.from_numpy(rng.normal(0, 1 / np.sqrt(p.shape[1]), tuple(p.shape))
                                          .astype(np.float32)))
        else:
            p.data.zero_()


def main(steps=10, compile=False, seed=0, batch=16, alpha=0.5, lam=0.1):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = CenterNet()
    init_weights(model, rng)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = [batches(rng, batch) for _ in range(steps)]
    net = model

    def step(x, labels):
        optimizer.zero_grad()
        logits, features = net(x, labels)
        centers_batch = model.centers[labels]
        center_loss = (features - centers_batch).pow(2).sum(1).mean() / 2
        loss = F.cross_entropy(logits, labels) + lam * center_loss
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            diff = centers_batch - features.detach()
            counts = torch.bincount(labels, minlength=model.centers.shape[0]).float()
            delta = torch.zeros_like(model.centers).index_add_(0, labels, diff)
            model.centers -= alpha * delta / (1 + counts).unsqueeze(1)
        return loss, center_loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, center_losses = [], []
    for x, labels in data:
        loss, center_loss = step(x, labels)
        losses.append(loss.item())
        center_losses.append(center_loss.item())
    model.eval()
    x, labels = batches(rng, 48)
    with torch.no_grad():
        logits, _ = model(x)
    return {"losses": losses, "center_losses": center_losses,
            "correct": [int((logits.argmax(1) == labels).sum())],
            "mean": model.norm.mean.tolist(), "var": model.norm.var.tolist(),
            "count": [model.norm.count.item()], "centers": model.centers.flatten().tolist(),
            "seen": model.seen.tolist()}
