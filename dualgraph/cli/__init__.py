"""The ``dualgraph`` command: one small module per subcommand, listed in ``COMMANDS``.

Each module has ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``; a
module with ``PASS_THROUGH = True`` parses its own options instead (``run(argv)`` gets the
rest of the command line: ``demo`` and ``bench`` keep their own ``--help``). Adding a
subcommand is a row in ``COMMANDS``; adding an option to one is a line in its
``add_arguments``.

>>> main(["show", "--help"])   # doctest: +SKIP
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("demo", "bench", "show", "export", "profile")   # modules of this package


def main(argv=None) -> int:
    """Run ``dualgraph COMMAND [options]``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="dualgraph", description="dualgraph: write dynamic, run static.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {name: importlib.import_module(f".{name}", __name__) for name in COMMANDS}
    for name, module in modules.items():
        if getattr(module, "PASS_THROUGH", False):
            sub.add_parser(name, add_help=False, help=module.HELP)
        else:
            module.add_arguments(sub.add_parser(name, help=module.HELP,
                                                description=module.__doc__))
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in modules and getattr(modules[argv[0]], "PASS_THROUGH", False):
        return modules[argv[0]].run(argv[1:])
    args = parser.parse_args(argv)
    return modules[args.command].run(args)
