"""Fused groups -> one Numba kernel each, with a NumPy fallback.

A ``fused`` node holds a group of elementwise ops (and maybe one reduction) as a
subgraph. Its kernel is one loop nest written from the members' scalar expressions
(``elementwise=`` templates), each member a local scalar, so intermediates never touch
memory::

    for r in range(start, stop):             # rows (shared among threads when the size pays)
        base = r * C
        m = min(C, n - base)
        in0_r = in0[base:base + m]           # an input of the group's full shape
        out0_r = out0[base:base + m]
        for j in range(m):
            x0 = in0_r[j]
            x1 = in1[j]                      # broadcast along rows (a bias of shape [C])
            t0 = np.float32(x0 * x1)    # mul
            t1 = np.float32(tanh32(t0))    # tanh
            out0_r[j] = t1

Broadcasting is handled by splitting the output shape into rows x columns so that every
input is full, one row (indexed by column), one column (indexed by row) or a scalar; an
input that fits none is broadcast to the full shape first. A ``sum`` / ``mean`` /
``amax`` / ``amin`` accumulates in the same loop: per row over the last dims (LayerNorm's
and softmax's statistics), per column over the leading dims (bias gradients), or both (a
conv bias gradient over N, H, W); sums add in ``np.add.reduce``'s order, in the summed
dtype (a row's values go to a scratch row summed pairwise, ``kernels.sums``). With
``fast_math``, float32 groups use the vectorisable ``exp32`` / ``tanh32`` of ``fastmath``
(10x faster than libm's here, a few ulps off).
Without it, elementwise results are bit-identical to NumPy's, so compiled training
reproduces eager training exactly (an adaptive optimiser turns even last-bit differences in
a zero gradient into visible steps). Kernels are cached on disk (``cache.py``). Anything the
lowering does not cover (other dtypes, templates with unknown functions, reductions keeping
dims that are not adjacent), a missing Numba or a failed compile runs the group as
generated NumPy code calling the registry kernels instead.
"""
from __future__ import annotations

import math
import os
import re
import warnings
from functools import lru_cache

import numpy as np

from ..kernels import MIN_ELEMENTS, native
from ..kernels.threads import SHARE_MIN, run_rows, threads_for
from ..graph import Graph, Node, Value
from ..ops.opdef import Reduction
from ..shapes import Sym
from . import python

# elements: smaller groups are not worth a compile (~0.5 s each); the same threshold as the
# eager loops', so a group and its ops' eager kernels take the same (Numba or NumPy) path
NUMBA_MIN = MIN_ELEMENTS
# (groups share their rows among threads as the eager loops do, from the size
# ``kernels.threads.threads_for`` names: ``kernels.threads``)
CHUNK = 1 << 14          # row length for groups without row/column broadcasting
# Elementwise arithmetic is compiled without fast-math flags, so + - * / and sqrt round
# exactly as NumPy's do (results stay bit-identical, and training runs reproduce eager
# ones): the flags apply to a whole kernel, and "reassoc" would let LLVM fold (t * 1.5) *
# 1.5 into t * 2.25. Sums vectorise without it (``kernels.sums``), a row epilogue's
# statistics (LayerNorm's) too, in the order of the eager loop that calls its row function.
_DTYPES = {"float32", "float64", "int32", "int64", "bool"}
# The reductions (``OpDef.reduction``) a generated loop accumulates, with the value each
# starts from; a group ending in another (prod, all, any) runs with NumPy.
ACCUMULATED = {Reduction.SUM: "0.0", Reduction.MEAN: "0.0", Reduction.MAX: "-np.inf",
               Reduction.MIN: "np.inf"}
