"""SegNet as its PyTorch ports write it: encoder stages ending in ``nn.MaxPool2d(2, 2,
return_indices=True)`` whose indices (and the pre-pool sizes) the decoder hands to
``nn.MaxUnpool2d(2, 2)`` with ``output_size=`` (odd feature maps, so the sizes matter) and
to ``F.max_unpool2d``; ``BatchNorm2d`` in training and eval; a pixel-wise ``NLLLoss`` on
``F.log_softmax`` with class weights computed from the batch's label frequencies by
``torch.bincount`` (outside the step) and ``ignore_index``; ``torch.count_nonzero`` for the
pixel accuracy; Adam with ``amsgrad=True`` and ``ExponentialLR``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

C, IGNORE = 3, -1


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class SegNet(nn.Module):
    def __init__(self, width=6):
        super().__init__()
        self.enc1 = conv_bn(2, width)
        self.enc2 = nn.Sequential(conv_bn(width, 2 * width), conv_bn(2 * width, 2 * width))
        self.pool = nn.MaxPool2d(2, 2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2, 2)
        self.dec2 = conv_bn(2 * width, width)
        self.dec1 = nn.Conv2d(width, C, 3, padding=1)

    def forward(self, x):
        e1 = self.enc1(x)
        size1 = e1.size()
        p1, idx1 = self.pool(e1)
        e2 = self.enc2(p1)
        size2 = e2.size()
        p2, idx2 = self.pool(e2)
        d2 = self.unpool(p2, idx2, output_size=size2)
        d1 = self.dec2(d2)
        d0 = F.max_unpool2d(d1, idx1, kernel_size=2, stride=2, output_size=size1[2:])
        return self.dec1(d0)


def data(rng, n=4, h=11, w=9):
    x = rng.normal(0, 1, (n, 2, h, w)).astype(np.float32)
    target = ((x[:, 0] > 0.3).astype(np.int64) + (x[:, 1] > 0.5)).astype(np.int64)
    target[:, 0, :3] = IGNORE
    return torch.from_numpy(x), torch.from_numpy(target)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = SegNet()
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p[0].numel() if p.dim() > 1 else 1
            p.copy_(torch.from_numpy(rng.normal(0, np.sqrt(2 / fan_in), tuple(p.shape))
                                     .astype(np.float32)) if p.dim() > 1 else
                    torch.from_numpy(rng.uniform(0.5, 1.5, tuple(p.shape)).astype(np.float32)))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, amsgrad=True)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    net = torch.compile(model) if compile == "model" else model

    def step(x, target, weight):
        model.train()
        optimizer.zero_grad()
        out = net(x)
        loss = F.nll_loss(F.log_softmax(out, dim=1), target, weight=weight,
                          ignore_index=IGNORE)
        loss.backward()
        optimizer.step()
        return loss, out

    if compile is True:
        step = torch.compile(step)
    losses, accuracy = [], []
    for _ in range(steps):
        x, target = data(rng)
        valid = target[target != IGNORE]
        freq = torch.bincount(valid, minlength=C).float() / valid.numel()
        weight = 1.0 / torch.log(1.02 + freq)
        loss, out = step(x, target, weight)
        losses.append(loss.item())
        pred = out.argmax(1)
        correct = torch.count_nonzero((pred == target) & (target != IGNORE))
        accuracy.append(int(correct))
        scheduler.step()
    model.eval()
    with torch.no_grad():
        x, target = data(rng)
        probs = F.softmax(net(x), dim=1)
    return {"losses": losses, "correct": accuracy, "probs": probs.flatten()[::7].tolist(),
            "running_var": model.enc2[1][1].running_var.tolist()}
