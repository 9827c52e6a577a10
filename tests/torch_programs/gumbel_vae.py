"""A categorical VAE with the Gumbel-softmax relaxation (Jang et al.), written the way the
common PyTorch notebooks and ``YongfeiYan/Gumbel_Softmax_VAE`` are: ``sample_gumbel`` as
``-torch.log(-torch.log(U + eps) + eps)`` (its uniforms drawn by NumPy outside the step and
passed in, so every framework sees the same noise), ``gumbel_softmax_sample`` with a
temperature, the straight-through hard sample ``y_hard = torch.zeros_like(y).view(-1,
shape[-1])``, ``y_hard.scatter_(1, ind.view(-1, 1), 1)`` and ``(y_hard - y).detach() + y``;
a temperature annealed by ``np.maximum(temp * np.exp(-ANNEAL_RATE * step), temp_min)`` (a
Python float argument of the compiled step that changes at every call), the KL to a uniform
prior ``torch.sum(qy * torch.log(qy * categorical_dim + 1e-20), dim=-1).mean()``,
``F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum') / x.shape[0]``, Adam;
evaluation by ``F.gumbel_softmax``-free argmax codes (``q.argmax(dim=-1)`` then
``F.one_hot``) decoded under ``torch.inference_mode()``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

latent_dim = 6
categorical_dim = 4
image = 36


def sample_gumbel(U, eps=1e-20):
    return -torch.log(-torch.log(U + eps) + eps)


def gumbel_softmax_sample(logits, U, temperature):
    y = logits + sample_gumbel(U)
    return F.softmax(y / temperature, dim=-1)


def gumbel_softmax(logits, U, temperature, hard=False):
    y = gumbel_softmax_sample(logits, U, temperature)
    if not hard:
        return y.view(-1, latent_dim * categorical_dim)
    shape = y.size()
    _, ind = y.max(dim=-1)
    y_hard = torch.zeros_like(y).view(-1, shape[-1])
    y_hard.scatter_(1, ind.view(-1, 1), 1)
    y_hard = y_hard.view(*shape)
    y_hard = (y_hard - y).detach() + y
    return y_hard.view(-1, latent_dim * categorical_dim)


class VAE_gumbel(nn.Module):
    def __init__(self, hard):
        super(VAE_gumbel, self).__init__()
        self.hard = hard
        self.fc1 = nn.Linear(image, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, latent_dim * categorical_dim)
        self.fc4 = nn.Linear(latent_dim * categorical_dim, 16)
        self.fc5 = nn.Linear(16, 32)
        self.fc6 = nn.Linear(32, image)
        self.relu = nn.ReLU()
        self.sigmoid = nn.Sigmoid()

    def encode(self, x):
        h1 = self.relu(self.fc1(x))
        h2 = self.relu(self.fc2(h1))
        return self.relu(self.fc3(h2))

    def decode(self, z):
        h4 = self.relu(self.fc4(z))
        h5 = self.relu(self.fc5(h4))
        return self.sigmoid(self.fc6(h5))

    def forward(self, x, U, temp):
        q = self.encode(x.view(-1, image))
        q_y = q.view(q.size(0), latent_dim, categorical_dim)
        z = gumbel_softmax(q_y, U, temp, self.hard)
        return self.decode(z), F.softmax(q_y, dim=-1).reshape(*q.size())


def loss_function(recon_x, x, qy):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, image), reduction='sum') / x.shape[0]
    log_ratio = torch.log(qy * categorical_dim + 1e-20)
    KLD = torch.sum(qy * log_ratio, dim=-1).mean()
    return BCE + KLD


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=8):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    temp, temp_min, ANNEAL_RATE = 1.0, 0.5, 0.1
    protos = (rng.random((4, image)) < 0.4).astype(np.float32)
    data = []
    for _ in range(steps):
        x = np.clip(protos[rng.integers(0, 4, batch)] + rng.normal(0, 0.1, (batch, image)), 0, 1)
        U = rng.random((batch, latent_dim, categorical_dim))
        data.append((torch.tensor(x, dtype=torch.float32), torch.tensor(U, dtype=torch.float32)))
    results = {}
    for hard in (False, True):
        model = VAE_gumbel(hard)
        init_weights(model, seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

        def train_step(data, U, temp):
            optimizer.zero_grad()
            recon_batch, qy = model(data, U, temp)
            loss = loss_function(recon_batch, data, qy)
            loss.backward()
            optimizer.step()
            return loss

        if compile == "model":
            model = torch.compile(model)
        elif compile:
            train_step = torch.compile(train_step)
        losses, temps = [], []
        t = temp
        for batch_idx, (x, U) in enumerate(data):
            model.train()
            losses.append(train_step(x, U, t).item())
            t = float(np.maximum(temp * np.exp(-ANNEAL_RATE * (batch_idx + 1)), temp_min))
            temps.append(t)
        model.eval()
        with torch.inference_mode():
            q = (model._orig_mod if hasattr(model, "_orig_mod") else model).encode(data[0][0])
            codes = q.view(-1, latent_dim, categorical_dim).argmax(dim=-1)
            z = F.one_hot(codes, categorical_dim).float().view(-1, latent_dim * categorical_dim)
            sample = (model._orig_mod if hasattr(model, "_orig_mod") else model).decode(z)
        key = "hard" if hard else "soft"
        results[key + "_losses"] = losses
        results[key + "_codes"] = codes.flatten().tolist()
        results[key + "_sample"] = sample[0, :8].tolist()
    results["temps"] = temps
    return results
