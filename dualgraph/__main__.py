"""Command line: ``python -m dualgraph demo [options]`` and ``dualgraph bench [options]``."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dualgraph")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", add_help=False,
                   help="train a small CNN on handwritten digits (options: --help)")
    sub.add_parser("bench", add_help=False,
                   help="run the benchmark suite (from the project root; options: --help)")
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from . import demo
        return demo.main(rest)
    try:   # the suite lives in the repository, beside the package, not inside it
        from benchmarks import run
    except ImportError:
        print("dualgraph bench: run it from the project root, where benchmarks/ is",
              file=sys.stderr)
        return 2
    return run.main(rest)


if __name__ == "__main__":
    sys.exit(main())
