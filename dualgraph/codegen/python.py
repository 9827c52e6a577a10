"""Graph -> one readable Python function, compiled and registered in ``linecache``.

Each node becomes one line that calls its registry kernel (bound as a global of the
generated module: ``k_matmul = REGISTRY['matmul'].kernel``) with attrs as literal keyword
arguments and the user's source location as a comment. Elementwise ops whose scalar
expression is a single NumPy ufunc call the ufunc directly, writing into a preallocated
buffer (``out=bufs[3]``) when the buffer plan gives them one; fused groups call their
compiled kernel (``f_add_2``); control flow (``cond``, ``while_loop``, ``scan``) calls its
op's kernel with ``run=``, which runs each body's own compiled program. Intermediates are
``del``-ed after their last use, symbolic dims are read off the input shapes at the top::

    def graph_fn(x, w, bufs):
        B = x.shape[0]
        matmul = k_matmul(x, w)    # model.py:14
        relu = np.maximum(matmul, 0, out=bufs[0])    # model.py:14
        del matmul
        reshape = k_reshape(relu, shape=(B, 512))    # model.py:15
        return [reshape]

Registering the text in ``linecache`` (as torch.fx's ``GraphModule`` does) makes tracebacks,
``inspect.getsource`` and debuggers show the generated lines.
"""
from __future__ import annotations

import builtins
import keyword
import linecache
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Callable

import numpy as np

from .. import kernels
from .._helpers import short_location
from ..graph import Graph, Node, Value
from ..graph.ir import UniqueNames
from ..kernels import matvec
from ..ops import elementwise
from ..ops.fused import FUSED
from ..ops.linalg import BLAS_DTYPES
from ..ops.opdef import OpDef
from ..shapes import Sym
from . import ufuncs

_NON_WORD = re.compile(r"\W")
WIDTH = 100   # generated lines longer than this are broken (see ``wrap``)
_counter = [0]   # distinct file names for linecache
# A traced loop labels thousands of nodes with the same few source lines.
_short_location = lru_cache(maxsize=4096)(short_location)


@dataclass
class Program:
    """Generated source, its compiled function and the module globals it runs in."""
    source: str
    fn: Callable
    filename: str
    globals: dict = field(default_factory=dict)


class Namer:
    """Python identifiers for values and module globals: readable, unique, never a keyword
    or a builtin."""

    def __init__(self, reserved=()):
        self.names = UniqueNames(set(reserved) | set(dir(builtins)) | {"np"})

    def fresh(self, name: str) -> str:
        base = name
        if not (name.isascii() and name.isidentifier()):   # (most are: the regex is slow)
            base = _NON_WORD.sub("_", name) or "v"
            if base[0].isdigit():
                base = "v" + base
        if keyword.iskeyword(base):
            base += "_"
        return self.names.fresh(base)


class Module:
    """The globals of one generated module: kernels and any attr that has no literal form
    (subgraphs, unusual dtypes), each bound once under a readable name."""

    def __init__(self, namer: Namer, run_body: Callable | None = None):
        self.namer = namer
        self.globals: dict = {"np": np}
        self.run_body = run_body   # how control flow runs its bodies (None: interpreted)
        self._bound: dict = {}   # (kind, id) -> name
        self._ufuncs: dict = {}  # kind of node -> ufuncs.direct's answer

    def bind(self, prefix: str, obj, key=None) -> str:
        key = key if key is not None else ("obj", id(obj))
        name = self._bound.get(key)
        if name is None:
            name = self._bound[key] = self.namer.fresh(prefix)
            self.globals[name] = obj
        return name

    def kernel(self, op: OpDef) -> str:
        """The name of ``op``'s kernel; a control-flow op's (``op.bodies``) runs its
        bodies with ``run_body`` when there is one."""
        if self.run_body is not None and op.bodies:
            kernel = partial(op.kernel, run=self.run_body)
            return self.bind(f"k_{op.name}", kernel, ("kernel", op.name))
        return self.bind(f"k_{op.name}", op.kernel, ("kernel", op.name))

    def ufunc(self, node: Node):
        """``ufuncs.direct(node)``, worked out once per kind of node: it reads only the op,
        the dtypes, the literal inputs and the attrs, and a graph of thousands of tiny ops
        has a handful of kinds. (Literals and attrs count by type and repr: ``-0.0`` is not
        ``0.0``; ``direct`` takes only numbers.)"""
        key = (node.op, tuple([v.dtype for v in node.outputs]),
               tuple([x.dtype if isinstance(x, Value) else (type(x), repr(x))
                      for x in node.inputs]),
               tuple([(k, type(v), repr(v)) for k, v in node.attrs.items()]))
        if key not in self._ufuncs:
            self._ufuncs[key] = ufuncs.direct(node)
        return self._ufuncs[key]


