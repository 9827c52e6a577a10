"""``dualgraph bench [options]``: the benchmark suite, ``python -m benchmarks.run``.

The suite is not part of the installed package: it lives in ``benchmarks/`` at the root of
the dualgraph repository, beside ``dualgraph/``. The installed ``dualgraph`` script starts
with its own folder on ``sys.path``, not the current directory (``python -m`` puts the
current directory there), so the suite is looked for in the current directory and beside
the package (an editable install of a checkout), and that folder is put on the path.
"""
from __future__ import annotations

import importlib
import os
import sys

HELP = "run the benchmark suite of a source checkout (options: dualgraph bench --help)"
PASS_THROUGH = True
MARKER = os.path.join("benchmarks", "run.py")


def suite_roots() -> list[str]:
    """The folders where a checkout's ``benchmarks/`` may be: the current directory, and
    the one holding the imported ``dualgraph`` package."""
    here = os.path.abspath(os.getcwd())
    beside = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return list(dict.fromkeys([here, beside]))


def run(argv: list) -> int:
    roots = suite_roots()
    for root in roots:
        if os.path.isfile(os.path.join(root, MARKER)):
            if root not in sys.path:
                sys.path.insert(0, root)
            return importlib.import_module("benchmarks.run").main(argv)
    looked = " and ".join(os.path.join(r, "benchmarks") for r in roots)
    print("dualgraph bench: the benchmark suite is not installed with the package; it is the "
          "benchmarks/ folder at the root of the dualgraph source repository. Run "
          "`dualgraph bench` (or `python -m benchmarks.run`) from the root of a checkout, "
          f"the folder that holds benchmarks/ and dualgraph/ (looked in {looked}).",
          file=sys.stderr)
    return 2
