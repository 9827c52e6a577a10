"""A SimCLR contrastive pre-training step followed by a linear probe, written the way
SimCLR re-implementations are: two augmented views of each image (random flips by
``torch.flip`` and crops by slicing chosen from a seeded NumPy generator, additive noise),
a small ResNet-ish encoder with BatchNorm whose ``fc`` is replaced by ``nn.Identity()``, a
projection MLP, ``F.normalize`` of the projections, the NT-Xent loss over the ``2N x 2N``
cosine-similarity matrix (``torch.cat`` of the views, ``z @ z.T / temperature``, the
diagonal removed by ``masked_fill`` with a boolean ``torch.eye``, positives found by
``torch.arange(N).roll``-style index arithmetic, ``F.cross_entropy``), top-1 accuracy of
the positive pair from ``(sim.argmax(1) == labels).float().mean()``, SGD with Nesterov
momentum and a cosine schedule by ``CosineAnnealingLR``; then the encoder is frozen
(``requires_grad_(False)``, ``eval()``) and a linear classifier trained on its features
under ``torch.no_grad()``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class Encoder(nn.Module):
    def __init__(self, width=8, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.layer1 = Block(width, width, 1)
        self.layer2 = Block(width, 2 * width, 2)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class SimCLR(nn.Module):
    def __init__(self, feat=16, proj=8):
        super().__init__()
        self.encoder = Encoder()
        self.encoder.fc = nn.Identity()
        self.projector = nn.Sequential(nn.Linear(feat, feat), nn.ReLU(), nn.Linear(feat, proj))

    def forward(self, x1, x2):
        z = torch.cat([self.projector(self.encoder(x1)), self.projector(self.encoder(x2))])
        return F.normalize(z, dim=1)


def nt_xent(z, temperature=0.5):
    n = z.shape[0] // 2
    sim = z @ z.T / temperature
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), -9e15)
    labels = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    loss = F.cross_entropy(sim, labels)
    acc = (sim.argmax(dim=1) == labels).float().mean()
    return loss, acc


def augment(x, rng):
    """Two views: a random crop (padded by reflection) and a random horizontal flip."""
    views = []
    for _ in range(2):
        pad = F.pad(x, (2, 2, 2, 2), mode="reflect")
        i, j = (int(v) for v in rng.integers(0, 5, 2))
        v = pad[:, :, i:i + x.shape[2], j:j + x.shape[3]]
        if rng.random() < 0.5:
            v = torch.flip(v, dims=[3])
        noise = torch.from_numpy(rng.standard_normal(v.shape).astype(np.float32))
        views.append(v + 0.1 * noise)
    return views


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: (torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32))
            if v.is_floating_point() and "running" not in k else v)
        for k, v in model.state_dict().items()})


def main(steps=6, compile=False, seed=0, batch=6):
    model = SimCLR()
    init_weights(model, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    rng = np.random.default_rng(seed + 1)
    images = torch.tensor(rng.standard_normal((steps, batch, 3, 8, 8)).astype(np.float32))
    labels = torch.tensor(rng.integers(0, 3, (steps, batch)))

    def train_step(x1, x2):
        loss, acc = nt_xent(model(x1, x2))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, acc

    probe = nn.Linear(16, 3)
    probe.load_state_dict({"weight": torch.zeros(3, 16), "bias": torch.zeros(3)})
    probe_opt = torch.optim.SGD(probe.parameters(), lr=0.1, momentum=0.9)

    def probe_step(x, y):
        with torch.no_grad():
            feats = model.encoder(x)
        loss = F.cross_entropy(probe(feats), y)
        probe_opt.zero_grad()
        loss.backward()
        probe_opt.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step, probe_step = torch.compile(train_step), torch.compile(probe_step)
    losses, accs, probe_losses = [], [], []
    for s in range(steps):
        model.train()
        loss, acc = train_step(*augment(images[s], rng))
        losses.append(loss.item())
        accs.append(acc.item())
        scheduler.step()
    model.encoder.requires_grad_(False)
    model.eval()
    for s in range(steps):
        probe_losses.append(probe_step(images[s], labels[s]).item())
    return {"losses": losses, "accs": accs, "probe_losses": probe_losses,
            "running_mean": model.encoder.stem[1].running_mean.tolist()}
