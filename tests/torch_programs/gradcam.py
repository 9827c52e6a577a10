"""Grad-CAM (Selvaraju et al.) as the ``pytorch-grad-cam`` package writes it around a small
CNN classifier: an ``ActivationsAndGradients`` object registers a forward hook on the
target layer (``target_layer.register_forward_hook(self.save_activation)``) that keeps
``output.cpu().detach()`` in a list and, on the same output, a tensor hook
(``output.register_hook(_store_grad)``) that prepends each gradient (``self.gradients =
[grad.cpu().detach()] + self.gradients``); lists are reset before each call. The map is
``F.relu((grads.mean(axis=(2, 3), keepdim=True) * activations).sum(1))``, upsampled by
``F.interpolate(..., mode="bilinear", align_corners=False)`` and min-max normalised per
image. The classifier is trained first (Adam, a compiled step), then the class score
``output[range(n), target].sum()`` is backpropagated with ``model.zero_grad()`` through the
model the hooks sit in, for the predicted and for a fixed class."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CNN(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(6, 8, 3, padding=1), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class ActivationsAndGradients:
    def __init__(self, model, target_layer):
        self.model = model
        self.gradients = []
        self.activations = []
        self.handles = [target_layer.register_forward_hook(self.save_activation)]

    def save_activation(self, module, input, output):
        self.activations.append(output.cpu().detach())
        if not hasattr(output, "requires_grad") or not output.requires_grad:
            return

        def _store_grad(grad):
            self.gradients = [grad.cpu().detach()] + self.gradients
        output.register_hook(_store_grad)

    def __call__(self, x):
        self.gradients = []
        self.activations = []
        return self.model(x)

    def release(self):
        for handle in self.handles:
            handle.remove()


def grad_cam(wrapper, model, x, targets=None):
    output = wrapper(x)
    if targets is None:
        targets = output.argmax(1)
    model.zero_grad()
    output[torch.arange(x.shape[0]), targets].sum().backward(retain_graph=True)
    activations, grads = wrapper.activations[-1], wrapper.gradients[-1]
    weights = grads.mean(axis=(2, 3), keepdim=True)
    cam = F.relu((weights * activations).sum(1, keepdim=True))
    cam = F.interpolate(cam, size=(12, 12), mode="bilinear", align_corners=False)[:, 0]
    flat = cam.flatten(1)
    lo, hi = flat.min(1, keepdim=True)[0], flat.max(1, keepdim=True)[0]
    return ((flat - lo) / (hi - lo + 1e-7)).view_as(cam), targets


def images(rng, n):
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 0.3, (n, 1, 8, 8))
    for i, c in enumerate(y):
        x[i, 0, 2 * c:2 * c + 3, 2:6] += 1.5
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)


def main(steps=4, compile=False, seed=0, batch=12):
    rng = np.random.default_rng(seed)
    model = CNN()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = [images(rng, batch) for _ in range(steps)]
    net = model

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = [step(x, y).item() for x, y in data]
    wrapper = ActivationsAndGradients(net, model.features[2])
    x, y = images(rng, 6)
    cam, predicted = grad_cam(wrapper, model, x)
    cam_fixed, _ = grad_cam(wrapper, model, x, targets=torch.zeros(6, dtype=torch.long))
    wrapper.release()
    peak = cam.flatten(1).argmax(1)
    return {"losses": losses, "predicted": predicted.tolist(),
            "cam": cam[:2].flatten().tolist(), "cam_fixed": cam_fixed[:2].flatten().tolist(),
            "peak_rows": (peak // 12).tolist(), "n_kept": [len(wrapper.gradients),
                                                         len(wrapper.activations)],
            "fc_grad": model.fc.weight.grad.flatten().tolist()}
