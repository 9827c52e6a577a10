"""Domain-adversarial training (DANN) as its PyTorch ports write it: a gradient reversal
layer as a ``torch.autograd.Function`` (``ctx.alpha = alpha``, ``return x.view_as(x)``
forward, ``output = grad_output.neg() * ctx.alpha`` and ``return output, None`` backward)
called through ``ReverseLayerF.apply(feature, alpha)``; a convolutional feature extractor
as an ``nn.Sequential`` built with ``add_module('f_conv1', ...)`` names, a class classifier
and a domain classifier on the reversed features, ``nn.LogSoftmax(dim=1)`` heads with
``nn.NLLLoss``; alpha scheduled as ``2. / (1. + np.exp(-10 * p)) - 1`` from the training
progress (a NumPy float, new every step); source and target batches through the same
network, ``torch.zeros(batch_size).long()`` / ``torch.ones(...)`` domain labels; Adam.
(The first conv has no bias, unlike the ports': before a BatchNorm its gradient is rounding
noise, which Adam turns into full steps that differ between frameworks, and the running
mean with it.) Data: 10x10 images of bars (the class: horizontal or vertical), the target domain with
inverted contrast and noise."""
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Function


class ReverseLayerF(Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        output = grad_output.neg() * ctx.alpha
        return output, None


class CNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.feature = nn.Sequential()
        self.feature.add_module('f_conv1', nn.Conv2d(1, 8, kernel_size=3, bias=False))
        self.feature.add_module('f_bn1', nn.BatchNorm2d(8))
        self.feature.add_module('f_pool1', nn.MaxPool2d(2))
        self.feature.add_module('f_relu1', nn.ReLU(True))
        self.feature.add_module('f_conv2', nn.Conv2d(8, 12, kernel_size=3))
        self.feature.add_module('f_relu2', nn.ReLU(True))
        self.class_classifier = nn.Sequential()
        self.class_classifier.add_module('c_fc1', nn.Linear(12 * 2 * 2, 16))
        self.class_classifier.add_module('c_relu1', nn.ReLU(True))
        self.class_classifier.add_module('c_fc2', nn.Linear(16, 2))
        self.class_classifier.add_module('c_softmax', nn.LogSoftmax(dim=1))
        self.domain_classifier = nn.Sequential()
        self.domain_classifier.add_module('d_fc1', nn.Linear(12 * 2 * 2, 16))
        self.domain_classifier.add_module('d_relu1', nn.ReLU(True))
        self.domain_classifier.add_module('d_fc2', nn.Linear(16, 2))
        self.domain_classifier.add_module('d_softmax', nn.LogSoftmax(dim=1))

    def forward(self, input_data, alpha):
        input_data = input_data.expand(input_data.data.shape[0], 1, 10, 10)
        feature = self.feature(input_data)
        feature = feature.view(-1, 12 * 2 * 2)
        reverse_feature = ReverseLayerF.apply(feature, alpha)
        class_output = self.class_classifier(feature)
        domain_output = self.domain_classifier(reverse_feature)
        return class_output, domain_output


def bars(rng, n, target=False):
    labels = rng.integers(0, 2, n)
    images = rng.normal(0, 0.2, (n, 1, 10, 10))
    for i, c in enumerate(labels):
        k = rng.integers(2, 8)
        if c:
            images[i, 0, :, k] += 1
        else:
            images[i, 0, k, :] += 1
    if target:
        images = 1 - images + rng.normal(0, 0.3, images.shape)
    return torch.tensor(images, dtype=torch.float32), torch.tensor(labels)


def init_weights(model, rng):
    state = model.state_dict()
    for name, v in state.items():
        if "running" in name or "num_batches" in name:
            continue
        if "bn" in name:
            state[name] = torch.ones_like(v) if name.endswith("weight") else torch.zeros_like(v)
            continue
        fan_in = int(np.prod(v.shape[1:])) if v.dim() > 1 else v.shape[0]
        state[name] = torch.tensor(rng.normal(0, 1 / np.sqrt(fan_in), tuple(v.shape))
                                   .astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch_size=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    my_net = CNNModel()
    init_weights(my_net, rng)
    optimizer = torch.optim.Adam(my_net.parameters(), lr=1e-2)
    loss_class = torch.nn.NLLLoss()
    loss_domain = torch.nn.NLLLoss()
    data = [(bars(rng, batch_size), bars(rng, batch_size, target=True)) for _ in range(steps)]
    net = my_net

    def train_step(s_img, s_label, t_img, alpha):
        my_net.zero_grad()
        domain_label = torch.zeros(batch_size).long()
        class_output, domain_output = net(input_data=s_img, alpha=alpha)
        err_s_label = loss_class(class_output, s_label)
        err_s_domain = loss_domain(domain_output, domain_label)
        domain_label = torch.ones(batch_size).long()
        _, domain_output = net(input_data=t_img, alpha=alpha)
        err_t_domain = loss_domain(domain_output, domain_label)
        err = err_t_domain + err_s_domain + err_s_label
        err.backward()
        optimizer.step()
        return err_s_label, err_s_domain, err_t_domain

    if compile == "model":
        net = torch.compile(my_net)
    elif compile:
        train_step = torch.compile(train_step)
    label_losses, domain_losses = [], []
    for i, ((s_img, s_label), (t_img, _)) in enumerate(data):
        p = float(i) / steps
        alpha = 2. / (1. + np.exp(-10 * p)) - 1
        err_s_label, err_s_domain, err_t_domain = train_step(s_img, s_label, t_img, alpha)
        label_losses.append(err_s_label.item())
        domain_losses.append(err_s_domain.item() + err_t_domain.item())
    my_net.eval()
    t_img, t_label = bars(rng, 64, target=True)
    with torch.no_grad():
        class_output, _ = my_net(input_data=t_img, alpha=0)
    pred = class_output.data.max(1, keepdim=True)[1]
    return {"losses": label_losses, "domain_losses": domain_losses,
            "target_correct": [int(pred.eq(t_label.data.view_as(pred)).cpu().sum())],
            "log_probs": class_output[:4].flatten().tolist()}
