"""Command line: ``python -m dualgraph demo [options]``."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dualgraph")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", add_help=False,
                   help="train a small CNN on handwritten digits (options: --help)")
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from . import demo
        return demo.main(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
