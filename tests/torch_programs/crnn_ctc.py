"""A CRNN text recognizer trained with CTC, as OCR and speech tutorials write it: a
convolutional feature extractor (``nn.Conv2d(bias=False)`` + ``nn.BatchNorm2d`` +
``nn.ReLU(inplace=True)`` + ``nn.MaxPool2d`` with a (2, 1) kernel that keeps the width;
a conv bias before a batch norm has a gradient of rounding noise only, which Adam turns
into steps of lr either way), the feature map turned into a
sequence along the width (``permute(3, 0, 1, 2).flatten(2)``), a bidirectional ``nn.LSTM``,
a ``nn.Linear`` head and ``F.log_softmax(dim=2)``; ``nn.CTCLoss(blank=0, zero_infinity=True)``
on concatenated targets with ``torch.full`` input lengths and ``torch.IntTensor`` target
lengths, ``clip_grad_norm_``, ``AdamW`` with ``OneCycleLR``; the per-frame best classes
(greedy decoding's input) under ``torch.no_grad()`` and ``model.eval()``. Images are
synthetic strips of digit glyphs (a 5x3 font). (Greedy decoding itself, argmax and the
collapse of repeats in Python, is left out of the results: after a few steps its argmax
ties flip with the last bit.)"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FONT = ["111101101101111", "010110010010111", "111001111100111", "111001111001111",
        "101101111001001", "111100111001111", "111100111101111", "111001001001001"]
CLASSES = len(FONT) + 1   # (0 is the blank)


def strip(rng, length):
    """A 10 x (4 length + 2) image of ``length`` random glyphs, and their labels (1-based)."""
    labels = rng.integers(0, len(FONT), length)
    img = np.zeros((10, 4 * length + 2), np.float32)
    for i, c in enumerate(labels):
        glyph = np.array([int(b) for b in FONT[c]], np.float32).reshape(5, 3)
        top = rng.integers(1, 4)
        img[top:top + 5, 1 + 4 * i:4 + 4 * i] = glyph
    return img + rng.normal(0, 0.1, img.shape).astype(np.float32), labels + 1


class CRNN(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.cnn = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.MaxPool2d((2, 1)),
            nn.Conv2d(8, 12, 3, padding=1, bias=False), nn.BatchNorm2d(12),
            nn.ReLU(inplace=True),
            nn.MaxPool2d((2, 1)))
        self.rnn = nn.LSTM(12 * 2, hidden, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, CLASSES)

    def forward(self, x):
        f = self.cnn(x)                           # (N, C, H, W)
        seq = f.permute(3, 0, 1, 2).flatten(2)    # (W, N, C * H)
        out, _ = self.rnn(seq)
        return F.log_softmax(self.fc(out), dim=2)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state, names = {}, model.state_dict()
    for name, v in names.items():
        norm_layer = name.rsplit(".", 1)[0] + ".running_mean" in names
        if "running" in name or "num_batches" in name:
            state[name] = v
        elif norm_layer and name.endswith("weight"):
            state[name] = torch.tensor((1 + rng.normal(0, 0.05, tuple(v.shape)))
                                       .astype(np.float32))
        else:
            state[name] = torch.tensor(rng.normal(0, 0.25, tuple(v.shape)).astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch=6, length=4):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = CRNN()
    init_weights(model, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=steps)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)
    data = []
    for _ in range(steps + 1):
        imgs, labels = zip(*(strip(rng, length) for _ in range(batch)))
        data.append((torch.tensor(np.stack(imgs)[:, None]),
                     torch.tensor(np.concatenate(labels), dtype=torch.long)))

    def step(images, targets):
        log_probs = model(images)
        input_lengths = torch.full((images.size(0),), log_probs.size(0), dtype=torch.long)
        target_lengths = torch.IntTensor([length] * images.size(0))
        loss = ctc(log_probs, targets, input_lengths, target_lengths)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = []
    for images, targets in data[:steps]:
        model.train()
        losses.append(step(images, targets).item())
        sched.step()
    model.eval()
    with torch.no_grad():
        images, targets = data[steps]
        log_probs = model(images)
    best = log_probs.max(dim=2)
    return {"losses": losses, "frame_log_probs": log_probs[:, 0, :].flatten().tolist()[:40],
            "best_log_probs": best.values.t().flatten().tolist()}
