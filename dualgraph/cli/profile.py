"""``dualgraph profile [options] SCRIPT [ARGS...]``: run a Python script under
``dg.profiler.profile`` (shapes, memory and source lines recorded), print the table of
ops and compiled nodes, and write the Chrome trace (open it in https://ui.perfetto.dev).

As with ``python -m cProfile``, the options come before the script and everything after
the script is the script's own command line (``sys.argv``); the script runs as
``__main__`` with its folder first on ``sys.path``, as ``python SCRIPT`` runs it."""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback

from ..profiler.events import SORT_KEYS

HELP = "run a script under the profiler: print the table, write the Chrome trace"


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", default="trace.json",
                        help="where to write the Chrome trace (default trace.json)")
    parser.add_argument("--sort-by", default="self_cpu_time_total", choices=SORT_KEYS,
                        help="the table's order (default self_cpu_time_total)")
    parser.add_argument("--row-limit", type=int, default=25,
                        help="rows in the table (default 25; -1: all)")
    parser.add_argument("--group-by-input-shape", action="store_true",
                        help="one row per op and input shapes")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")


def run(args) -> int:
    from ..profiler import profile
    status = 0
    argv, path0 = sys.argv, sys.path[0]
    sys.argv = [args.script, *args.args]
    sys.path[0] = os.path.dirname(os.path.abspath(args.script))
    prof = profile(record_shapes=True, profile_memory=True, with_stack=True)
    try:
        with prof:
            runpy.run_path(args.script, run_name="__main__")
    except SystemExit as e:   # the script's exit status is ours
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception:   # still show what ran up to the failure
        traceback.print_exc()
        status = 1
    finally:
        sys.argv, sys.path[0] = argv, path0
    averages = prof.key_averages(group_by_input_shape=args.group_by_input_shape)
    print(averages.table(sort_by=args.sort_by, row_limit=args.row_limit))
    prof.export_chrome_trace(args.output)
    print(f"wrote the Chrome trace of {len(prof.events())} events to {args.output} "
          "(open it in https://ui.perfetto.dev)")
    return status
