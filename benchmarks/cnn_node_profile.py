"""Where a CNN's inference time goes, node by node, against onnxruntime's own profile.

``python -m benchmarks.cnn_node_profile [--models mobilenetv3,efficientnet,squeezenet,resnet18]
[--batches 1,16] [--size 224] [--calls 5] [--nodes] [--threads=1]``: one thread per engine
(``--threads=2``: two, set before NumPy loads OpenBLAS, so spelt with ``=``). Each model of
``benchmarks.unseen_cnns`` (the same weights in both libraries) runs ``dg.compile``d under
``dg.profiler`` (``record_shapes``: each node's time and input shapes) and its torch export
runs in onnxruntime with ``SessionOptions.enable_profiling`` (each kernel's time, logical
shapes). Both engines' nodes are put into the same kinds by op and shapes (dense conv by
kernel size, 1x1 conv, 1x1 conv on a 1x1 plane, depthwise conv, grouped conv, the
few-channel stem conv, pooling, linear, elementwise, glue), and each kind's time per call
is printed for both, with the ratio and the gap (ours less onnxruntime's), largest gap
first. The kinds are what lets the two graphs be compared: onnxruntime fuses BatchNorm
and the activation into its convs (``FusedConv``), reorders into its blocked layout
(``ReorderInput``/``ReorderOutput``, counted as glue), and so does dualgraph
(``conv2d_epilogue``, fused elementwise kernels); a dualgraph node that is several layers
(squeeze-and-excitation with the 1x1 conv it gates, a 1x1 expansion with its depthwise
conv: ``FUSED_KINDS``) is a kind of its own, compared with the sum of the kinds it
replaces. ``--nodes`` also lists every node of each kind.
"""
from __future__ import annotations

import argparse
import math
import json
import os
import sys
import tempfile
import time
from collections import defaultdict

THREADS = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--threads=")), 1))
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = str(THREADS)

import numpy as np  # noqa: E402

from .common import random_state  # noqa: E402
from .unseen_cnns import MODELS  # noqa: E402

CONV_OPS = {"conv", "fusedconv", "conv2d", "conv2d_epilogue", "conv2d_cat", "conv2d_prologue",
            "conv2d_into"}
POOL_OPS = {"maxpool", "averagepool", "globalaveragepool", "globalmaxpool", "mean",
            "max_pool2d", "max_pool2d_values", "avg_pool2d", "adaptive_avg_pool2d"}
LINEAR_OPS = {"gemm", "matmul", "linear", "linear_epilogue", "linear_relu", "linear_norm",
              "linear_packed", "fusedgemm", "fusedmatmul"}
GLUE_OPS = {"reorderinput", "reorderoutput", "concat", "reshape", "flatten", "cat",
            "identity", "squeeze", "unsqueeze", "transpose", "permute", "block_channels",
            "unblock_channels"}


# dualgraph's nodes that are several layers, each its own kind (no onnxruntime node is the
# same layers; compare the sum of the kinds they replace): a squeeze-and-excitation's
# pool, 1x1s on a 1x1 plane, gate and scale, with or without the 1x1 conv after it, and
# a 1x1 expansion with the depthwise conv after it.
SE_GATE = "squeeze-excite gate and scale (a sigmoid, a mul by channel)"
FUSED_KINDS = {
    "squeeze_excite_blocked": "squeeze-excite, whole (dualgraph: one node; onnxruntime: "
                              "pool global, conv 1x1 on a 1x1 plane, gate and scale)",
    "gated_pointwise_blocked": "squeeze-excite and the 1x1 conv after it (dualgraph: one "
                               "node; onnxruntime: those kinds and conv 1x1)",
    "expand_depthwise_blocked": "conv 1x1 and the depthwise conv after it (dualgraph: one "
                                "node; onnxruntime: conv 1x1, conv depthwise)",
}


def _per_channel(shape: list) -> bool:
    """Whether ``shape`` is one value a channel of each image, ``(N, C, 1, 1)``: a gate."""
    return len(shape) == 4 and shape[2] == shape[3] == 1 and shape[1] > 1


def conv_kind(x: list, w: list) -> str:
    """The kind of a conv from its input ``(N, C, H, W)`` and weight ``(Co, C/g, kh, kw)``
    shapes."""
    c, kh, kw = x[1], w[2], w[3]
    if w[1] == 1 and c > 1:
        return f"conv depthwise {kh}x{kw}"
    if kh == kw == 1:
        return "conv 1x1 on a 1x1 plane" if x[2] * x[3] == 1 else "conv 1x1"
    if 1 < w[1] < c:
        return "conv grouped"
    if w[1] <= 4:
        return f"conv {kh}x{kw} of at most 4 channels (stem)"
    return f"conv dense {kh}x{kw}"