_NUMBER = re.compile(r"(?<![\w.{])\d+\.?\d*(?:[eE][-+]?\d+)?(?![\w}])")
_CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\(")
# The tables below are keyed by the functions of the ``elementwise=`` template language
# (NumPy's names: ``maximum``, ``where``, ``exp``), not by ops: one function appears in
# many ops' templates (``where`` in relu_backward's, elu's, softplus's ...), and how Numba
# computes it is a fact about the function, the same in each. What belongs to one op (its
# eager float32 kernel's own scalar function) is that op's ``scalar32``.
_SPECIAL = {"where": "where", "sign": "sign"}
_FAST32 = {"exp": "exp32", "tanh": "tanh32"}
# What generated kernels import from kernels/fastmath.py: the functions above and every
# op's ``scalar32`` (an op naming a new one adds it here; tests/test_op_facts.py checks).
FASTMATH_IMPORT = ("from dualgraph.kernels.fastmath import (exp32, tanh32, gelu_tanh32, "
                   "gelu_tanh_backward32, erf32, gelu32, gelu_backward32, sigmoid32, silu32, "
                   "silu_backward32, sin32, cos32, where, sign)")
# Functions Numba computes exactly as NumPy does (correctly rounded or exact), and fast.
# Transcendentals (exp, log, tanh, erf, pow, ...) are not among them: Numba calls libm one
# element at a time, slower than NumPy's SIMD loops and not bit-identical to them, so a
# group using one runs with NumPy, unless fast_math gives it a vectorised float32 version.
_EXACT = {"absolute", "maximum", "minimum", "sqrt", "floor", "ceil", "trunc", "isnan",
          "isinf", "isfinite", "invert", "bitwise_and", "bitwise_or", "bitwise_xor"}


class Unsupported(Exception):
    """The group needs the NumPy fallback (the message says why)."""


class FusedKernel:
    """``kernel(*inputs, out=None) -> tuple of outputs``; ``source`` is its code. The
    NumPy fallback is generated when it is first needed (a compiled group never needs it:
    for a group of thousands of ops, generating it cost about a second), which includes
    the first call of an exact group whose machine code is not at hand (tiered: see
    :class:`Lowering`)."""

    def __init__(self, sub: Graph, name: str, lowering, why_fallback: str):
        self.sub, self.name = sub, name
        self.lowering = lowering
        self.why_fallback = why_fallback
        self._fallback = None

    @property
    def fallback(self) -> python.Program:
        """The group as generated NumPy code calling the registry kernels."""
        if self._fallback is None:
            self._fallback = python.generate(self.sub, name=f"fused_{self.name}")
        return self._fallback

    @property
    def source(self) -> str:
        if self.lowering is not None:
            return self.lowering.legend() + self.lowering.source
        return self.fallback.source

    def __call__(self, *inputs, out=None):
        if self.lowering is not None:
            try:
                results = self.lowering(inputs, out)
            except Exception as e:   # a failed compile: run this group with NumPy from now on
                if self.lowering.compiled or os.environ.get("DUALGRAPH_NUMBA") == "strict":
                    raise
                warnings.warn(f"fused kernel failed to compile, using NumPy: {e}")
                self.lowering, self.why_fallback = None, f"compile failed: {e}"
            else:
                if results is not None:
                    return results
        results = self.fallback.fn(*inputs)
        if out is not None:
            for o, r in zip(out, results):
                if o is not None:
                    np.copyto(o, r)
            results = [r if o is None else o for o, r in zip(out, results)]
        return tuple(results)


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name)


@lru_cache(maxsize=None)
def _dtype_ctor(dtype: np.dtype) -> str:
    return "np.bool_" if dtype == np.bool_ else f"np.{dtype.name}"


def _kind(shape, out_shape, k) -> str | None:
    """How an input of ``shape`` broadcasts against ``out_shape`` split at dim ``k``."""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    lead_full = padded[:k] == tuple(out_shape[:k])
    lead_one = all(d == 1 for d in padded[:k])
    trail_full = padded[k:] == tuple(out_shape[k:])
    trail_one = all(d == 1 for d in padded[k:])
    for kind, ok in (("full", lead_full and trail_full), ("row", lead_one and trail_full),
                     ("col", lead_full and trail_one), ("scalar", lead_one and trail_one)):
        if ok:
            return kind
    # "cycle": one value per row, repeating every len(input) rows: ones, then full lead
    # dims, then ones (a per-channel (C, 1, 1) against (N, C, H, W) split after C). It
    # would otherwise be materialised to the whole shape, a copy per call.
    ones = next((a for a in range(k) if padded[a] != 1), k)
    if trail_one and padded[ones:k] == tuple(out_shape[ones:k]):
        return "cycle"
    return None


