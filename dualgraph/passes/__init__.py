"""Graph-to-graph passes: small pure functions ``pass(graph) -> (new_graph, Report)``.

Each pass's docstring says what it preserves, with a before/after pair. ``PIPELINE`` is the
optimising compiler's order, as one list; ``run_pipeline`` runs it (or the passes named in
``enabled``) and returns the reports.

>>> from dualgraph.graph import Graph
>>> g = Graph(); x = g.add_input((3,), "float32", name="x")
>>> (a,) = g.add_node("mul", [x, 1.0]); (b,) = g.add_node("exp", [x]); g.set_outputs([a])
>>> new, reports = run_pipeline(g, enabled={"dce", "simplify"})
>>> print(new)
graph(%x: f32[3]) {
  return (%x)
}
"""
from __future__ import annotations

import time

from ..graph import Graph, verify as verify_graph
from .batch import batch_linears
from .core import Report
from .residuals import save_scan_residuals
from .scan_linears import batch_scan_linears
from .share import share_conv_columns
from .cse import cse
from .dce import dce
from .fold import fold_constants
from .fuse import fuse_elementwise
from .group import group_updates
from .join import join_loss_gradient
from .memory import MemoryPlan, plan_memory, schedule
from .simplify import RULES, simplify

__all__ = ["PIPELINE", "run_pipeline", "Report", "MemoryPlan", "RULES", "dce", "cse",
           "fold_constants", "simplify", "batch_linears", "share_conv_columns",
           "join_loss_gradient", "fuse_elementwise", "group_updates", "schedule", "plan_memory",
           "save_scan_residuals", "batch_scan_linears"]

PIPELINE = [
    dce,                # drop what the outputs don't need, so later passes see less
    cse,
    fold_constants,
    simplify,
    batch_linears,      # a loop's per-step linears over one tensor -> one GEMM
    simplify,           # ... whose per-step blocks a cat may join again: the whole result
    share_conv_columns,  # a conv and its weight gradient: one im2col
    join_loss_gradient,  # a cross-entropy and its backward: one pass over the logits
    cse,                # rewrites can make expressions equal (x*2*3 and x*6)
    dce,                # ... and leave the rewritten nodes dead
    save_scan_residuals,  # a scan's gradient reads the forward's values, not recomputes
    batch_scan_linears,   # a scan's per-step linears over its xs -> one GEMM outside it
    fuse_elementwise,
    group_updates,      # a step's optimiser updates -> one call
    schedule,
    plan_memory,        # analysis only: the plan is in its report
]
PASS_NAMES = sorted({p.__name__ for p in PIPELINE})


def run_pipeline(graph: Graph, enabled=None, verify: bool = False) -> tuple[Graph, list]:
    """Run ``PIPELINE`` (only the passes named in ``enabled``, when given) on ``graph``.

    Returns the final graph and one Report per pass run; ``verify=True`` checks the graph's
    invariants after every pass (the tests do).
    """
    if enabled is not None:
        unknown = sorted(set(enabled) - set(PASS_NAMES))
        if unknown:
            raise ValueError(f"no passes named {unknown}; the passes are {PASS_NAMES}")
    reports = []
    for run in PIPELINE:
        if enabled is not None and run.__name__ not in enabled:
            continue
        start = time.perf_counter()
        graph, report = run(graph)
        report.seconds = time.perf_counter() - start
        if verify:
            verify_graph(graph)
        reports.append(report)
    return graph, reports
