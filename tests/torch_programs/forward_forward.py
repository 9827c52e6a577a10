"""Hinton's forward-forward algorithm, written the way the PyTorch forward-forward example
is: no backpropagation across layers; each ``Layer`` (an ``nn.Linear`` subclass with its own
Adam optimiser and threshold) normalises its input with ``x / (x.norm(2, 1, keepdim=True)
+ 1e-4)``, its goodness is ``h.pow(2).mean(1)``, and its loss ``torch.log(1 + torch.exp(
torch.cat([-g_pos + threshold, g_neg - threshold]))).mean()`` is minimised on its own, the
next layer training on ``.detach()``ed outputs. The label is written into the first pixels
(``x_[:, :10] *= 0.0``, ``x_[range(n), y] = x.max()``), negatives pair the images with
permuted labels, and prediction picks the label of greatest summed goodness with
``torch.cat(goodness_per_label, 1).argmax(1)``. The compiled form wraps a layer's step (or, as a model, its ``forward``)."""
import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam


def overlay_y_on_x(x, y):
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=0.03)
        self.threshold = 2.0

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def step(self, x_pos, x_neg):
        g_pos = self.forward(x_pos).pow(2).mean(1)
        g_neg = self.forward(x_neg).pow(2).mean(1)
        loss = torch.log(1 + torch.exp(torch.cat([-g_pos + self.threshold,
                                                   g_neg - self.threshold]))).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss

    def train_layer(self, x_pos, x_neg, epochs, step, losses):
        for i in range(epochs):
            losses.append(step(x_pos, x_neg).item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class Net(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = nn.ModuleList([Layer(dims[d], dims[d + 1]) for d in range(len(dims) - 1)])

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness += [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor((rng.uniform(-0.2, 0.2, tuple(v.shape))).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, n=48, width=36):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    y = torch.from_numpy(rng.integers(0, 10, n))
    centers = rng.normal(0, 1, (10, width))
    x = torch.tensor(centers[y.numpy()] + rng.normal(0, 0.5, (n, width)), dtype=torch.float32)
    net = Net([width, 24, 24])
    init_weights(net, seed)
    x_pos = overlay_y_on_x(x, y)
    rnd = torch.from_numpy(rng.permutation(n))
    x_neg = overlay_y_on_x(x, y[rnd])
    losses = []
    h_pos, h_neg = x_pos, x_neg
    for layer in net.layers:
        step = layer.step
        if compile == "model":  # the layer's own calls of self.forward run compiled
            layer.forward = torch.compile(layer.forward)
        elif compile:
            step = torch.compile(layer.step)
        h_pos, h_neg = layer.train_layer(h_pos, h_neg, steps, step, losses)
    with torch.no_grad():
        pred = net.predict(x)
    train_error = 1.0 - pred.eq(y).float().mean().item()
    return {"losses": losses, "predicted": pred.tolist(), "train_error": [train_error]}
