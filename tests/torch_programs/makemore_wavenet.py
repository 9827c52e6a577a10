"""A character-level language model in the style of makemore's later parts: the layers
written by hand as plain classes with ``__call__`` and ``parameters()`` (a ``Linear`` with
``torch.randn(...) / fan_in**0.5`` weights, a ``BatchNorm1d`` that keeps ``running_mean``
and ``running_var`` updated under ``torch.no_grad()`` and reduces over ``dim=(0, 1)`` for
3-D inputs, ``Tanh``, ``Embedding`` as ``self.weight[IX]``, ``FlattenConsecutive`` that
``view``s ``(B, T, C)`` into ``(B, T // n, C * n)`` and ``squeeze(1)``s, a ``Sequential``),
a WaveNet-like hierarchy of them, ``F.cross_entropy``, ``p.grad = None`` zeroing,
``p.requires_grad = True``, the update ``p.data += -lr * p.grad`` with a step decay, the
last layer scaled down with ``layer.weight *= 0.1`` under ``no_grad``, and a split loss
evaluated with the layers' ``training = False``. Names are drawn from a fixed list."""
import numpy as np
import torch
import torch.nn.functional as F


class Linear:
    def __init__(self, fan_in, fan_out, bias=True):
        self.weight = torch.randn((fan_in, fan_out)) / fan_in**0.5
        self.bias = torch.zeros(fan_out) if bias else None

    def __call__(self, x):
        self.out = x @ self.weight
        if self.bias is not None:
            self.out += self.bias
        return self.out

    def parameters(self):
        return [self.weight] + ([] if self.bias is None else [self.bias])


class BatchNorm1d:
    def __init__(self, dim, eps=1e-5, momentum=0.1):
        self.eps = eps
        self.momentum = momentum
        self.training = True
        self.gamma = torch.ones(dim)
        self.beta = torch.zeros(dim)
        self.running_mean = torch.zeros(dim)
        self.running_var = torch.ones(dim)

    def __call__(self, x):
        if self.training:
            dim = 0 if x.ndim == 2 else (0, 1)
            xmean = x.mean(dim, keepdim=True)
            xvar = x.var(dim, keepdim=True)
        else:
            xmean = self.running_mean
            xvar = self.running_var
        xhat = (x - xmean) / torch.sqrt(xvar + self.eps)
        self.out = self.gamma * xhat + self.beta
        if self.training:
            with torch.no_grad():
                self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * xmean
                self.running_var = (1 - self.momentum) * self.running_var + self.momentum * xvar
        return self.out

    def parameters(self):
        return [self.gamma, self.beta]


class Tanh:
    def __call__(self, x):
        self.out = torch.tanh(x)
        return self.out

    def parameters(self):
        return []


class Embedding:
    def __init__(self, num_embeddings, embedding_dim):
        self.weight = torch.randn((num_embeddings, embedding_dim))

    def __call__(self, IX):
        self.out = self.weight[IX]
        return self.out

    def parameters(self):
        return [self.weight]


class FlattenConsecutive:
    def __init__(self, n):
        self.n = n

    def __call__(self, x):
        B, T, C = x.shape
        x = x.view(B, T // self.n, C * self.n)
        if x.shape[1] == 1:
            x = x.squeeze(1)
        self.out = x
        return self.out

    def parameters(self):
        return []


class Sequential:
    def __init__(self, layers):
        self.layers = layers

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        self.out = x
        return self.out

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]


WORDS = ["emma", "olivia", "ava", "isabella", "sophia", "charlotte", "mia", "amelia",
         "harper", "evelyn", "abigail", "emily", "elizabeth", "mila", "ella", "avery",
         "sofia", "camila", "aria", "scarlett", "victoria", "madison", "luna", "grace"]


def build_dataset(words, stoi, block_size):
    X, Y = [], []
    for w in words:
        context = [0] * block_size
        for ch in w + ".":
            ix = stoi[ch]
            X.append(context)
            Y.append(ix)
            context = context[1:] + [ix]
    return torch.tensor(X), torch.tensor(Y)


def main(steps=10, compile=False, seed=0, block_size=8, n_embd=6, n_hidden=16):
    chars = sorted(set("".join(WORDS)))
    stoi = {s: i + 1 for i, s in enumerate(chars)}
    stoi["."] = 0
    vocab_size = len(stoi)
    Xtr, Ytr = build_dataset(WORDS[:20], stoi, block_size)
    Xdev, Ydev = build_dataset(WORDS[20:], stoi, block_size)
    torch.manual_seed(seed)
    model = Sequential([
        Embedding(vocab_size, n_embd),
        FlattenConsecutive(2), Linear(n_embd * 2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        FlattenConsecutive(2), Linear(n_hidden * 2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        FlattenConsecutive(2), Linear(n_hidden * 2, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        Linear(n_hidden, vocab_size),
    ])
    rng = np.random.default_rng(seed)
    with torch.no_grad():  # the same starting weights in every framework, from NumPy
        for p in model.parameters():
            if p.ndim == 2:   # (as the layers draw them: randn, over sqrt(fan_in) but the table)
                w = torch.tensor(rng.normal(0, 1, tuple(p.shape)).astype(np.float32))
                p.copy_(w if p is model.layers[0].weight else w / p.shape[0] ** 0.5)
        model.layers[-1].weight *= 0.1
    parameters = model.parameters()
    for p in parameters:
        p.requires_grad = True
    batches = np.random.default_rng(seed + 1).integers(0, Xtr.shape[0], (steps, 12))

    def train_step(Xb, Yb, lr):
        logits = model(Xb)
        loss = F.cross_entropy(logits, Yb)
        for p in parameters:
            p.grad = None
        loss.backward()
        for p in parameters:
            p.data += -lr * p.grad
        return loss

    if compile:
        train_step = torch.compile(train_step)
    lossi = []
    for i in range(steps):
        ix = torch.from_numpy(batches[i])
        Xb, Yb = Xtr[ix], Ytr[ix]
        lr = 0.1 if i < steps // 2 else 0.01
        lossi.append(train_step(Xb, Yb, lr).item())
    for layer in model.layers:
        layer.training = False

    @torch.no_grad()
    def split_loss(x, y):
        return F.cross_entropy(model(x), y).item()

    return {"losses": lossi, "dev_loss": [split_loss(Xdev, Ydev)],
            "running_var": model.layers[3].running_var.tolist()}