def kind(op: str, shapes: list, out=None) -> str:
    """The kind of a node: its op (either engine's name) and its input shapes (``out``, the
    output's shape where the engine reports it, is not needed here)."""
    op = op.lower()
    if op == "conv2d_cat":
        return "conv 1x1 and kxk into one concat (onnxruntime: conv 1x1, dense, glue)"
    if op == "conv2d_prologue" and len(shapes) >= 4:   # (x, scale, shift, packed weight)
        return kind("conv2d_packed", [shapes[0], *shapes[3:]])
    if op == "conv2d_into" and len(shapes) >= 3:   # (buffer, x, the member's weight, ...)
        w = shapes[2]
        member = ("conv2d_packed" if len(w) == 3 and w[-1] == 16 else
                  "conv2d_winograd" if len(w) == 3 else "conv2d")
        return kind(member, shapes[1:])
    if op == "conv2d_packed" and len(shapes) >= 2:   # (weight (pairs, C/G*kh*kw, 16))
        c, taps = shapes[0][1], shapes[1][1]
        k = math.isqrt(taps // c)
        return conv_kind(shapes[0], [0, c, k, k]) if k * k * c == taps else "conv grouped"
    if op == "conv2d_winograd":   # (weight (16, Cout, C): 3x3, stride 1)
        return "conv dense 3x3"
    if op == "depthwise_blocked" and len(shapes) >= 2:   # (x (N, C/8, H, W, 8))
        x = shapes[0]
        return conv_kind([x[0], x[1] * x[4], x[2], x[3]], shapes[1])
    if op == "depthwise_nhwc" and len(shapes) >= 2:   # (x (N, H, W, C), weight (kh, kw, cp))
        (n, h, w, c), (kh, kw) = shapes[0], shapes[1][:2]
        return conv_kind([n, c, h, w], [c, 1, kh, kw])
    if op == "shallow_blocked" and len(shapes) >= 2:   # (x (N, C, H, W), weight (Co, C, k, k))
        return conv_kind(shapes[0], shapes[1])
    if op in FUSED_KINDS:   # (several layers in one node: their own kind, see FUSED_KINDS)
        return FUSED_KINDS[op]
    if op in ("mul", "hardsigmoid", "sigmoid") and shapes and _per_channel(shapes[-1]):
        return SE_GATE
    if op == "pointwise_blocked":   # (weight (groups, C, 24))
        return "conv 1x1 on a 1x1 plane" if shapes[0][2] * shapes[0][3] == 1 else "conv 1x1"
    if op in CONV_OPS and len(shapes) >= 2 and len(shapes[1]) == 4:
        return conv_kind(shapes[0], shapes[1])
    if op in POOL_OPS:
        if op in ("globalaveragepool", "mean", "adaptive_avg_pool2d", "globalmaxpool"):
            return "pool global"
        return "pool max" if "max" in op else "pool average"
    if op in LINEAR_OPS:
        return "linear"
    if op in GLUE_OPS:
        return "glue (reorder, concat, reshape)"
    return "elementwise (activations, SE scale, residual)"


def ours(make, calls: int, state: dict, x: np.ndarray, kind_of=None) -> dict:
    """``{(kind, op, shapes): ms per call}`` of the model ``make(dg)``, compiled, under the
    profiler (its nodes put into kinds by ``kind_of(op, shapes)``, :func:`kind` by
    default), and the whole call's best time."""
    import dualgraph as dg
    from dualgraph.profiler import profile
    kind_of = kind_of or kind
    dg.set_num_threads(THREADS)
    model = make(dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    compiled, dx = dg.compile(model), dg.tensor(x)
    with dg.no_grad():
        for _ in range(3):
            compiled(dx)
        with profile(record_shapes=True) as prof:
            for _ in range(calls + 1):
                compiled(dx)
    programs = [e for e in prof.events() if e.kind == "program"][1:]
    per_call = []
    for program in programs:
        times = defaultdict(float)
        for e in program.cpu_children:
            op = e.name.split("::", 1)[-1]
            op = "fused" if op.startswith("fused(") else op
            times[kind_of(op, e.input_shapes), op, str(e.input_shapes)] += e.cpu_time_total
        per_call.append(times)
    with dg.no_grad():
        return best_per_key(per_call), best_ms(lambda: compiled(dx))


def best_per_key(calls: list) -> dict:
    """``{key: least ms}`` over calls of ``{key: us}`` (a key's nodes summed per call): both
    engines' profiles are wall time, which another process's work on the same cores only
    ever lengthens, so the least of several calls is the figure nearest the node's own."""
    return {k: 1e-3 * min(c.get(k, 0.0) for c in calls) for k in calls[0]}


def best_ms(call, rounds: int = 7) -> float:
    """The best time of a call, unprofiled: process CPU time on one thread, wall time on
    several (where CPU time counts the threads' time added up)."""
    clock = time.process_time if THREADS == 1 else time.perf_counter
    best = np.inf
    for _ in range(rounds):
        start = clock()
        call()
        best = min(best, clock() - start)
    return 1e3 * best


def theirs(make, calls: int, state: dict, x: np.ndarray, tmp: str,
           kind_of=None) -> tuple[dict, float]:
    """The same for onnxruntime running the torch export, from its own profile."""
    import onnxruntime as ort
    import torch
    kind_of = kind_of or kind
    reference = make(torch).eval()
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    path = os.path.join(tmp, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    options = ort_options()
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tmp, "ort")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(calls + 3):
        session.run(None, {"x": x})
    with open(session.end_profiling()) as f:
        events = json.load(f)
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    per_call = [defaultdict(float) for _ in runs]
    starts = [e["ts"] for e in runs]
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        args = e["args"]
        shapes = [next(iter(s.values())) for s in args.get("input_type_shape", [])]
        outs = [next(iter(s.values())) for s in args.get("output_type_shape", [])]
        op = args["op_name"]
        run = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        per_call[run][kind_of(op, shapes, outs[0] if outs else None), op, str(shapes)] += \
            e["dur"]
    plain = ort.InferenceSession(path, ort_options(), providers=["CPUExecutionProvider"])
    return best_per_key(per_call[3:]), best_ms(lambda: plain.run(None, {"x": x}))


def ort_options():
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = THREADS, 1
    return options


def table(name: str, batch: int, mine: dict, ort_: dict, totals: tuple, nodes: bool) -> None:
    by_kind = defaultdict(lambda: [0.0, 0.0, 0, 0])
    for (k, _, _), ms in mine.items():
        by_kind[k][0] += ms
        by_kind[k][2] += 1
    for (k, _, _), ms in ort_.items():
        by_kind[k][1] += ms
        by_kind[k][3] += 1
    ours_total, ort_total = totals
    print(f"\n{name} batch {batch}: compiled {ours_total:.2f} ms a call (profiled nodes "
          f"{sum(mine.values()):.2f}), onnxruntime {ort_total:.2f} ms (profiled nodes "
          f"{sum(ort_.values()):.2f}), ratio {ours_total / ort_total:.2f}")
    print("| kind | dualgraph ms | onnxruntime ms | ratio | gap ms |")
    print("|---|---|---|---|---|")
    rows = sorted(by_kind.items(), key=lambda kv: kv[1][1] - kv[1][0])
    for k, (a, b, _, _) in rows:
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"| {k} | {a:.3f} | {b:.3f} | {ratio} | {a - b:+.3f} |")
    if nodes:
        for k, _ in rows:
            print(f"  {k}:")
            for engine, times in (("dg", mine), ("ort", ort_)):
                for (kk, op, shapes), ms in sorted(times.items(), key=lambda t: -t[1]):
                    if kk == k:
                        print(f"    {engine:3} {ms:7.3f} {op} {shapes}")


def run(models: dict, names, batches, calls: int, nodes: bool, example, kind_of=None) -> None:
    """Each model ``models[name]`` of ``names`` at each batch size, on the input
    ``example(name, batch)``: both engines' profiles, one table (its nodes by kind with
    ``nodes``)."""
    import torch
    torch.set_num_threads(THREADS)
    print(f"load average {os.getloadavg()[0]:.1f}, {THREADS} thread(s) per engine", flush=True)
    for name in names:
        make = models[name]
        state = random_state(make(torch).eval(), 0)
        for batch in batches:
            x = example(name, batch)
            mine, mine_total = ours(make, calls, state, x, kind_of)
            with tempfile.TemporaryDirectory() as tmp:
                ort_, ort_total = theirs(make, calls, state, x, tmp, kind_of)
            table(name, batch, mine, ort_, (mine_total, ort_total), nodes)
            sys.stdout.flush()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mobilenetv3,efficientnet,squeezenet,resnet18")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--nodes", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="read before NumPy loads")
    args = parser.parse_args(argv)
    image = lambda name, batch: np.random.default_rng(0).standard_normal(
        (batch, 3, args.size, args.size)).astype(np.float32)
    run(MODELS, args.models.split(","), list(map(int, args.batches.split(","))), args.calls,
        args.nodes, image)


if __name__ == "__main__":
    sys.exit(main())
