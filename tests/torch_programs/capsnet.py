"""A capsule network (Sabour et al., "Dynamic Routing Between Capsules") written the way the
popular PyTorch reimplementations are: primary capsules as one ``nn.Conv2d`` whose output is
``view``-ed into 8-D capsules, a ``squash`` non-linearity with ``(squared_norm / (1 +
squared_norm)) * x / torch.sqrt(squared_norm)``, a routing weight ``nn.Parameter(torch.randn(
1, num_routes, num_caps, out_ch, in_ch))`` applied by ``torch.matmul`` after ``torch.stack``
and ``.unsqueeze(4)``, routing by agreement with logits ``b_ij`` kept in a ``torch.zeros``
tensor updated by ``b_ij = b_ij + a_ij.mean(dim=0)`` over three iterations, ``F.softmax``
over the output capsules, a margin loss with ``F.relu(0.9 - v_c).view(batch_size, -1) ** 2``,
and a reconstruction decoder masked by ``torch.eye(10).index_select(dim=0, index=...)``
(``torch.sqrt((x ** 2).sum(2))`` lengths, ``max_length_indices = classes.max(dim=1)``) with
an ``nn.MSELoss``. Adam; a ``torch.no_grad`` accuracy pass after each step."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def squash(input_tensor, dim=-1):
    squared_norm = (input_tensor ** 2).sum(dim, keepdim=True)
    output_tensor = squared_norm * input_tensor / ((1. + squared_norm) * torch.sqrt(squared_norm))
    return output_tensor


class ConvLayer(nn.Module):
    def __init__(self, in_channels=1, out_channels=16, kernel_size=5):
        super(ConvLayer, self).__init__()
        self.conv = nn.Conv2d(in_channels=in_channels, out_channels=out_channels,
                              kernel_size=kernel_size, stride=1)

    def forward(self, x):
        return F.relu(self.conv(x))


class PrimaryCaps(nn.Module):
    def __init__(self, num_capsules=8, in_channels=16, out_channels=4, kernel_size=3):
        super(PrimaryCaps, self).__init__()
        self.capsules = nn.ModuleList([
            nn.Conv2d(in_channels=in_channels, out_channels=out_channels,
                      kernel_size=kernel_size, stride=2, padding=0)
            for _ in range(num_capsules)])

    def forward(self, x):
        u = [capsule(x) for capsule in self.capsules]
        u = torch.stack(u, dim=1)
        u = u.view(x.size(0), -1, 8)
        return squash(u)


class DigitCaps(nn.Module):
    def __init__(self, num_capsules=4, num_routes=4 * 2 * 2, in_channels=8, out_channels=6):
        super(DigitCaps, self).__init__()
        self.in_channels = in_channels
        self.num_routes = num_routes
        self.num_capsules = num_capsules
        self.W = nn.Parameter(torch.randn(1, num_routes, num_capsules, out_channels, in_channels))

    def forward(self, x):
        batch_size = x.size(0)
        x = torch.stack([x] * self.num_capsules, dim=2).unsqueeze(4)
        W = torch.cat([self.W] * batch_size, dim=0)
        u_hat = torch.matmul(W, x)
        b_ij = torch.zeros(1, self.num_routes, self.num_capsules, 1)
        num_iterations = 3
        for iteration in range(num_iterations):
            c_ij = F.softmax(b_ij, dim=2)
            c_ij = torch.cat([c_ij] * batch_size, dim=0).unsqueeze(4)
            s_j = (c_ij * u_hat).sum(dim=1, keepdim=True)
            v_j = squash(s_j, dim=3)
            if iteration < num_iterations - 1:
                a_ij = torch.matmul(u_hat.transpose(3, 4), torch.cat([v_j] * self.num_routes, dim=1))
                b_ij = b_ij + a_ij.squeeze(4).mean(dim=0, keepdim=True)
        return v_j.squeeze(1)


class Decoder(nn.Module):
    def __init__(self, num_classes=4, caps_dim=6, image_size=10):
        super(Decoder, self).__init__()
        self.num_classes = num_classes
        self.image_size = image_size
        self.reconstraction_layers = nn.Sequential(
            nn.Linear(caps_dim * num_classes, 32), nn.ReLU(inplace=True),
            nn.Linear(32, image_size * image_size), nn.Sigmoid())

    def forward(self, x, data):
        classes = torch.sqrt((x ** 2).sum(2))
        classes = F.softmax(classes, dim=1)
        _, max_length_indices = classes.max(dim=1)
        masked = torch.eye(self.num_classes)
        masked = masked.index_select(dim=0, index=max_length_indices.squeeze(1).data)
        t = (x * masked[:, :, None, None]).view(x.size(0), -1)
        reconstructions = self.reconstraction_layers(t)
        reconstructions = reconstructions.view(-1, 1, self.image_size, self.image_size)
        return reconstructions, masked


class CapsNet(nn.Module):
    def __init__(self):
        super(CapsNet, self).__init__()
        self.conv_layer = ConvLayer()
        self.primary_capsules = PrimaryCaps()
        self.digit_capsules = DigitCaps()
        self.decoder = Decoder()
        self.mse_loss = nn.MSELoss()

    def forward(self, data):
        output = self.digit_capsules(self.primary_capsules(self.conv_layer(data)))
        reconstructions, masked = self.decoder(output, data)
        return output, reconstructions, masked

    def loss(self, data, x, target, reconstructions):
        return self.margin_loss(x, target) + self.reconstruction_loss(data, reconstructions)

    def margin_loss(self, x, labels, size_average=True):
        batch_size = x.size(0)
        v_c = torch.sqrt((x ** 2).sum(dim=2, keepdim=True))
        left = F.relu(0.9 - v_c).view(batch_size, -1)
        right = F.relu(v_c - 0.1).view(batch_size, -1)
        loss = labels * left ** 2 + 0.5 * (1.0 - labels) * right ** 2
        loss = loss.sum(dim=1).mean()
        return loss

    def reconstruction_loss(self, data, reconstructions):
        loss = self.mse_loss(reconstructions.view(reconstructions.size(0), -1),
                             data.view(reconstructions.size(0), -1))
        return loss * 0.0005


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor((rng.normal(0, 0.3, tuple(v.shape))).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch_size=6):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = CapsNet()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    batches = []
    for _ in range(steps):
        labels = rng.integers(0, 4, batch_size)
        images = rng.random((batch_size, 1, 10, 10)).astype(np.float32) * 0.5
        images[np.arange(batch_size), 0, labels * 2, :] += 0.5
        batches.append((torch.from_numpy(images), torch.from_numpy(labels)))

    def train_step(data, target):
        target = torch.eye(4).index_select(dim=0, index=target)
        optimizer.zero_grad()
        output, reconstructions, masked = model(data)
        loss = model.loss(data, output, target, reconstructions)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, correct, lengths = [], [], []
    for data, target in batches:
        model.train()
        losses.append(train_step(data, target).item())
        model.eval()
        with torch.no_grad():
            output, _, masked = model(data)
        correct.append(int(sum(np.argmax(masked.data.numpy(), 1) == target.numpy())))
        lengths.append(float(torch.sqrt((output ** 2).sum(dim=2)).sum()))
    return {"losses": losses, "correct": correct, "lengths": lengths}
