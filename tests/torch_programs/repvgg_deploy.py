"""RepVGG-style training and deployment as the RepVGG/MobileOne repositories write it:
each block sums a 3x3 conv + ``BatchNorm2d``, a 1x1 conv + ``BatchNorm2d`` and an
identity ``BatchNorm2d``; one block's 3x3 kernel starts as the identity
(``nn.init.dirac_(..., groups=)`` on a grouped conv); training clips the gradients in
torch 2.6's two halves (``nn.utils.get_total_norm`` of the gradients, logged, then
``nn.utils.clip_grads_with_norm_``) under SGD with ``OneCycleLR``; for deployment each
branch is folded into one 3x3 kernel and bias by hand (``F.pad`` of the 1x1 kernel to
3x3, the identity as a kernel of ones at the centre) and the stem's conv and batch norm by
``torch.nn.utils.fuse_conv_bn_eval``; ``model.eval()`` outputs before and after the
reparameterisation agree, and the deployed model is loaded from a ``state_dict`` into a
plain ``nn.Sequential`` of convs."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn(cin, cout, k, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout))


class RepBlock(nn.Module):
    def __init__(self, channels, groups=1):
        super().__init__()
        self.dense = conv_bn(channels, channels, 3, groups)
        self.one = conv_bn(channels, channels, 1, groups)
        self.identity = nn.BatchNorm2d(channels)
        self.groups = groups

    def forward(self, x):
        return F.relu(self.dense(x) + self.one(x) + self.identity(x))

    def _fold(self, kernel, bn):
        std = (bn.running_var + bn.eps).sqrt()
        t = (bn.weight / std).reshape(-1, 1, 1, 1)
        return kernel * t, bn.bias - bn.running_mean * bn.weight / std

    def equivalent(self):
        k3, b3 = self._fold(self.dense[0].weight, self.dense[1])
        k1, b1 = self._fold(F.pad(self.one[0].weight, [1, 1, 1, 1]), self.one[1])
        channels = self.identity.num_features
        per_group = channels // self.groups
        ident = torch.zeros(channels, per_group, 3, 3)
        for i in range(channels):
            ident[i, i % per_group, 1, 1] = 1.0
        kid, bid = self._fold(ident, self.identity)
        return k3 + k1 + kid, b3 + b1 + bid


class RepNet(nn.Module):
    def __init__(self, width=8, classes=3):
        super().__init__()
        self.stem = conv_bn(3, width, 3)
        self.blocks = nn.Sequential(RepBlock(width), RepBlock(width, groups=2))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        return self.head(x.mean(dim=(2, 3)))


def deploy(model):
    stem = nn.utils.fuse_conv_bn_eval(model.stem[0], model.stem[1])
    convs = [stem]
    for block in model.blocks:
        kernel, bias = block.equivalent()
        conv = nn.Conv2d(kernel.shape[1] * block.groups, kernel.shape[0], 3, padding=1,
                         groups=block.groups)
        conv.load_state_dict({"weight": kernel.detach(), "bias": bias.detach()})
        convs.append(conv)
    plain = nn.Sequential(*[m for c in convs for m in (c, nn.ReLU())])
    fresh = nn.Sequential(*[m for c in convs for m in
                            (nn.Conv2d(c.in_channels, c.out_channels, 3, padding=1,
                                       groups=c.groups), nn.ReLU())])
    fresh.load_state_dict(plain.state_dict())
    return fresh


def batch(rng, n=6, size=8):
    labels = rng.integers(0, 3, n)
    x = rng.normal(0, 1, (n, 3, size, size)).astype(np.float32)
    x[np.arange(n), labels] += 0.8
    return torch.from_numpy(x), torch.from_numpy(labels)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = RepNet()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(rng.normal(0 if p.dim() > 1 else 1, 0.3, tuple(p.shape))
                                     .astype(np.float32)))
    nn.init.dirac_(model.blocks[1].dense[0].weight, groups=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=steps)
    net = torch.compile(model) if compile == "model" else model

    def step(x, y):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = nn.utils.get_total_norm(grads, norm_type=2.0)
        nn.utils.clip_grads_with_norm_(model.parameters(), max_norm=1.0, total_norm=norm)
        optimizer.step()
        return loss, norm

    if compile is True:
        step = torch.compile(step)
    losses, norms = [], []
    for _ in range(steps):
        loss, norm = step(*batch(rng))
        losses.append(loss.item())
        norms.append(norm.item())
        scheduler.step()
    model.eval()
    x, _ = batch(rng, n=2)
    with torch.no_grad():
        trained = net(x)
        features = deploy(model)(x)
        deployed = model.head(features.mean(dim=(2, 3)))
    return {"losses": losses, "norms": norms, "trained": trained.flatten().tolist(),
            "deployed": deployed.flatten().tolist(),
            "agree": [bool(torch.allclose(trained, deployed, atol=1e-4))]}
