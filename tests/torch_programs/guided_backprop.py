"""Module backward hooks as interpretability and debugging code uses them: a small CNN is
trained (SGD with momentum and Nesterov), then one more step runs with a gradient-flow
monitor, ``register_full_backward_hook`` on every ``nn.Conv2d`` and ``nn.Linear`` found by
``named_modules()`` storing ``grad_output[0].detach().norm()`` and the norm of
``grad_input[0]`` (None for the first conv, whose input needs no gradient) in a dict by
name, and a ``register_full_backward_pre_hook`` on the classifier that halves
``grad_output`` (a returned tuple). The handles are removed, and guided backpropagation
(Springenberg et al.) as tutorials write it: a hook on every ``nn.ReLU`` returning
``(torch.clamp(grad_input[0], min=0.0),)``, the input's gradient for the predicted class
taken with ``torch.autograd.grad``, normalised per image, then plain saliency after
``handle.remove()``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(6, 8, 3, padding=1),
                                      nn.ReLU())
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(8 * 4 * 4, 16), nn.ReLU(),
                                        nn.Linear(16, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def images(rng, n):
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 0.3, (n, 1, 8, 8))
    for i, c in enumerate(y):
        x[i, 0, 2 * c:2 * c + 3, 1:7] += 1.0
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)


def monitor(model, log):
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            def hook(module, grad_input, grad_output, name=name):
                g_in = grad_input[0]
                log[name] = (grad_output[0].detach().norm(),
                             None if g_in is None else g_in.detach().norm())
            handles.append(module.register_full_backward_hook(hook))
    handles.append(model.classifier[3].register_full_backward_pre_hook(
        lambda module, grad_output: (grad_output[0] * 0.5,)))
    return handles


def saliency(net, x):
    x = x.clone().requires_grad_(True)
    scores = net(x)
    target = scores.argmax(1)
    grad, = torch.autograd.grad(scores.gather(1, target[:, None]).sum(), x)
    grad = grad.abs().flatten(1)
    return (grad / grad.max(1, keepdim=True)[0]).view(x.shape), target


def main(steps=4, compile=False, seed=0, batch=12):
    rng = np.random.default_rng(seed)
    model = Net()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    data = [images(rng, batch) for _ in range(steps + 1)]
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
    losses = [step(x, y).item() for x, y in data[:steps]]
    log = {}
    handles = monitor(model, log)
    losses.append(step(*data[steps]).item())
    for h in handles:
        h.remove()
    flow = [[float(n) if n is not None else -1.0 for n in log[name]] for name in sorted(log)]

    guides = [m.register_full_backward_hook(
        lambda m, grad_input, grad_output: (torch.clamp(grad_input[0], min=0.0),))
        for m in model.modules() if isinstance(m, nn.ReLU)]
    x, _ = images(rng, 4)
    guided, target = saliency(net, x)
    for h in guides:
        h.remove()
    plain, _ = saliency(net, x)
    return {"losses": losses, "flow": flow, "flow_names": [sorted(log)],
            "first_conv_input": [log["features.0"][1] is None],
            "guided": guided[:2].flatten().tolist(), "plain": plain[:2].flatten().tolist(),
            "target": target.tolist(),
            "fc_grad": model.classifier[3].weight.grad.flatten().tolist()}