def literal(val, module: Module) -> str:
    """Source text that evaluates to ``val`` (an attr or a literal node input)."""
    if isinstance(val, float) and not math.isfinite(val):
        return f"float({str(val)!r})"
    if val is None or isinstance(val, (bool, int, float, str)) or val is Ellipsis:
        return repr(val)
    if isinstance(val, Sym):
        return sym_expr(val)
    if isinstance(val, tuple):
        items = [literal(v, module) for v in val]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(val, list):
        return f"[{', '.join(literal(v, module) for v in val)}]"
    if isinstance(val, slice):
        parts = (literal(v, module) for v in (val.start, val.stop, val.step))
        return f"slice({', '.join(parts)})"
    if isinstance(val, np.dtype) and val.type.__module__ == "numpy":
        return f"np.dtype({val.name!r})"
    return module.bind("g" if isinstance(val, Graph) else "attr", val)


def sym_expr(dim: Sym) -> str:
    """``784*B`` -> ``784 * B``: the dim from the sizes bound at the top of the function."""
    parts = list(dim.names) + ([str(dim.coef)] if dim.coef != 1 else [])
    return " * ".join(parts)


def bind_syms(graph: Graph, names: dict) -> list[str]:
    """Lines binding every symbolic dim name of the inputs from their shapes
    (``B = x.shape[0]``); a dim of several names is solved once the others are known."""
    known: set[str] = set()
    lines = []
    pending = [(names[v], i, d) for v in graph.inputs for i, d in enumerate(v.shape)
               if isinstance(d, Sym)]
    progress = True
    while pending and progress:
        progress = False
        for item in list(pending):
            ident, i, d = item
            free = [n for n in d.names if n not in known]
            if len(free) > 1:
                continue
            pending.remove(item)
            if not free:
                continue
            rest = Sym(coef=d.coef, names=tuple(n for n in d.names if n != free[0]))
            div = sym_expr(rest) if rest.names else (str(d.coef) if d.coef != 1 else "")
            expr = f"{ident}.shape[{i}]" + (f" // ({div})" if div else "")
            lines.append(f"{free[0]} = {expr}")
            known.add(free[0])
            progress = True
    return lines


def last_uses(graph: Graph) -> dict[int, list[Value]]:
    """node index -> intermediate values read for the last time there (or, when never
    read, right after they are made)."""
    keep = set(graph.outputs) | set(graph.inputs) | set(graph.constants)
    last = {}
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            last[v] = i
        for x in node.inputs:
            if isinstance(x, Value):
                last[x] = i
    by_node: dict[int, list[Value]] = {}
    for v, i in last.items():
        if v not in keep:
            by_node.setdefault(i, []).append(v)
    return by_node


