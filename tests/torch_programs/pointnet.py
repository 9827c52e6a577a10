"""PointNet classification as the popular PyTorch ports write it: points (B, 3, N) through
``nn.Conv1d(k, k', 1)`` + ``nn.BatchNorm1d`` + ``F.relu`` stacks, a T-Net predicting a 3x3
transform that ``torch.bmm`` applies (its output ``+ torch.eye(3).view(1, 9).repeat(B, 1)``),
a feature T-Net whose 64x64 transform is regularised by
``torch.norm(I - A @ A.transpose(2, 1), dim=(1, 2))``, the global feature
``torch.max(x, 2, keepdim=True)[0]``, ``x.view(-1, 1024)``-style flattening,
``nn.Dropout`` (p=0 here: the frameworks' random streams differ), ``F.log_softmax`` with
``F.nll_loss``, ``SGD(momentum=0.9)`` with ``StepLR`` (not the ports' Adam: several biases
here, before a batch norm or a max feeding one, have a gradient of rounding noise only,
which Adam's normalisation turns into steps of lr in either direction), and test accuracy
by ``pred.data.max(1)[1].eq(target.data).cpu().sum()``.
Point clouds: noisy samples of four shapes (sphere, cube surface, cylinder, cone), randomly
rotated about z."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TNet(nn.Module):
    def __init__(self, k=3, width=32):
        super().__init__()
        self.k = k
        self.conv1 = nn.Conv1d(k, width, 1)
        self.conv2 = nn.Conv1d(width, 2 * width, 1)
        self.fc1 = nn.Linear(2 * width, width)
        self.fc2 = nn.Linear(width, k * k)
        self.bn1, self.bn2 = nn.BatchNorm1d(width), nn.BatchNorm1d(2 * width)
        self.bn3 = nn.BatchNorm1d(width)

    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, self.conv2.out_channels)
        x = F.relu(self.bn3(self.fc1(x)))
        x = self.fc2(x)
        iden = torch.eye(self.k).flatten().view(1, self.k * self.k).repeat(batchsize, 1)
        x = x + iden
        return x.view(-1, self.k, self.k)


class PointNetCls(nn.Module):
    def __init__(self, classes=4, width=32, drop=0.0):
        super().__init__()
        self.stn = TNet(3)
        self.conv1 = nn.Conv1d(3, width, 1)
        self.fstn = TNet(width)
        self.conv2 = nn.Conv1d(width, 2 * width, 1)
        self.bn1, self.bn2 = nn.BatchNorm1d(width), nn.BatchNorm1d(2 * width)
        self.fc1 = nn.Linear(2 * width, width)
        self.bn3 = nn.BatchNorm1d(width)
        self.dropout = nn.Dropout(p=drop)
        self.fc2 = nn.Linear(width, classes)

    def forward(self, x):
        trans = self.stn(x)
        x = torch.bmm(x.transpose(2, 1), trans).transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        trans_feat = self.fstn(x)
        x = torch.bmm(x.transpose(2, 1), trans_feat).transpose(2, 1)
        x = self.bn2(self.conv2(x))
        x = torch.max(x, 2, keepdim=True)[0].view(x.size(0), -1)
        x = F.relu(self.bn3(self.dropout(self.fc1(x))))
        return F.log_softmax(self.fc2(x), dim=1), trans_feat


def feature_transform_regularizer(trans):
    d = trans.size()[1]
    identity = torch.eye(d)[None, :, :]
    return torch.mean(torch.norm(torch.bmm(trans, trans.transpose(2, 1)) - identity,
                                 dim=(1, 2)))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    state, names = {}, model.state_dict()
    for name, v in names.items():
        norm_layer = name.rsplit(".", 1)[0] + ".running_mean" in names
        if "running" in name or "num_batches" in name:
            state[name] = v
        elif norm_layer:
            state[name] = torch.tensor(((name.endswith("weight"))
                                        + rng.normal(0, 0.05, tuple(v.shape))).astype(np.float32))
        elif "fc2" in name and v.shape[0] in (9, 32 * 32):   # a T-Net's output starts small
            state[name] = torch.tensor(rng.normal(0, 0.01, tuple(v.shape)).astype(np.float32))
        else:
            fan_in = int(np.prod(v.shape[1:])) if v.dim() > 1 else v.shape[0]
            state[name] = torch.tensor(rng.normal(0, 1 / math.sqrt(fan_in), tuple(v.shape))
                                       .astype(np.float32))
    model.load_state_dict(state)


def clouds(rng, n, points=48):
    labels = rng.integers(0, 4, n)
    out = []
    for c in labels:
        u = rng.uniform(-1, 1, (points, 3))
        if c == 0:
            p = u / np.linalg.norm(u, axis=1, keepdims=True)
        elif c == 1:
            p = u.copy()
            axis = rng.integers(0, 3, points)
            p[np.arange(points), axis] = np.sign(p[np.arange(points), axis])
        elif c == 2:
            a = u[:, 0] * math.pi
            p = np.stack([np.cos(a), np.sin(a), u[:, 2]], 1)
        else:
            h = (u[:, 2] + 1) / 2
            a = u[:, 0] * math.pi
            p = np.stack([(1 - h) * np.cos(a), (1 - h) * np.sin(a), 2 * h - 1], 1)
        theta = rng.uniform(0, 2 * math.pi)
        rot = np.array([[math.cos(theta), -math.sin(theta), 0],
                        [math.sin(theta), math.cos(theta), 0], [0, 0, 1]])
        out.append((p @ rot.T + rng.normal(0, 0.02, p.shape)).T)
    return torch.tensor(np.stack(out), dtype=torch.float32), torch.tensor(labels)


def main(steps=10, compile=False, seed=0, batch=8):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    classifier = PointNetCls()
    init_weights(classifier, seed)
    optimizer = torch.optim.SGD(classifier.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    data = [clouds(rng, batch) for _ in range(steps)]
    test_points, test_target = clouds(rng, 32)

    def step(points, target):
        optimizer.zero_grad()
        pred, trans_feat = classifier(points)
        loss = F.nll_loss(pred, target) + feature_transform_regularizer(trans_feat) * 0.001
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        classifier = torch.compile(classifier)
    elif compile:
        step = torch.compile(step)
    losses = []
    for points, target in data:
        classifier.train()
        losses.append(step(points, target).item())
        scheduler.step()
    classifier.eval()
    with torch.no_grad():
        pred, trans_feat = classifier(test_points)
    pred_choice = pred.data.max(1)[1]
    correct = pred_choice.eq(test_target.data).cpu().sum()
    return {"losses": losses, "correct": [int(correct)],
            "test_log_probs": pred[:4].flatten().tolist(),
            "regularizer": [feature_transform_regularizer(trans_feat).item()]}
