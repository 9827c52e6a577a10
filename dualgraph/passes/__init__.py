"""Graph-to-graph passes: small pure functions ``pass(graph) -> (new_graph, Report)``.

Each pass's docstring says what it preserves, with a before/after pair. ``PIPELINE`` is the
optimising compiler's order, as one list; ``run_pipeline``, the one entry point, runs it (or
the passes named in ``passes``) and returns the reports. The lowering rewrites are rows of
one rule table (``LOWERING``, ``passes/lower.py``), run where the pipeline says ``Stage``.

>>> from dualgraph.graph import Graph
>>> g = Graph(); x = g.add_input((3,), "float32", name="x")
>>> (a,) = g.add_node("mul", [x, 1.0]); (b,) = g.add_node("exp", [x]); g.set_outputs([a])
>>> new, reports = run_pipeline(g, passes={"dce", "simplify"})
>>> print(new)
graph(%x: f32[3]) {
  return (%x)
}
"""
from __future__ import annotations

import time

from ..graph import Graph, verify as verify_graph
from .core import Report
from .residuals import save_scan_residuals
from .communication import fuse_all_reduces, overlap_communication
from .cse import cse
from .dce import dce
from .fold import fold_constants
from .fuse import fuse_elementwise
from .lower import RULE_NAMES, RULES as LOWERING, LoweringRule, Stage, lower
from .memory import MemoryPlan, plan_in, plan_memory, schedule
from .remat import checkpoint_savings, rematerialize
from .simplify import RULES, simplify

__all__ = ["PIPELINE", "PASS_NAMES", "run_pipeline", "Report", "MemoryPlan", "plan_in", "RULES",
           "LOWERING", "LoweringRule", "lower", "dce", "cse", "fold_constants", "simplify",
           "fuse_elementwise", "fuse_all_reduces", "overlap_communication", "schedule",
           "checkpoint_savings", "rematerialize", "plan_memory", "save_scan_residuals",
           "fold_batchnorm", "batch_linears", "share_conv_columns", "conv_epilogue",
           "max_pool_values", "conv_cat", "join_loss_gradient", "compress_all_reduces",
           "batch_scan_linears", "group_updates", "linear_relu", "relu_backward_in_place",
           "fuse_attention", "linear_epilogue", "constant_linears", "fuse_rms_norm",
           "fuse_layer_norm", "linear_norm", "join_linears", "linear_packed", "weights_kn",
           "step_weights_kn",
           "conv_winograd", "conv_packed", "channels_last", "channels_last_views",
           "squeeze_excite", "blocked_channels", "gate_into_weights", "expand_into_depthwise",
           "conv_prologue", "cat_in_place", "fold_input_affine",
           "patchify_conv", "pool_before_conv"]

# each lowering rule runs alone as a pass too: ``batch_linears(graph) -> (graph, report)``,
# found by its name (the table's order is the pipeline's, which a rule's stage may change)
_RULES_BY_NAME = {rule.name: rule for rule in LOWERING}
(constant_linears, fold_batchnorm, batch_linears, share_conv_columns, conv_epilogue,
 max_pool_values, conv_cat, join_loss_gradient, compress_all_reduces, batch_scan_linears,
 group_updates, linear_relu, relu_backward_in_place, fuse_attention, linear_epilogue,
 fuse_rms_norm, fuse_layer_norm, linear_norm, join_linears, linear_packed, weights_kn,
 step_weights_kn, conv_winograd, conv_packed, channels_last, channels_last_views,
 squeeze_excite, blocked_channels, gate_into_weights, expand_into_depthwise, conv_prologue,
 cat_in_place, fold_input_affine, patchify_conv, pool_before_conv) = map(
    _RULES_BY_NAME.__getitem__, (
    "constant_linears", "fold_batchnorm", "batch_linears", "share_conv_columns",
    "conv_epilogue", "max_pool_values", "conv_cat", "join_loss_gradient",
    "compress_all_reduces", "batch_scan_linears", "group_updates", "linear_relu",
    "relu_backward_in_place", "fuse_attention", "linear_epilogue", "fuse_rms_norm",
    "fuse_layer_norm", "linear_norm", "join_linears", "linear_packed", "weights_kn",
    "step_weights_kn",
    "conv_winograd", "conv_packed", "channels_last", "channels_last_views", "squeeze_excite",
    "blocked_channels", "gate_into_weights", "expand_into_depthwise", "conv_prologue",
    "cat_in_place", "fold_input_affine", "patchify_conv", "pool_before_conv"))

