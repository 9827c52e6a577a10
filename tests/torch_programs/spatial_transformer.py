"""A spatial transformer network classifier and its training loop, written the way
PyTorch programs with a learned warp are: a localisation network (convolutions, max
pooling, ReLU, two linear layers) regresses a 2x3 affine matrix per image, ``F.affine_grid``
turns it into a sampling grid and ``F.grid_sample`` resamples the input before an ordinary
convolutional classifier (log_softmax, nll_loss), trained with SGD and momentum; a test
pass counts correct predictions and reports how far the learned warps moved from the
starting one. Random smooth 28x28 images (a few Gaussian blobs each, like pen strokes)
stand in for a dataset (no download).

The last localisation layer starts as a fixed warp (zero weight, the bias a mild zoom and
shift) as such programs start from the identity: not the identity itself, whose sampling
positions fall exactly on pixel centres, where bilinear sampling's gradient with respect to
the position jumps (any rounding then picks a side: no two frameworks would agree)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

START_WARP = [0.9, 0.05, 0.03, -0.04, 0.95, -0.02]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        # the classifier
        self.conv1 = nn.Conv2d(1, 6, kernel_size=5)
        self.conv2 = nn.Conv2d(6, 12, kernel_size=5)
        self.conv2_drop = nn.Dropout2d(0.0)
        self.fc1 = nn.Linear(12 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)
        # the localisation network: where to look
        self.localization = nn.Sequential(
            nn.Conv2d(1, 4, kernel_size=7),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True),
            nn.Conv2d(4, 8, kernel_size=5),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True),
        )
        # its regressor of the 2x3 affine matrix
        self.fc_loc = nn.Sequential(nn.Linear(8 * 3 * 3, 16), nn.ReLU(True), nn.Linear(16, 6))

    def start_warp(self):
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor(START_WARP, dtype=torch.float))

    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 8 * 3 * 3)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        x = F.grid_sample(x, grid, align_corners=False)
        return x, theta

    def forward(self, x):
        x, theta = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 12 * 4 * 4)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, p=0.0, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1), theta


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in model.state_dict().items():
        fan_in = int(np.prod(value.shape[1:])) if value.dim() > 1 else value.shape[0]
        draw = rng.uniform(-1.0, 1.0, tuple(value.shape)) / np.sqrt(fan_in)
        state[name] = torch.tensor(draw.astype(np.float32))
    model.load_state_dict(state)


def blobs(rng, count, size=28, per_image=4):
    """``count`` images (count, 1, size, size), each the sum of a few Gaussian blobs."""
    ys, xs = np.mgrid[0:size, 0:size]
    images = np.zeros((count, 1, size, size))
    for image in images:
        for _ in range(per_image):
            cy, cx = rng.uniform(6, size - 6, 2)
            width = rng.uniform(1.5, 4.0)
            image[0] += np.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * width ** 2))
    return images


def main(steps=10, compile=False, seed=0, batch_size=8, epochs=2):
    torch.manual_seed(seed)
    model = Net()
    init_weights(model, seed)
    model.start_warp()
    rng = np.random.default_rng(seed + 1)
    count = max(1, steps // epochs) * batch_size
    images = torch.tensor(blobs(rng, count), dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, 10, count), dtype=torch.long)
    train_loader = DataLoader(TensorDataset(images, labels), batch_size=batch_size)
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train_step(data, target):
        optimizer.zero_grad()
        output, _ = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    start = torch.tensor(START_WARP).view(2, 3)
    losses, correct, warp_moved = [], [], []
    for _ in range(epochs):
        model.train()
        for data, target in train_loader:
            losses.append(train_step(data, target).item())
        model.eval()
        hits, moved = 0, 0.0
        with torch.no_grad():
            for data, target in train_loader:
                output, theta = model(data)
                hits += output.argmax(dim=1).eq(target).sum().item()
                moved += (theta - start).abs().mean().item()
        correct.append(hits)
        warp_moved.append(moved / len(train_loader))
    return {"losses": losses, "correct": correct, "warp_moved": warp_moved}
