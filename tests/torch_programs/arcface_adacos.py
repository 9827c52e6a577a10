"""Face-recognition margin heads as insightface-style and pytorch-adacos code writes them:
ArcFace's ``ArcMarginProduct`` (``F.linear`` of ``F.normalize``d features and weights, the
sine by ``torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))``, the angular margin by
``cos(m)``/``sin(m)`` Python floats, ``torch.where(cosine > th, phi, cosine - mm)``, a
one-hot by in-place ``scatter_`` on ``torch.zeros(cosine.size())``, ``output *= s``); and
AdaCos, whose scale starts as a Python float and is rebound in ``forward`` to a tensor
computed under ``torch.no_grad()`` from ``torch.acos`` of the clamped logits, the
batch's median angle of the true classes (``torch.median(theta[one_hot == 1])``, a
boolean-mask read) and ``torch.log`` of the mean of the other classes' ``exp(s *
logits)``; a PReLU backbone with ``BatchNorm1d(affine=False)`` features; verification of
pairs by ``F.cosine_similarity`` thresholded at the best of ``torch.linspace``'s
candidates; SGD with ``MultiStepLR``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Parameter


class ArcMarginProduct(nn.Module):
    def __init__(self, in_features, out_features, s=8.0, m=0.30, easy_margin=False):
        super().__init__()
        self.s = s
        self.weight = Parameter(torch.FloatTensor(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)
        self.easy_margin = easy_margin
        self.cos_m = math.cos(m)
        self.sin_m = math.sin(m)
        self.th = math.cos(math.pi - m)
        self.mm = math.sin(math.pi - m) * m

    def forward(self, input, label):
        cosine = F.linear(F.normalize(input), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        if self.easy_margin:
            phi = torch.where(cosine > 0, phi, cosine)
        else:
            phi = torch.where(cosine > self.th, phi, cosine - self.mm)
        one_hot = torch.zeros(cosine.size())
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        output = (one_hot * phi) + ((1.0 - one_hot) * cosine)
        output *= self.s
        return output


class AdaCos(nn.Module):
    def __init__(self, num_features, num_classes, m=0.50):
        super().__init__()
        self.num_features = num_features
        self.n_classes = num_classes
        self.s = math.sqrt(2) * math.log(num_classes - 1)
        self.m = m
        self.W = Parameter(torch.FloatTensor(num_classes, num_features))
        nn.init.xavier_uniform_(self.W)

    def forward(self, input, label=None):
        x = F.normalize(input)
        W = F.normalize(self.W)
        logits = F.linear(x, W)
        if label is None:
            return logits
        theta = torch.acos(torch.clamp(logits, -1.0 + 1e-7, 1.0 - 1e-7))
        one_hot = torch.zeros_like(logits)
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        with torch.no_grad():
            B_avg = torch.where(one_hot < 1, torch.exp(self.s * logits), torch.zeros_like(logits))
            B_avg = torch.sum(B_avg) / input.size(0)
            theta_med = torch.median(theta[one_hot == 1])
            self.s = torch.log(B_avg) / torch.cos(torch.min(math.pi / 4 * torch.ones_like(theta_med),
                                                            theta_med))
        output = self.s * logits
        return output


class FaceNet(nn.Module):
    def __init__(self, in_dim=12, feat=8, classes=5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_dim, 16), nn.BatchNorm1d(16), nn.PReLU(16),
                                  nn.Linear(16, feat), nn.BatchNorm1d(feat, affine=False))
        self.arc = ArcMarginProduct(feat, classes)
        self.ada = AdaCos(feat, classes)

    def forward(self, x, label):
        f = self.body(x)
        return f, self.arc(f, label), self.ada(f, label)


def make_batch(rng, centers, n=10):
    label = rng.integers(0, len(centers), n)
    x = centers[label] + rng.normal(0, 0.7, (n, centers.shape[1]))
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(label)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1.5, (5, 12))
    model = FaceNet()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.4, p.shape).astype(np.float32)))
        model.body[2].weight.fill_(0.25)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 3], gamma=0.5)
    criterion = nn.CrossEntropyLoss()
    net = torch.compile(model) if compile == "model" else model

    def train_step(x, label):
        optimizer.zero_grad()
        _, arc_out, ada_out = net(x, label)
        loss = criterion(arc_out, label) + criterion(ada_out, label)
        loss.backward()
        optimizer.step()
        return loss.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        x, label = make_batch(rng, centers)
        loss = train_step(x, label)
        scheduler.step()
        log.append([loss.item(), float(model.ada.s)])
    model.eval()
    x, label = make_batch(rng, centers, n=12)
    with torch.no_grad():
        feats = model.body(x)
        logits = model.ada(feats)
    a, b = feats[:6], feats[6:]
    same = (label[:6] == label[6:]).float()
    sims = F.cosine_similarity(a, b)
    thresholds = torch.linspace(-1, 1, 21)
    acc = ((sims.unsqueeze(0) > thresholds.unsqueeze(1)).float() == same).float().mean(1)
    return {"log": log, "sims": sims.tolist(), "best": [int(acc.argmax())],
            "logits": logits[0].tolist()}