PIPELINE = [
    checkpoint_savings,  # analysis: what checkpoints save (before cse and fusion change it)
    dce,                # drop what the outputs don't need, so later passes see less
    cse,
    fold_constants,
    simplify,
    Stage("graph"),     # lowering rules: BatchNorm into its layer, conv epilogues, a loop's
    #                     linears -> one GEMM
    simplify,           # ... whose per-step blocks a cat may join again: the whole result
    cse,                # rewrites can make expressions equal (x*2*3 and x*6)
    dce,                # ... and leave the rewritten nodes dead
    fuse_all_reduces,   # communication fusion: runs of small allreduces -> one each
    save_scan_residuals,  # a scan's gradient reads the forward's values, not recomputes
    Stage("scans"),     # lowering rules: a scan's per-step linears -> one GEMM outside it
    fuse_elementwise,
    Stage("kernels"),   # lowering rules: one call for a step's updates, relus in place,
    #                     constant weights stored (K, N), conv weights packed
    schedule,
    rematerialize,      # what checkpoints recompute; with a memory budget, more to fit it
    overlap_communication,  # each allreduce started where its input is ready, waited late
    plan_memory,        # analysis only: the plan is in its report
]
PASS_NAMES = sorted({p.__name__ for p in PIPELINE if not isinstance(p, Stage)}
                    | set(RULE_NAMES))


def run_pipeline(graph: Graph, passes=None, verify: bool = False,
                 memory_budget: int | None = None) -> tuple[Graph, list]:
    """The one entry point into the pass pipeline: run ``PIPELINE`` on ``graph``.

    ``passes`` (as ``dg.compile``'s, ``Executable``'s and ``Program``'s): None or True, all
    passes (but the opt-in lowering rules, ``LoweringRule.default`` False); False, none (the
    graph as given); a collection of names (``PASS_NAMES``: the passes, and the lowering
    rules by their own names), those only; a dict, the default passes with those named
    False left out and the opt-in rules named True added (``{"channels_last": True}``: every
    pass and that rule; ``{"cse": False}``: no opt-in rule). Returns the final graph and one Report
    per pass run; ``verify=True`` checks the graph's invariants after every pass;
    ``memory_budget`` (bytes of live values) is ``rematerialize``'s budget.
    """
    enabled = enabled_passes(passes)
    if enabled is False:
        return graph, []
    reports = []
    for run in PIPELINE:
        if isinstance(run, Stage):
            rules = [r for r in run.rules
                     if (r.default if enabled is None else r.name in enabled)]
            if not rules:
                continue
        elif enabled is not None and run.__name__ not in enabled:
            continue
        start = time.perf_counter()
        if isinstance(run, Stage):
            graph, report = run(graph, rules)
        elif run is rematerialize:
            graph, report = run(graph, memory_budget)
        else:
            graph, report = run(graph)
        report.seconds = time.perf_counter() - start
        if verify:
            verify_graph(graph)
        reports.append(report)
    return graph, reports


def enabled_passes(passes):
    """``passes`` as the set of names to run: None for all, False for none."""
    if passes is None or passes is True:
        return None
    if passes is False:
        return False
    if isinstance(passes, str):
        raise TypeError(f"passes={passes!r}: give None (all), False (none), a collection "
                        "of pass names or a dict {name: False}")
    names = set(passes)
    unknown = sorted(names - set(PASS_NAMES))
    if unknown:
        raise ValueError(f"no passes named {unknown}; the passes are {PASS_NAMES}")
    if isinstance(passes, dict):   # (the default set: an opt-in rule runs where named True)
        on = {name for name in names if passes[name]}
        return (set(PASS_NAMES) - _OPT_IN - {name for name in names if not passes[name]}) | on
    return names


_OPT_IN = {rule.name for rule in LOWERING if not rule.default}
