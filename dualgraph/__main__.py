"""Command line: ``python -m dualgraph demo``."""
from __future__ import annotations

import argparse
import sys


def demo() -> None:
    """A tiny eager training run: fit y = 3x - 1 + noise by gradient descent."""
    import dualgraph as dg

    dg.manual_seed(0)
    x = dg.randn(256, 1)
    y = 3 * x - 1 + 0.1 * dg.randn(256, 1)
    w = dg.zeros(1, requires_grad=True)
    b = dg.zeros(1, requires_grad=True)
    for step in range(101):
        loss = ((x * w + b - y) ** 2).sum() / 256
        loss.backward()
        with dg.no_grad():
            w -= 0.1 * w.grad
            b -= 0.1 * b.grad
        w.grad = b.grad = None
        if step % 20 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    print(f"fitted w={w.item():.3f} b={b.item():.3f} (true 3, -1)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dualgraph")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="train a small model eagerly and print the losses")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