class Lowering:
    """One group lowered to Numba source; calling it compiles (once) and runs it.

    Tiered for exact groups (operators only: no function, reduction or row epilogue, no
    fast-math), whose NumPy code gives the kernel's very bits: the first call returns None
    (the caller runs NumPy's code) unless the machine code is in this process or the disk
    cache already, and the second call compiles. A graph that runs once (an optimiser's
    first step, creating its state) then never waits for a compile of code it would run
    only that once."""

    def __init__(self, sub: Graph, name: str, fast_math: bool = False):
        self.sub, self.name, self.fast_math = sub, f"fused_{name}", fast_math
        self.compiled = False
        members = [n for n in sub.nodes if n.op.elementwise is not None]
        others = [n for n in sub.nodes if n.op.elementwise is None]
        # a row epilogue (LayerNorm) ending the group, applied to each row once computed
        self.norm = (others[0] if len(others) == 1 and others[0].op.row_epilogue is not None
                     else None)
        if self.norm is not None:
            self._check_norm(self.norm)
            others = []
        if len(others) > 1 or (others and others[0].op.reduction not in ACCUMULATED):
            raise Unsupported(f"{others[-1].op.name} has no scalar expression")
        # (fusion never lets a member read the group's reduction: it is accumulated
        # alongside the elementwise part, wherever it sits in the group)
        self.reduction = others[0] if others else None
        self.kept = self._check_reduction(self.reduction) if others else None
        values = [v for n in sub.nodes for v in n.outputs] + list(sub.inputs)
        bad = sorted({v.dtype.name for v in values} - _DTYPES)
        if bad:
            raise Unsupported(f"dtypes {bad}")
        if any(v not in {o for n in sub.nodes for o in n.outputs} for v in sub.outputs):
            raise Unsupported("an output that is not computed in the group")
        self.members = members
        end = self.reduction or self.norm
        self.shape = end.inputs[0].shape if end else members[-1].outputs[0].shape
        if _static_size(self.shape) < NUMBA_MIN:
            raise Unsupported(f"too small to pay for a compile ({math.prod(self.shape)} "
                              "elements)")
        self.split, self.kinds = self._choose_split()
        # a sum over rows adds each row's values from a scratch row, in NumPy's order
        self.scratch = (self.red_kind in ("row", "mid")
                        and self.reduction.op.reduction in (Reduction.SUM, Reduction.MEAN))
        self.parallel = self._worth_threads()
        # outputs stored element by element (not a reduction's result or LayerNorm's)
        ends = set(self.norm.outputs) if self.norm else {end.outputs[0] if end else None}
        self.plain_outputs = [k for k, v in enumerate(sub.outputs) if v not in ends]
        self.source = self._source()
        self._fns = {}   # aliases (a tuple of (output, input) pairs) -> compiled kernel
        self._plans = {}   # the inputs' shapes -> the Plan of a call with them
        # operators only (no function, reduction or LayerNorm, exact flags): NumPy's code
        # gives the kernel's very bits, so the first call may run it instead of compiling
        self.exact = (end is None and not fast_math
                      and not any(_CALL.search(n.op.elementwise) for n in members))
        self.deferred = False
        self.deferred_compile = None   # native.Activity of the call that compiled it then

    @staticmethod
    def _check_norm(node: Node) -> None:
        """A row epilogue: float32 rows, and every parameter a float32 row of their width,
        as its row function (``RowEpilogue.function``: LayerNorm's ``normalise_row``)
        takes them."""
        x, *params = node.inputs
        width = x.shape[-1] if x.shape else None
        if (not node.op.row_epilogue.applies(*node.inputs, **node.attrs)
                or x.dtype != np.float32 or not all(
                    isinstance(p, Value) and p.dtype == np.float32
                    and tuple(p.shape) == (width,) for p in params)):
            raise Unsupported(f"{node.op.name} needs float32 rows and float32 parameters "
                              "(a weight and a bias) of their width")

    def _check_reduction(self, node: Node) -> tuple[int, int]:
        """The kept dims ``[a, b)`` of the reduction, which must be one block: the dims
        before it and after it are the reduced ones."""
        x = node.inputs[0]
        if x.dtype.kind != "f":
            raise Unsupported(f"reduction {node.op.name} over {x.dtype}")
        if node.attrs.get("dtype") not in (None, x.dtype):   # (sum's dtype=)
            raise Unsupported(f"{node.op.name} with a dtype")
        reduced = set(_reduced_dims(node))
        kept = [d for d in range(x.ndim) if d not in reduced]
        if kept != list(range(kept[0], kept[-1] + 1) if kept else []):
            raise Unsupported(f"reduction over dims {tuple(sorted(reduced))} keeps dims "
                              "that are not adjacent")
        if all(x.shape[d] == 1 for d in kept):   # one result: NumPy sums the whole array
            return (0, 0)                       # as one run (a row reduction of one row)
        return (kept[0], kept[-1] + 1) if kept else (0, 0)

    @property
    def red_kind(self) -> str | None:
        """``"row"``: the last dims are reduced, one result per row (LayerNorm's
        statistics); ``"col"``: the leading dims, one result per column (a bias gradient);
        ``"mid"``: both, one result per row modulo the kept size (a conv bias gradient);
        ``"norm"``: a row epilogue (LayerNorm) of each row once it is computed."""
        if self.norm is not None:
            return "norm"
        if self.reduction is None:
            return None
        a, b = self.kept
        if a == 0:
            return "row"
        return "col" if b == len(self.shape) else "mid"

    def _choose_split(self):
        ndim = len(self.shape)
        if self.norm is not None:        # rows x columns: columns are the normalised dim,
            splits = [ndim - 1]
        elif self.reduction is not None:   # the kept dims of a column reduction, else the
            a, b = self.kept                 # reduced ones
            splits = [a if self.red_kind == "col" else b]
        else:
            splits = list(range(ndim - 1, -1, -1)) or [0]
        best = None
        for k in splits:
            kinds = [_kind(u.shape, self.shape, k) for u in self.sub.inputs]
            cost = sum(kd is None for kd in kinds)
            if best is None or cost < best[0]:
                best = (cost, k, kinds)
        _, k, kinds = best
        kinds = [kd or "materialise" for kd in kinds]
        if self.reduction is None and all(kd in ("full", "scalar") for kd in kinds):
            k = None   # flat: fixed-size chunks make the rows
        return k, kinds

    def _worth_threads(self) -> bool:
        # rows of a column or mid reduction add into shared results, and threads would
        # share the scratch row of a sum: no threads there
        return (self.red_kind in (None, "row", "norm") and not self.scratch
                and _static_size(self.shape) >= SHARE_MIN)

    def legend(self) -> str:
        """Comment lines naming the graph values behind the kernel's positional names."""
        ins = ", ".join(f"in{i} = %{u.name} ({kind})"
                        for i, (u, kind) in enumerate(zip(self.sub.inputs, self.kinds)))
        outs = ", ".join(f"out{i} = %{v.name}" for i, v in enumerate(self.sub.outputs))
        return f"# {self.name}: {ins}\n# {outs}\n"

    # -- source --------------------------------------------------------------------------------
    def _source(self, aliases: dict | None = None) -> str:
        """The kernel module. ``aliases`` ({output position: input position}) names the
        outputs that are their input's own array this call (a donated parameter update):
        those are stored through the input's row slice, so that the loop reads and writes
        one array (LLVM vectorises that; given two pointers to the same memory it finds
        them overlapping at run time and takes its scalar loop, 2-5x slower)."""
        aliases = aliases or {}
        # Positional names (in0, t0, out0), so that the same group in another layer or
        # graph is the same source: one compile, one cache entry. The comment block above
        # the module maps them back to the graph's values.
        var = {}
        params, rows, loads, hoisted = [], [], [], []
        for i, (u, kind) in enumerate(zip(self.sub.inputs, self.kinds)):
            arr = f"in{i}"
            var[u] = f"x{i}"
            params.append(arr)
            if kind in ("col", "scalar", "cycle"):   # one value per row: read once
                at = {"col": "r", "scalar": "0", "cycle": f"r % {arr}.size"}[kind]
                hoisted.append(f"{var[u]} = {arr}[{at}]")
            elif kind == "row":
                loads.append(f"{var[u]} = {arr}[j]")
            else:   # this row's slice: indices from 0 let LLVM drop the wraparound checks
                rows.append(f"{arr}_r = {arr}[base:base + m]")
                loads.append(f"{var[u]} = {arr}_r[j]")
        body = []
        for node in self.members:
            v = node.outputs[0]
            var[v] = f"t{len(body)}"
            body.append(f"{var[v]} = {self._expr(node, var)}    # {node.op.name}")
        outs = [f"out{i}" for i in range(len(self.sub.outputs))]
        red = self.reduction.outputs[0] if self.reduction else None
        stores = []
        for k in self.plain_outputs:
            o, v = outs[k], self.sub.outputs[k]
            if k in aliases:
                stores.append(f"in{aliases[k]}_r[j] = {var[v]}    # (out{k} is in{aliases[k]})")
            else:
                rows.append(f"{o}_r = {o}[base:base + m]")
                stores.append(f"{o}_r[j] = {var[v]}")
        epilogue = self._norm_rows(outs, var, rows, stores) if self.norm else []
        lines = ["for r in range(start, stop):", "    base = r * C", "    m = min(C, n - base)",
                 *("    " + h for h in hoisted + rows), "    for j in range(m):"]
        lines += ["        " + s for s in loads + body + stores] + epilogue
        if red is not None:
            lines = self._accumulate(lines, outs[self.sub.outputs.index(red)],
                                     var[self.reduction.inputs[0]])
        if red is None and not self.norm:
            # elementwise only: sixteen lanes where the CPU runs them at full width, the
            # same bits (a reduction's or row epilogue's order stays the eager loop's)
            lines = ["wide_loops()", *lines]
        ops = ", ".join(n.op.name for n in self.sub.nodes)
        header = [
            '"""Generated by dualgraph: one fused group."""',
            "import math", "", "import numpy as np", "",
            "from dualgraph.kernels import loop",
            "from dualgraph.kernels.simd import wide_loops",
            FASTMATH_IMPORT,
            *([f"from {self.norm.op.row_epilogue.module} import "
               f"{self.norm.op.row_epilogue.function}"] if self.norm else []),
            *(["from dualgraph.kernels.sums import pairwise_sum"] if self.scratch else []),
            "", "",
            "@loop",
            f"def kernel(start, stop, R, C, n, "
            f"{', '.join(self._sizes() + params + outs + self._scratch())}):",
            f'    """{ops}"""']
        return "\n".join(header + ["    " + line for line in lines]) + "\n"

    def _norm_rows(self, outs, var, rows, stores) -> list[str]:
        """The row epilogue (LayerNorm's): each row of its input goes to the output row (or
        a scratch row), and is normalised there in place while it is in cache."""
        epilogue = self.norm.op.row_epilogue
        x, *params = self.norm.inputs
        y, *stats = self.norm.outputs
        given = dict(zip(self.sub.outputs, outs))
        if y in given:
            rows.append(f"{given[y]}_r = {given[y]}[base:base + m]")
            row = f"{given[y]}_r"
        else:
            rows.append("y_r = np.empty(m, np.float32)")
            row = "y_r"
        stores.append(f"{row}[j] = {var[x]}")
        param = {u: f"in{i}" for i, u in enumerate(self.sub.inputs)}
        args = [row, *(param[p] for p in params),
                *(f"np.float32({float(self.norm.attrs[a])!r})" for a in epilogue.attrs), row]
        lines = [f"    {', '.join(epilogue.stats)} = {epilogue.function}({', '.join(args)})"]
        lines += [f"    {given[v]}[r] = {name}" for v, name in zip(stats, epilogue.stats)
                  if v in given]
        return lines

    def _scratch(self) -> list[str]:
        """Scratch arrays after the outputs (``Plan.arguments`` makes them: a loop that
        allocates could not run from the disk cache without Numba): a sum's row of values
        (C,)."""
        return ["s"] if self.scratch else []

    def _sizes(self) -> list[str]:
        """Size parameters beyond R, C, n: a mid reduction needs its number of results."""
        return ["K"] if self.red_kind == "mid" else []

    def _expr(self, node: Node, var: dict) -> str:
        operands = [var[x] if isinstance(x, Value) else None for x in node.inputs]
        return scalar_expr(node, operands, self.fast_math)

    def _accumulate(self, lines: list[str], out: str, x: str) -> list[str]:
        """``lines`` (the row loop) with the reduction of ``x`` into ``out`` added, in
        ``np.add.reduce``'s order, so that the results are eager's bits.

        A row reduction stores each row's values in a scratch row and sums that in NumPy's
        pairwise order (``kernels.sums``), in the row's dtype (a max or min compares as it
        goes: order does not change it); a column reduction adds each row into ``out`` in
        its own dtype, row after row, which is NumPy's order for leading axes; a mid
        reduction sums each row as a row reduction does and adds it into result
        ``r % K``, as NumPy adds each row's pairwise sum into its result."""
        kind, op = self.red_kind, self.reduction.op.reduction
        init = ACCUMULATED[op]
        ctor = _dtype_ctor(self.reduction.outputs[0].dtype)
        if kind == "col":
            lines = [f"{out}[:] = {init}", *lines,
                     f"        {out}[j] = {_combine(op, f'{out}[j]', x)}"]
            count = "R"
        else:
            if self.scratch:
                lines = [*lines, f"        s[j] = {x}",
                         "    acc = pairwise_sum(s, 0, m)"]
            else:
                lines = lines[:3] + [f"    acc = {init}"] + lines[3:]
                lines += [f"        acc = {_combine(op, 'acc', x)}"]
            if kind == "row":   # (0.0 + the sum, as np.add.reduce: a -0.0 sum is 0.0)
                total = {Reduction.SUM: "0.0 + acc", Reduction.MEAN: "(0.0 + acc) / C"}
                return lines + [f"    {out}[r] = {ctor}({total.get(op, 'acc')})"]
            lines = [f"{out}[:] = {init}", *lines,
                     f"    {out}[r % K] = {ctor}({_combine(op, f'{out}[r % K]', 'acc')})"]
            count = "(n // K)"
        if op is Reduction.MEAN:
            lines += [f"for j in range({'C' if kind == 'col' else 'K'}):",
                      f"    {out}[j] = {out}[j] / {count}"]
        return lines

    # -- running -------------------------------------------------------------------------------
    def __call__(self, inputs, out):
        key = tuple([a.shape for a in inputs])
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = Plan(self, inputs)
        if plan.numpy:
            return None
        if self.compiled:
            return plan(inputs, out)
        results, aliases, arguments = plan.arguments(inputs, out)
        if self.exact and not self.deferred:
            # tiered: unless its machine code is at hand, the first call runs NumPy's code
            # (the same bits) and the next compiles, so a graph run once never compiles
            if not self._compiled(aliases).ready(0, arguments[0], *arguments):
                self.deferred = True
                return None
        late = self.deferred
        before = native.activity.snapshot() if late else None
        plan.run(aliases, arguments)
        if late:    # the compile deferred from the first call, for explain()
            self.deferred_compile = native.activity.since(before)
        self.compiled = True
        return tuple(results)

    def _aliases(self, inputs, results: list) -> tuple:
        """``((output, input), ...)``: plain outputs that are a full input's array itself.
        (The generated code passes a donated input as its own ``out=``, the same object;
        an output that shares memory otherwise is still correct, only not vectorised.)"""
        pairs = []
        for k in self.plain_outputs:
            for i, (a, kind) in enumerate(zip(inputs, self.kinds)):
                if kind == "full" and a is results[k]:
                    pairs.append((k, i))
                    break
        return tuple(pairs)

    def _compiled(self, aliases: tuple = ()):
        fn = self._fns.get(aliases)
        if fn is None:
            from .cache import load_module
            source = self._source(dict(aliases)) if aliases else self.source
            fn = self._fns[aliases] = load_module(source).kernel
        return fn