def generate(graph: Graph, slots: dict | None = None, fused: Callable | None = None,
             instrument: bool = False, name: str = "graph_fn",
             donated: dict | None = None, run_body: Callable | None = None,
             epilogues: dict | None = None) -> Program:
    """Compile ``graph`` into a Python function ``name(*inputs[, bufs][, on_node])``.

    ``slots`` maps values to indices into ``bufs`` (the preallocated outputs); ``fused``
    turns a ``fused`` node into a callable ``kernel(*inputs, out=None)`` (the fused-kernel
    compiler); ``instrument`` calls ``on_node(node, outputs)`` after each node (checked
    mode); ``donated`` maps output values to the inputs whose arrays they are written into
    (see ``buffers.donations``); ``run_body(graph, *arrays)`` runs the bodies of control
    flow (default: the reference interpreter); ``epilogues``: :func:`relu_epilogues` of the
    graph, if the caller has them (none when instrumenting: ``on_node`` sees every node).
    """
    has_bufs = bool(slots)
    slots = dict(slots or {})
    donated = donated or {}
    syms = sorted({n for v in graph.inputs for d in v.shape if isinstance(d, Sym)
                   for n in d.names})
    namer = Namer(syms + ["bufs", "on_node", "NODES"])
    module = Module(namer, run_body)
    names: dict[Value, str] = {}
    for v in graph.inputs:
        names[v] = namer.fresh(v.name)
    slots.update({v: names[u] for v, u in donated.items()})   # out= the input's array
    for v in graph.constants:
        names[v] = module.bind(f"c_{v.name}", graph.constants[v])
    params = [names[v] for v in graph.inputs] + (["bufs"] if has_bufs else [])
    params += ["on_node"] if instrument else []
    body = [f'"""Generated by dualgraph from a graph of {len(graph.nodes)} nodes.'
            + ('\nbufs: preallocated outputs, reused across calls."""' if has_bufs else '"""')]
    dead = last_uses(graph)
    if instrument:
        epilogues, in_place = {}, set()
    else:
        epilogues = relu_epilogues(graph) if epilogues is None else epilogues
        in_place = in_place_relu_backwards(graph)
    if instrument:
        module.globals["NODES"] = list(graph.nodes)
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            names[v] = namer.fresh(v.name)
        body += node_lines(node, names, slots, module, fused, epilogues, in_place)
        if instrument:
            outs = ", ".join(names[v] for v in node.outputs)
            body.append(f"on_node(NODES[{i}], ({outs},))")
        gone = [names[v] for v in dead.get(i, ())]
        if gone:
            names_gone = ", ".join(gone)
            body.append(f"del {names_gone}" if len(names_gone) < WIDTH
                        else wrap(f"del ({names_gone})"))
    body.append(wrap(f"return [{', '.join(names[v] for v in graph.outputs)}]"))
    text = "\n".join(body)
    if any(re.search(rf"\b{n}\b", text) for n in syms):   # bind dims only when used
        body[1:1] = bind_syms(graph, names)
    source = wrap(f"def {name}({', '.join(params)}):") + "\n" + "".join(
        "    " + line.replace("\n", "\n    ") + "\n" for line in body)
    return compile_source(source, name, module.globals)


