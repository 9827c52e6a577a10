"""LeNet with batch normalisation as the d2l book (Dive into Deep Learning, chapter 8.5)
writes it: every layer lazy (``nn.LazyConv2d``, ``nn.LazyBatchNorm2d``, ``nn.LazyLinear``,
``nn.LazyBatchNorm1d``) so no input size is written anywhere, a dummy forward pass that
creates the parameters (d2l's ``apply_init``) followed by ``net.apply(init)`` with
``nn.init.xavier_uniform_`` for the conv and linear layers, ``nn.Sigmoid`` activations,
``nn.AvgPool2d``, minibatch SGD, and accuracy by ``argmax`` in eval mode. With
``compile="model"`` the model is compiled before the dummy pass, so its first call creates
the parameters. Images: 28x28 blobs whose position says the class."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BNLeNet(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.net = nn.Sequential(
            nn.LazyConv2d(6, kernel_size=5), nn.LazyBatchNorm2d(), nn.Sigmoid(),
            nn.AvgPool2d(kernel_size=2, stride=2),
            nn.LazyConv2d(16, kernel_size=5), nn.LazyBatchNorm2d(), nn.Sigmoid(),
            nn.AvgPool2d(kernel_size=2, stride=2), nn.Flatten(),
            nn.LazyLinear(120), nn.LazyBatchNorm1d(), nn.Sigmoid(),
            nn.LazyLinear(84), nn.LazyBatchNorm1d(), nn.Sigmoid(),
            nn.LazyLinear(num_classes))

    def forward(self, X):
        return self.net(X)

    def apply_init(self, inputs, init=None):
        self.forward(*inputs)
        if init is not None:
            self.net.apply(init)


def init_cnn(module):
    if type(module) in (nn.Linear, nn.Conv2d):
        nn.init.xavier_uniform_(module.weight)


def numpy_weights(model, seed):
    """Overwrite every weight with NumPy draws (the frameworks' xavier draws differ) and
    reset the running statistics the dummy pass moved."""
    rng = np.random.default_rng(seed)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.reset_running_stats()
    for name, p in model.named_parameters():
        scale = 0.05 if name.endswith("bias") else 0.3
        with torch.no_grad():
            p.copy_(torch.tensor((float(name.endswith("weight") and p.dim() == 1)
                                  + rng.normal(0, scale, tuple(p.shape))).astype(np.float32)))


def blobs(rng, n, classes=4):
    labels = rng.integers(0, classes, n)
    yy, xx = np.mgrid[0:28, 0:28]
    centres = [(8, 8), (8, 20), (20, 8), (20, 20)]
    imgs = np.stack([np.exp(-((yy - centres[c][0]) ** 2 + (xx - centres[c][1]) ** 2) / 18.0)
                     for c in labels]).astype(np.float32)
    imgs += rng.normal(0, 0.2, imgs.shape).astype(np.float32)
    return torch.tensor(imgs[:, None]), torch.tensor(labels)


def main(steps=10, compile=False, seed=0, batch=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = BNLeNet()
    if compile == "model":
        model = torch.compile(model)
    net = model._orig_mod if hasattr(model, "_orig_mod") else model
    X, _ = blobs(rng, batch)
    net.apply_init([X], init_cnn) if compile != "model" else (model(X), net.net.apply(init_cnn))
    numpy_weights(net, seed)
    shapes = [list(p.shape) for p in net.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    data = [blobs(rng, batch) for _ in range(steps)]
    test_X, test_y = blobs(rng, 64)

    def step(X, y):
        loss = F.cross_entropy(model(X), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    if compile and compile != "model":
        step = torch.compile(step)
    losses = []
    for X, y in data:
        model.train()
        losses.append(step(X, y).item())
    model.eval()
    with torch.no_grad():
        logits = model(test_X)
    correct = int((logits.argmax(dim=1) == test_y).sum())
    return {"losses": losses, "correct": [correct], "shapes": sum(shapes, []),
            "running_mean": net.net[1].running_mean.tolist(),
            "logits": logits[:3].flatten().tolist(),
            "layer_kinds": [len(type(m).__name__) for m in net.net]}
