"""The main demo, ``python -m dualgraph demo``: a small CNN learns handwritten digits.

It reads top to bottom like a PyTorch script, because that is the point: scikit-learn's
8x8 digits (1797 images), a fixed-seed train/test split, a shuffling ``DataLoader``, a
conv net with batch norm and dropout, Adam, a tqdm bar per epoch, evaluation under
``model.eval()`` + ``dg.no_grad()``, a PNG of the curves, the weights saved with
``dg.save`` and checked by loading them back. ``--compile`` captures the whole training
step (forward, backward, optimiser update) into one static graph with ``dg.compile``.

The last line printed is always ``test accuracy: <fraction>``, so scripts and tests can
read the result. Needs the ``demo`` extra: ``pip install -e ".[demo]"``.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

import dualgraph as dg
from dualgraph import nn

# import name -> distribution name, for the message when one is missing
EXTRAS = {"sklearn": "scikit-learn", "tqdm": "tqdm", "matplotlib": "matplotlib"}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m dualgraph demo",
                                description="Train a small CNN on scikit-learn's digits.")
    p.add_argument("--epochs", type=int, default=8, help="passes over the training set")
    p.add_argument("--compile", action="store_true",
                   help="capture the whole training step with dg.compile")
    p.add_argument("--out", default=os.path.join("runs", "digits.png"),
                   help="where to write the plot; the weights go beside it (.safetensors)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    # smoke tests: use only the first N training and test images
    p.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def missing_extras() -> list[str]:
    return [dist for mod, dist in EXTRAS.items() if importlib.util.find_spec(mod) is None]


# -------------------------------------------------------------------------------- data

def load_data(seed: int, limit: int | None):
    """Pixels scaled to [0, 1] as (N, 1, 8, 8) float32 and labels as int64, split 80/20
    with a fixed seed and stratified, so every run sees the same test set."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=seed, stratify=y)
    if limit is not None:
        x_train, y_train, x_test, y_test = (a[:limit] for a in (x_train, y_train,
                                                                 x_test, y_test))
    return ((dg.from_numpy(x_train), dg.from_numpy(y_train)),
            (dg.from_numpy(x_test), dg.from_numpy(y_test)))


# ------------------------------------------------------------------------------- model

def make_model() -> nn.Module:
    """Two 3x3 conv blocks (8x8 -> 4x4), then a small classifier: ~40k parameters."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
        nn.Dropout(0.2),
        nn.Linear(64, 10),
    )


def accuracy(model: nn.Module, x: dg.Tensor, y: dg.Tensor) -> float:
    """Fraction classified correctly, with batch norm and dropout in inference mode."""
    was_training = model.training
    model.eval()
    with dg.no_grad():
        correct = (model(x).argmax(dim=1) == y).float().mean().item()
    model.train(was_training)
    return correct


# ---------------------------------------------------------------------------- training

def make_step(model: nn.Module, optimizer, compiled: bool = False):
    """One training step on a batch, returning the loss. Compiled, the forward pass, the
    backward pass and the update all run as one captured graph."""
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    return dg.compile(step) if compiled else step


def train(args, train_set, test_set):
    from tqdm import tqdm

    dg.manual_seed(args.seed)       # the same weights and batch order every run
    model = make_model()
    optimizer = dg.optim.Adam(model.parameters(), lr=args.lr)
    step = make_step(model, optimizer, compiled=args.compile)
    # drop_last keeps every batch the same shape, so a compiled step never retraces
    loader = dg.utils.data.DataLoader(dg.utils.data.TensorDataset(*train_set),
                                      batch_size=args.batch_size, shuffle=True,
                                      drop_last=len(train_set[1]) > args.batch_size)
    history = {"loss": [], "train_acc": [], "test_acc": []}
    for epoch in range(1, args.epochs + 1):
        model.train()
        # disable=None: a live bar on a terminal, nothing in logs and pipes
        bar = tqdm(loader, desc=f"epoch {epoch}/{args.epochs}", leave=False, disable=None)
        losses = []
        for x, y in bar:
            losses.append(step(x, y).item())
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        history["loss"].append(float(np.mean(losses)))
        history["train_acc"].append(accuracy(model, *train_set))
        history["test_acc"].append(accuracy(model, *test_set))
        print(f"epoch {epoch:2d}  loss {history['loss'][-1]:.4f}  "
              f"train acc {history['train_acc'][-1]:.4f}  "
              f"test acc {history['test_acc'][-1]:.4f}")
    return model, history


# ----------------------------------------------------------------------------- outputs

def plot(history: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")           # no display needed: write the file only
    import matplotlib.pyplot as plt

    epochs = range(1, len(history["loss"]) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax_loss.plot(epochs, history["loss"], marker="o")
    ax_loss.set(title="training loss", xlabel="epoch", ylabel="cross-entropy")
    ax_acc.plot(epochs, history["train_acc"], marker="o", label="train")
    ax_acc.plot(epochs, history["test_acc"], marker="o", label="test")
    ax_acc.set(title="accuracy", xlabel="epoch", ylabel="fraction correct")
    ax_acc.legend()
    fig.suptitle("dualgraph: small CNN on 8x8 digits")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def save_and_check(model: nn.Module, path: str, test_set) -> float:
    """Save the weights, load them into a fresh model and return its test accuracy: the
    round trip through the file must not change a single prediction."""
    dg.save(model.state_dict(), path)
    restored = make_model()
    restored.load_state_dict(dg.load(path))
    return accuracy(restored, *test_set)


def main(argv=None) -> int:
    args = parse_args(argv)
    missing = missing_extras()
    if missing:
        print(f"the demo needs {', '.join(missing)}; install the demo extra:\n"
              f'    pip install -e ".[demo]"', file=sys.stderr)
        return 1
    from threadpoolctl import threadpool_limits  # installed with scikit-learn

    out_dir = os.path.dirname(args.out)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    train_set, test_set = load_data(args.seed, args.limit)
    print(f"digits: {len(train_set[1])} train / {len(test_set[1])} test images, "
          f"{args.epochs} epoch{'s' * (args.epochs != 1)}"
          f"{' (compiled step)' if args.compile else ''}")
    start = time.perf_counter()
    # The matrices here are tiny (32 x 512 at most); BLAS threads cost more than they
    # save, and on a busy machine their spinning slows a step down several times.
    with threadpool_limits(limits=1, user_api="blas"):
        model, history = train(args, train_set, test_set)
        seconds = time.perf_counter() - start
        weights = os.path.splitext(args.out)[0] + ".safetensors"
        restored_acc = save_and_check(model, weights, test_set)
    plot(history, args.out)
    print(f"trained in {seconds:.1f} s")
    print(f"plot: {args.out}")
    print(f"weights: {weights} (reloaded: test accuracy {restored_acc:.4f})")
    print(f"test accuracy: {history['test_acc'][-1]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
