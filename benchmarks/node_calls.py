"""Where a compiled graph's call spends its time that is not a kernel's work, per node kind.

``python -m benchmarks.node_calls [--programs gat,mobilenet_se] [--models t5,vit]
[--cnns mobilenetv3,regnetx400mf] [--workloads W1,W7] [--top 12]`` compiles each one as its
benchmark does (a program of ``tests/torch_programs/`` by its ``compile=True`` training
step, a model of ``benchmarks/unseen_transformers.py`` or ``benchmarks/unseen_cnns.py`` at
batch 1 under ``no_grad``, a suite workload by its ``dualgraph_compiled`` implementation),
keeps the input arrays of the last graph call, and reports, in process CPU time with one
thread (best of several):

- ``run``: ``Executable.run`` of those arrays; ``glue``: the generated function itself with
  every kernel, ufunc and fused group replaced by a stub returning the value recorded for
  its line, so what is left is the generated Python (argument passing, ``del``s, tuple
  unpacking): the per-node cost no kernel accounts for;
- ``outside``: ``run``'s CPU time outside the compiled loops' entries (the native entries
  called through ctypes, or Numba's dispatcher where a loop has none: their argument
  conversion counts as inside), a median over runs, a node: the ops' Python around their
  kernels (plans, checks, allocation, thread dispatch) with the generated code's glue and
  whatever runs in NumPy (BLAS, ufuncs);
- per kind of call (the callee of the generated code: ``k_softmax``, ``matmul_blas``,
  ``f_add``, ``np.multiply``), the calls, their CPU time and their CPU time outside the
  loops' entries a call (the Python around this kind's kernels), each callee of the
  generated code wrapped in a timer (which adds its own microsecond or so a call).

Inputs a step updates in place (donated parameters) are copied before each run, outside
the timed part. Not a workload of the suite: no peers, no ratios.
"""
from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":   # before NumPy loads OpenBLAS
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
        os.environ[_name] = "1"

import collections  # noqa: E402
import contextlib  # noqa: E402
import importlib.util  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402


def best_us(call, fresh, number: int, repeats: int = 5) -> float:
    """Best mean CPU microseconds of ``call(fresh())``, ``fresh()`` outside the timing."""
    best = float("inf")
    for _ in range(repeats):
        total = 0.0
        for _ in range(number):
            args = fresh()
            start = time.process_time()
            call(args)
            total += time.process_time() - start
        best = min(best, total / number)
    return 1e6 * best


def recording(exe):
    """An ``Executable.run`` that keeps the input arrays of its last call on ``exe``."""
    run = exe.run

    def wrapped(arrays, on_node=None):
        exe.last_arrays = [np.array(a) for a in arrays]
        return run(arrays, on_node)
    return wrapped


def stubbed(exe, arrays):
    """The generated function with every callable global returning, call after call, the
    value its node computed on ``arrays``: running it times the generated Python alone."""
    recorded = []
    exe.run_timed([a.copy() for a in arrays],
                  lambda node, outs: recorded.append(outs[0] if node.op.num_outputs == 1
                                                     else outs))
    at = [0]

    def stub(*args, **kwargs):
        at[0] += 1
        return recorded[at[0] - 1]
    program = exe.program
    globals_ = {k: stub if callable(v) and not isinstance(v, type) else v
                for k, v in program.globals.items()}
    globals_["np"] = types.SimpleNamespace(asarray=np.asarray, dtype=np.dtype,
                                           **{n: stub for n in dir(np) if n.isidentifier()
                                              and n not in ("asarray", "dtype")})
    fn = types.FunctionType(program.fn.__code__, globals_)
    bufs = [exe._buffers_for(arrays)] if exe._slots else []

    def run(args):
        at[0] = 0
        fn(*args, *bufs)
    return run