def wrap(statement: str, width: int = WIDTH) -> str:
    """``statement`` broken after commas inside brackets (where Python joins the lines
    again) so that its lines stay near ``width`` characters: a step's optimiser update or
    return list names hundreds of values. Commas inside string literals are left alone."""
    if len(statement) <= width:
        return statement
    breaks, depth, quote, i = [], 0, None, 0
    while i < len(statement):
        ch = statement[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth > 0 and statement[i + 1:i + 2] == " ":
            breaks.append(i + 2)
        i += 1
    pieces, start, previous, limit = [], 0, None, width
    for at in breaks + [len(statement)]:
        if at - start > limit and previous is not None and previous > start:
            pieces.append(statement[start:previous].rstrip())
            start, limit = previous, width - 8
        previous = at
    pieces.append(statement[start:])
    return ("\n" + " " * 8).join(pieces)


def compile_source(source: str, name: str, module_globals: dict) -> Program:
    """``exec`` ``source`` as its own module registered in ``linecache``."""
    _counter[0] += 1
    filename = f"<dualgraph-generated-{_counter[0]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), module_globals)
    return Program(source, module_globals[name], filename, module_globals)


def node_lines(node: Node, names: dict, slots: dict, module: Module, fused,
               epilogues: dict | None = None, in_place=frozenset()) -> list[str]:
    """The line(s) computing ``node``'s outputs (``epilogues``: :func:`relu_epilogues`;
    ``in_place``: :func:`in_place_relu_backwards`)."""
    comment = f"    # {_short_location(node.location)}" if node.location else ""
    epilogues = epilogues or {}
    if node in epilogues:
        return [f"{names[node.outputs[0]]} = {names[node.inputs[0]]}    # (applied in "
                "place above)"]
    if node in in_place:
        name = module.bind("relu_backward_in_place", elementwise.relu_backward_in_place)
        g, y = (names[v] for v in node.inputs)
        return [f"{names[node.outputs[0]]} = {name}({g}, {y})    # (into {g})"
                + comment.replace("    # ", " ", 1)]
    written = linear_lines(node, names, module, relu=node in epilogues.values())
    if written:
        return [written[0] + comment] + written[1:]
    outs = [names[v] for v in node.outputs]
    if node.op is FUSED and fused is not None:
        call = fused_call(node, names, slots, module, fused)
    else:
        call = ufunc_call(node, names, slots, module) or kernel_call(node, names, module,
                                                                   slots)
    target = outs[0] if node.op.num_outputs == 1 else ", ".join(outs)
    if len(outs) == 1 and node.op.num_outputs != 1:
        target += ","   # a kernel with a variable number of outputs returns a tuple
    if len(outs) > 1 and len(target) + len(call) > WIDTH:
        target = f"({target})"   # so that the names can be broken over lines too
    lines = [wrap(f"{target} = {call}") + comment]
    # kernels return NumPy scalars for 0-d results; the graph's values are arrays
    lines += [f"{names[v]} = np.asarray({names[v]})" for v in node.outputs
              if v.ndim == 0 and not (node.op is FUSED and fused is not None)]
    return lines


def linear_lines(node: Node, names: dict, module: Module,
                 relu: bool = False) -> list[str] | None:
    """``linear`` of a 2-D input whose operands share its float32/float64 dtype, written
    out as its kernel's fast path: one matmul, the bias added in place; with one row of
    float32, the kernel's matrix-vector product on two cores (``kernels/matvec.py``).
    ``relu`` (the product's only use is a relu: :func:`relu_epilogues`) is applied in
    place too: inside the matrix-vector product, or with the bias in one float32 loop
    (``add_bias_relu``: 6 us instead of 13 + 32 us on a 128 x 512 product). Spares a
    call and its checks (an inference of W7 runs three of them in ~70 us)."""
    if not _blas_linear(node):
        return None
    x, w, *rest = node.inputs
    operands = [x, w, *[b for b in rest if b is not None]]
    y = names[node.outputs[0]]
    if _matvec_linear(node):   # a plan of its own: its shapes and flags worked out now
        plan = matvec.Plan(x.ndim, *w.shape, len(operands) == 3, relu)
        name = module.bind("matvec_relu" if relu else "matvec", plan)
        return [f"{y} = {name}({', '.join(names[v] for v in operands)})"]
    lines = [f"{y} = np.matmul({names[x]}, {names[w]}.T)"]
    bias = names[operands[2]] if len(operands) == 3 else None
    if relu and bias and _per_output_bias(node) and _fused_bias_relu(x):
        name = module.bind("add_bias_relu", kernels.activations.add_bias_relu)
        return lines + [f"{name}({y}, {bias})"]
    if bias:
        lines.append(f"{y} += {bias}")
    if relu:
        lines.append(f"np.maximum({y}, 0, out={y})")
    return lines


def _per_output_bias(node: Node) -> bool:
    """The linear's bias, if any, has one entry per output (it also takes a scalar)."""
    w, rest = node.inputs[1], node.inputs[2:]
    return all(tuple(b.shape) == tuple(w.shape[:1]) for b in rest if b is not None)


def _fused_bias_relu(x: Value) -> bool:
    return x.dtype == np.float32 and kernels.numba_available()


def _blas_linear(node: Node) -> bool:
    """A ``linear`` of a 2-D input whose operands share its float32/float64 dtype."""
    if node.op.name != "linear":
        return False
    x, w, *rest = node.inputs
    return (x.ndim == 2 and w.ndim == 2 and x.dtype in BLAS_DTYPES
            and all(isinstance(v, Value) and v.dtype == x.dtype
                    for v in (x, w, *[b for b in rest if b is not None])))


def _matvec_linear(node: Node) -> bool:
    """A ``linear`` the code computes with ``kernels.matvec``: one row of float32 whose
    shapes eager's ``linear`` computes there too (``matvec.product_shapes``)."""
    if not _blas_linear(node):
        return False
    x, w, *rest = node.inputs
    bias = next((b for b in rest if b is not None), None)
    return (x.dtype == np.float32 and kernels.numba_available()
            and matvec.product_shapes(tuple(x.shape), tuple(w.shape),
                                      None if bias is None else tuple(bias.shape)))


def relu_epilogues(graph: Graph) -> dict[Node, Node]:
    """``{relu node: the linear node}`` for each relu whose input is the output of a
    ``linear`` written as a matmul or a matrix-vector product (:func:`linear_lines`) and
    used by nothing else (nor returned): the relu is applied to the product in place (in
    the matrix-vector loop as it writes the rows, with the bias in one pass over a
    matmul's result), and the relu's line only names the result. W7's inference saves two
    NumPy calls, W1's training step two passes and two arrays."""
    uses = _use_counts(graph)
    made_by = {v: n for n in graph.nodes for v in n.outputs}
    epilogues = {}
    for node in graph.nodes:
        if node.op.name != "relu" or not isinstance(node.inputs[0], Value):
            continue
        x = node.inputs[0]
        producer = made_by.get(x)
        if (producer is not None and _blas_linear(producer) and uses[x] == 1
                and x not in graph.outputs):
            epilogues[node] = producer
    return epilogues


def in_place_relu_backwards(graph: Graph) -> set[Node]:
    """The ``relu_backward`` nodes whose gradient operand is a ``linear_backward``'s input
    gradient (a fresh product) that nothing else reads (nor is returned): their line masks
    that array in place (``ops.elementwise.relu_backward_in_place``) instead of writing a
    new one. An MLP's backward then writes one activation-sized array fewer per hidden
    layer (W1: 39 us a step, 3.11 -> 3.06 ms, interleaved in one process)."""
    uses = _use_counts(graph)
    made_by = {v: n for n in graph.nodes for v in n.outputs}
    chosen = set()
    for node in graph.nodes:
        if node.op.name != "relu_backward" or not all(isinstance(v, Value)
                                                       for v in node.inputs):
            continue
        g = node.inputs[0]
        producer = made_by.get(g)
        if (producer is not None and producer.op.name == "linear_backward"
                and g is producer.outputs[0] and uses[g] == 1 and g not in graph.outputs):
            chosen.add(node)
    return chosen


def _use_counts(graph: Graph) -> dict[Value, int]:
    """How many node inputs read each value."""
    uses: dict[Value, int] = {}
    for node in graph.nodes:
        for x in node.inputs:
            if isinstance(x, Value):
                uses[x] = uses.get(x, 0) + 1
    return uses


def operand(x, names: dict, module: Module) -> str:
    return names[x] if isinstance(x, Value) else literal(x, module)


def kernel_call(node: Node, names: dict, module: Module, slots: dict | None = None) -> str:
    args = [operand(x, names, module) for x in node.inputs]
    args += [f"{k}={literal(v, module)}" for k, v in node.attrs.items()]
    outs = [(slots or {}).get(v) for v in node.outputs]
    if node.op.writes_out and any(s is not None for s in outs):
        items = [out_target(s) if s is not None else "None" for s in outs]
        args.append(f"out=({', '.join(items)},)")
    return f"{module.kernel(node.op)}({', '.join(args)})"


def ufunc_call(node: Node, names: dict, slots: dict, module: Module) -> str | None:
    """``np.add(a, b, out=bufs[2])`` when the op's scalar expression is one ufunc that gives
    exactly its kernel's result for these dtypes (see ``ufuncs.direct``); else None."""
    found = module.ufunc(node)
    if found is None:
        return None
    ufunc, args = found
    text = [operand(node.inputs[a], names, module) if isinstance(a, int)
            else literal(a.value, module) for a in args]
    slot = slots.get(node.outputs[0])
    if slot is not None:
        text.append(f"out={out_target(slot)}")
    return f"np.{ufunc.__name__}({', '.join(text)})"


def out_target(slot) -> str:
    """A slot's expression: ``bufs[i]``, or the name of a donated input."""
    return f"bufs[{slot}]" if isinstance(slot, int) else slot


def fused_call(node: Node, names: dict, slots: dict, module: Module, fused) -> str:
    kernel = fused(node)
    fname = module.bind(f"f_{node.outputs[-1].name}", kernel)
    args = [operand(x, names, module) for x in node.inputs]
    outs = [slots.get(v) for v in node.outputs]
    if any(s is not None for s in outs):
        items = [out_target(s) if s is not None else "None" for s in outs]
        args.append(f"out=({', '.join(items)},)")
    return f"{fname}({', '.join(args)})"
