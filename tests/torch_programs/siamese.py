"""A siamese network for metric learning and its training loop, written the way the
PyTorch siamese and contrastive-learning examples are: one shared convolutional tower
applied to both images, embeddings normalised with ``F.normalize``, a contrastive loss
from ``F.pairwise_distance`` (``clamp(margin - d, min=0).pow(2)``), a triplet loss
(``nn.TripletMarginLoss``) on a third image, and a ``F.cosine_similarity`` head scored
with BCE, all in one ``nn.ModuleDict`` of heads; a ``register_buffer`` holding a running
mean of positive distances updated in place under ``no_grad``; ``nn.ParameterList``
temperatures; ``model.apply`` with ``kaiming_normal_`` initialisation; SGD with Nesterov
momentum and ``OneCycleLR`` stepped every batch; and an evaluation of pair accuracy by
thresholding distances, with ``(pred == target).sum().item()``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Tower(nn.Module):
    def __init__(self, embed_dim=8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d((1, 1)))
        self.fc = nn.Linear(8, embed_dim)

    def forward(self, x):
        x = self.features(x)
        x = x.view(x.size()[0], -1)
        return self.fc(x)


class SiameseNetwork(nn.Module):
    def __init__(self, embed_dim=8, margin=1.0):
        super().__init__()
        self.tower = Tower(embed_dim)
        self.heads = nn.ModuleDict({
            "triplet": nn.TripletMarginLoss(margin=0.5, p=2),
            "bce": nn.BCEWithLogitsLoss(),
        })
        self.temperatures = nn.ParameterList([nn.Parameter(torch.ones(1) * 5.0)])
        self.margin = margin
        self.register_buffer("pos_distance", torch.zeros(1))
        self.apply(self.init_weights)

    @staticmethod
    def init_weights(m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)

    def forward_once(self, x):
        return F.normalize(self.tower(x), p=2, dim=1)

    def forward(self, input1, input2):
        return self.forward_once(input1), self.forward_once(input2)

    def loss(self, out1, out2, out3, target):
        d = F.pairwise_distance(out1, out2)
        contrastive = torch.mean(target * torch.pow(d, 2)
                                 + (1 - target) * torch.pow(torch.clamp(self.margin - d,
                                                                        min=0.0), 2))
        triplet = self.heads["triplet"](out1, torch.where(target[:, None] > 0, out2, out1),
                                        out3)
        logits = F.cosine_similarity(out1, out2) * self.temperatures[0]
        bce = self.heads["bce"](logits, target)
        with torch.no_grad():
            positive = (d * target).sum() / target.sum().clamp(min=1.0)
            self.pos_distance.mul_(0.9).add_(positive, alpha=0.1)
        return contrastive + triplet + 0.5 * bce


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in model.state_dict().items():
        fan_in = int(np.prod(value.shape[1:])) if value.dim() > 1 else 4
        draw = rng.uniform(-1.0, 1.0, tuple(value.shape)) / np.sqrt(fan_in)
        state[name] = torch.tensor(draw.astype(np.float32)) if name != "pos_distance" \
            else value
        if name.startswith("temperatures"):
            state[name] = torch.full(tuple(value.shape), 4.0)
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch_size=6):
    torch.manual_seed(seed)
    model = SiameseNetwork()
    init_weights(model, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=steps)
    rng = np.random.default_rng(seed + 1)
    images = torch.tensor(rng.normal(0, 1, (steps, 3, batch_size, 1, 8, 8)),
                          dtype=torch.float32)
    targets = torch.tensor(rng.integers(0, 2, (steps, batch_size)), dtype=torch.float32)

    def train_step(img1, img2, img3, target):
        optimizer.zero_grad()
        out1, out2 = model(img1, img2)
        out3 = model.forward_once(img3)
        loss = model.loss(out1, out2, out3, target)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, lrs = [], []
    model.train()
    for i in range(steps):
        img1, img2, img3 = images[i]
        losses.append(train_step(img1, img2, img3, targets[i]).item())
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    model.eval()
    correct, distances = 0, []
    with torch.no_grad():
        for i in range(steps):
            out1, out2 = model(images[i, 0], images[i, 1])
            d = F.pairwise_distance(out1, out2)
            pred = (d < 0.5).float()
            correct += (pred == targets[i]).sum().item()
            distances.append(d.mean().item())
    return {"losses": losses, "lrs": lrs, "distances": distances, "correct": [correct],
            "pos_distance": model.pos_distance.tolist()}