def per_kind(exe, fresh, repeats: int = 20) -> dict:
    """``{callee: (calls a run, CPU us a run, CPU us a run outside the loops' entries)}``:
    each callable global of the generated code (a kernel, a fitted node, a ufunc: its name
    without the ``_<n>`` suffix, or ``np.<ufunc>``) wrapped in a timer of the thread's CPU
    clock, the run otherwise as ``run`` (the planned buffers, no per-node hook), the best
    of ``repeats`` runs for each callee."""
    clock = time.thread_time_ns
    totals, outs = collections.defaultdict(list), collections.defaultdict(list)
    counts, run_total, run_out = collections.Counter(), collections.Counter(), \
        collections.Counter()

    def timer(name, call):
        def timed(*args, **kwargs):
            before, start = inside[0], clock()
            try:
                return call(*args, **kwargs)
            finally:
                spent = clock() - start
                run_total[name] += spent
                run_out[name] += spent - (inside[0] - before)
                counts[name] += 1
        return timed
    program = exe.program
    names = {k: re.sub(r"_\d+$", "", k)
             for k, v in program.globals.items() if callable(v) and not isinstance(v, type)}
    with entries_timed() as inside:
        globals_ = {k: timer(names[k], v) if k in names else v
                    for k, v in program.globals.items()}
        if "np" in globals_:   # (the ufuncs the generated code calls as ``np.add(...)``)
            numpy = globals_["np"]
            globals_["np"] = types.SimpleNamespace(**{
                n: timer(f"np.{n}", getattr(numpy, n)) if isinstance(getattr(numpy, n),
                                                                      np.ufunc)
                else getattr(numpy, n) for n in dir(numpy) if n.isidentifier()})
        fn = types.FunctionType(program.fn.__code__, globals_)
        for _ in range(repeats):
            arrays = fresh()
            run_total.clear(), run_out.clear()
            bufs = [exe._buffers_for(arrays)] if exe._slots else []
            fn(*arrays, *bufs)
            for k in run_total:
                totals[k].append(run_total[k])
                outs[k].append(run_out[k])
    return {k: (counts[k] // repeats, min(totals[k]) / 1e3, min(outs[k]) / 1e3)
            for k in totals}


@contextlib.contextmanager
def entries_timed():
    """While open, ``inside[0]``: the thread CPU nanoseconds spent in the compiled loops'
    entries (the native entries called through ctypes, or Numba's dispatcher where a loop
    has none: their argument conversion counts as inside)."""
    import ctypes

    from dualgraph.kernels import native
    inside, clock = [0], time.thread_time_ns
    classes = {type(f) for f in native._loaded.values()}
    dispatchers = []
    if "numba" in sys.modules:
        from numba.core.registry import CPUDispatcher
        dispatchers = [CPUDispatcher]

    def timing(call):
        def timed(self, *args, **kwargs):
            start = clock()
            try:
                return call(self, *args, **kwargs)
            finally:
                inside[0] += clock() - start
        return timed
    for cls in classes:
        cls.__call__ = timing(ctypes._CFuncPtr.__call__)
    for cls in dispatchers:
        cls.__call__ = timing(cls.__mro__[-2].__call__)   # (the C dispatcher's call)
    try:
        yield inside
    finally:
        for cls in (*classes, *dispatchers):
            del cls.__call__


def outside_entries_us(exe, fresh, number: int) -> float:
    """The median CPU microseconds of ``exe.run(fresh())`` outside the compiled loops'
    entries (:func:`entries_timed`)."""
    clock, outside = time.thread_time_ns, []
    with entries_timed() as inside:
        for _ in range(number):
            args = fresh()
            inside[0], start = 0, clock()
            exe.run(args)
            outside.append(clock() - start - inside[0])
    return float(np.median(outside)) / 1e3


def report(name: str, exe, top: int) -> None:
    arrays = exe.last_arrays
    fresh = lambda: [a.copy() for a in arrays]   # noqa: E731
    number = 20 if len(exe.graph.nodes) > 60 else 200
    run = best_us(exe.run, fresh, number)
    glue = best_us(stubbed(exe, arrays), fresh, number)
    outside, nodes = outside_entries_us(exe, fresh, number), len(exe.graph.nodes)
    print(f"{name}: {nodes} nodes, run {run:.1f} us, glue {glue:.1f} us "
          f"({glue / nodes:.2f} us a node), outside the loops' entries {outside:.1f} us "
          f"({outside / nodes:.2f} us a node)", flush=True)
    kinds = sorted(per_kind(exe, fresh).items(), key=lambda kv: -kv[1][1])
    for kind, (calls, us, out) in kinds[:top]:
        print(f"    {kind:32s} x{calls:<4d} {us:9.1f} us  {us / max(calls, 1):7.2f} us a call, "
              f"{out / max(calls, 1):6.2f} outside the loops' entries")


def executables(make) -> list:
    """The executables ``make()`` runs, each with the arrays of its last call."""
    from dualgraph.codegen import executable
    made, init = [], executable.Executable.__init__

    def tracking(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.run = recording(self)
        made.append(self)
    executable.Executable.__init__ = tracking
    try:
        make()
    finally:
        executable.Executable.__init__ = init
    return [e for e in made if hasattr(e, "last_arrays")]


def program(name: str):
    def make():   # (after the models: ``import torch`` is dualgraph's from here on)
        import dualgraph.compat
        dualgraph.compat.install_torch_alias()
        path = pathlib.Path(__file__).parent.parent / "tests" / "torch_programs" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"torch_program_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main(3, compile=True)
    return make


def model(name: str):
    import torch

    import dualgraph as dg

    from . import unseen_transformers as u
    from .common import random_state
    reference = u.MODELS[name](torch).eval()
    m = u.MODELS[name](dg).eval()
    m.load_state_dict({k: dg.tensor(v) for k, v in random_state(reference, 0).items()})
    x = dg.tensor(u.example(name, 1, np.random.default_rng(0)))

    def make():
        compiled = dg.compile(m)
        with dg.no_grad():
            compiled(x)
            compiled(x)
    return make


def cnn(name: str):
    from . import unseen_cnns as u

    def make():
        import dualgraph as dg
        m = u.MODELS[name](dg).eval()
        x = dg.tensor(np.random.default_rng(0).standard_normal((1, 3, 224, 224))
                      .astype(np.float32))
        compiled = dg.compile(m)
        with dg.no_grad():
            compiled(x)
            compiled(x)
    return make


def workload(wid: str):
    from .run import WORKLOADS
    module = importlib.import_module(f"benchmarks.{WORKLOADS[wid]}")

    def make():
        step = module.IMPLS["dualgraph_compiled"](module.make_data())
        for _ in range(3):
            step()
    return make


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="gat,mobilenet_se")
    parser.add_argument("--models", default="t5")
    parser.add_argument("--cnns", default="")
    parser.add_argument("--workloads", default="W1,W7")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}, one thread", flush=True)
    programs = [p for p in args.programs.split(",") if p]
    jobs = [(f"W {w}", workload(w)) for w in args.workloads.split(",") if w]
    jobs += [(f"model {m}", model(m)) for m in args.models.split(",") if m]
    jobs += [(f"cnn {m}", cnn(m)) for m in args.cnns.split(",") if m]
    if jobs and programs:   # (a program's ``import torch`` is dualgraph: its own process)
        subprocess.run([sys.executable, "-m", "benchmarks.node_calls", "--workloads", "",
                        "--models", "", "--programs", args.programs, "--top", str(args.top)],
                       check=True)
    else:
        jobs += [(f"program {p}", program(p)) for p in programs]
    for label, make in jobs:
        for i, exe in enumerate(executables(make)):
            if len(exe.graph.nodes) > 1:
                report(f"{label} [{i}]", exe, args.top)


if __name__ == "__main__":
    sys.exit(main())