class Plan:
    """A compiled group's call for one set of input shapes, worked out at the first such
    call: the loop's sizes, the outputs' shapes, and the loop's compiled entry for one
    thread (its arguments are always contiguous, aligned arrays of the group's dtypes and
    integers, so their types never change: no type dispatch). A call flattens the inputs,
    allocates the outputs not given and calls the entry: at a few thousand elements,
    working all that out at every call was most of the call's time."""

    def __init__(self, lowering: Lowering, inputs):
        self.lowering, self.kinds = lowering, lowering.kinds
        shape = np.broadcast_shapes(*(a.shape for a in inputs))
        if lowering.reduction is not None:
            shape = np.broadcast_shapes(shape, _full_shape(lowering.reduction, inputs,
                                                           lowering.sub))
        n = math.prod(shape)
        if lowering.split is None:
            C = CHUNK
            R = -(-n // C)
        else:
            R, C = math.prod(shape[:lowering.split]), math.prod(shape[lowering.split:])
        kept = math.prod(shape[slice(*lowering.kept)]) if lowering.reduction else None
        mid = [kept] if lowering.red_kind == "mid" else []
        self.shape, self.sizes = shape, (R, C, n, *mid)
        # a column or mid reduction to one result (a dim that is 1 at this call): NumPy sums
        # the whole array as one pairwise run, not row after row; its code runs it
        self.numpy = lowering.red_kind in ("col", "mid") and kept == 1
        self.outs = [(_out_shape(v, shape, lowering.reduction, lowering.norm), v.dtype)
                     for v in lowering.sub.outputs]
        self.entries = {}   # aliases -> the loop's entry for one thread

    def __call__(self, inputs, out):
        results, aliases, arguments = self.arguments(inputs, out)
        self.run(aliases, arguments)
        return tuple(results)

    def arguments(self, inputs, out) -> tuple:
        """``(results, aliases, arguments)``: the output arrays (``out``'s where given),
        which of them are inputs' arrays, and the loop's arguments after its row range."""
        args = [_flat(a, kind, self.shape) for a, kind in zip(inputs, self.kinds)]
        if out is None:   # (fresh outputs alias nothing)
            results, aliases = [np.empty(s, dt) for s, dt in self.outs], ()
        else:
            results = [np.empty(s, dt) if o is None else o for o, (s, dt) in zip(out, self.outs)]
            aliases = self.lowering._aliases(inputs, results)
        scratch = []
        if self.lowering.scratch:   # (new at each call: a call's kernel may run on any thread)
            dtype = self.lowering.reduction.inputs[0].dtype
            scratch = [np.empty(self.sizes[1], dtype)]
        return results, aliases, (*self.sizes, *args, *[o.reshape(-1) for o in results],
                                  *scratch)

    def run(self, aliases: tuple, arguments: tuple) -> None:
        kernel, rows = self.lowering._compiled(aliases), self.sizes[0]
        # (asked at every call: ``dg.set_num_threads`` may change the answer)
        threads = threads_for(self.sizes[2]) if self.lowering.parallel else 1
        if threads != 1:
            run_rows(kernel, rows, *arguments, threads=threads)
            return
        entry = self.entries.get(aliases)
        if entry is None:
            entry = self.entries[aliases] = kernel.entry(0, rows, *arguments)
        entry(0, rows, *arguments)


def scalar_expr(node: Node, operands: list, fast_math: bool) -> str:
    """A member's scalar expression: its template with ``operands[i]`` for input ``i``
    (None: a number, written as a typed literal), typed literals and the kernel module's
    function names, cast to the member's dtype. Raises Unsupported where the template has
    no exact scalar form."""
    dtype = node.outputs[0].dtype
    ctor = _dtype_ctor(dtype)
    text = node.op.elementwise
    if re.search(r"\*\*|//|%", text):   # libm pow, Python-rounded division: NumPy
        raise Unsupported(f"{node.op.name} runs faster and exactly in NumPy")
    # function names first: the typed literals below are calls too (np.float32(0))
    text = _CALL.sub(lambda m: scalar_function(m.group(1), node, dtype, fast_math) + "(",
                     text)
    if dtype.kind == "f":   # literals in the template take the member's float type
        text = _NUMBER.sub(lambda m: f"{ctor}({m.group(0)})", text)

    def operand(x, name):
        if name is not None:   # kernels cast operands to the result type first
            cast = (isinstance(x, Value) and dtype.kind == "f" and x.dtype != dtype
                    and x.dtype.kind != "b")
            return f"{ctor}({name})" if cast else name
        if dtype.kind == "f" and type(x) in (int, float) and math.isfinite(x):
            return f"{ctor}({x!r})"
        return python.literal(x, None) if type(x) is not float else f"float({str(x)!r})"
    fields = {str(i): operand(x, name) for i, (x, name) in enumerate(zip(node.inputs, operands))}
    for k, val in node.attrs.items():
        fields[k] = operand(val, None) if type(val) in (int, float, bool) else None
    try:
        expr = re.sub(r"\{(\w+)\}", lambda m: _field(fields, m.group(1)), text)
    except KeyError as e:
        raise Unsupported(f"{node.op.name}: attr {e} has no scalar form") from None
    return f"{ctor}({expr})"


def scalar_function(name: str, node: Node, dtype, fast_math: bool) -> str:
    """The kernel module's name for function ``name`` of a template."""
    if name == "cast":
        return _dtype_ctor(node.attrs["dtype"])
    if fast_math and dtype == np.float32 and name in _FAST32:
        return _FAST32[name]
    if node.op.scalar32 is not None:   # (the template's one function: the eager loop's)
        if dtype == np.float32:
            return node.op.scalar32
        raise Unsupported(f"{node.op.name}: only float32 has a scalar version")
    if name in _SPECIAL:
        return _SPECIAL[name]
    if name in _EXACT:
        return f"np.{name}"
    raise Unsupported(f"{node.op.name}: {name} runs faster and exactly in NumPy")


def _combine(op: Reduction, acc: str, x: str) -> str:
    """The expression folding element ``x`` into the running result ``acc``."""
    if op in (Reduction.SUM, Reduction.MEAN):
        return f"{acc} + {x}"
    cmp = ">" if op is Reduction.MAX else "<"   # NaN wins, as in np.amax
    return f"{x} if ({x} {cmp} {acc} or {x} != {x}) else {acc}"


def _reduced_dims(node: Node) -> list[int]:
    x, dims = node.inputs[0], node.attrs["dims"]
    return list(range(x.ndim)) if dims is None else sorted(d % x.ndim for d in dims)


def _static_size(shape) -> float:
    """Elements of ``shape``; a symbolic dim counts as large (it is a batch size)."""
    return math.inf if any(isinstance(d, Sym) for d in shape) else math.prod(shape)


def _field(fields: dict, key: str) -> str:
    val = fields[key]
    if val is None:
        raise KeyError(key)
    return val


def _full_shape(red: Node, inputs, sub: Graph) -> tuple:
    """The reduction input's shape at run time (the group's iteration shape)."""
    x = red.inputs[0]
    if x in sub.inputs:
        return inputs[sub.inputs.index(x)].shape
    return ()


def _flat(a: np.ndarray, kind: str, shape: tuple) -> np.ndarray:
    """``a`` as the kernel reads it: one contiguous, aligned row of elements."""
    if kind == "materialise":
        a = np.broadcast_to(a, shape)
    a = np.ascontiguousarray(a)
    return (a if a.flags.aligned else a.copy()).reshape(-1)


def _out_shape(v: Value, shape: tuple, reduction, norm=None) -> tuple:
    if norm is not None and v in norm.outputs[1:]:   # a row epilogue's stats: one per row
        return tuple(shape[:-1]) + (1,)
    if reduction is None or v is not reduction.outputs[0]:
        return shape
    reduced, keep = set(_reduced_dims(reduction)), reduction.attrs["keepdim"]
    return tuple(1 if i in reduced else d for i, d in enumerate(shape)
                 if keep or i not in reduced)
