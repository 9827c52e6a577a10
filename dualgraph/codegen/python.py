"""Graph -> one readable Python function, compiled and registered in ``linecache``.

Each node becomes one line that calls its registry kernel (bound as a global of the
generated module: ``k_matmul = REGISTRY['matmul'].kernel``) with attrs as literal keyword
arguments and the user's source location as a comment, or the kernel its op's
``specialise`` fits to the node's static types (``linear_blas``: a 2-D product of one BLAS
dtype, without the kernel's checks). Codegen knows no op: choosing a kernel for a pattern
of nodes is a lowering rule's work (``passes/lower.py``). Elementwise ops whose scalar
expression is a single NumPy ufunc call the ufunc directly, writing into a preallocated
buffer (``out=bufs[3]``) when the buffer plan gives them one, as do the kernels of ops
flagged ``fills_out`` (``matmul_blas(x, w, out=bufs[0])``); fused groups call their
compiled kernel (``f_add_2``); control flow (``cond``, ``while_loop``, ``scan``) calls its
op's kernel with ``run=``, which runs each body's own compiled program. Intermediates are
``del``-ed after their last use, symbolic dims are read off the input shapes at the top::

    def graph_fn(x, w, bufs):
        B = x.shape[0]
        matmul = matmul_blas(x, w)    # model.py:14
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
import threading
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Callable

import numpy as np

from .._helpers import short_location
from ..graph import Graph, Node, Value
from ..graph.ir import UniqueNames
from ..kernels import tuning
from ..ops.fused import FUSED
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
    """``784*B`` -> ``784 * B``, ``s0 + 1`` -> ``(s0 + 1)``: the dim from the sizes bound at
    the top of the function."""
    terms = []
    for names, coef in dim.terms:
        parts = list(names) + ([str(abs(coef))] if abs(coef) != 1 else [])
        terms.append(("-" if coef < 0 else "+", " * ".join(parts)))
    if dim.const:
        terms.append(("-" if dim.const < 0 else "+", str(abs(dim.const))))
    text = ("-" if terms[0][0] == "-" else "") + terms[0][1]
    text += "".join(f" {sign} {part}" for sign, part in terms[1:])
    return f"({text})" if dim.is_sum else text


def bind_syms(graph: Graph, names: dict) -> list[str]:
    """Lines binding every symbolic dim name of the inputs from their shapes
    (``B = x.shape[0]``); a dim of several names is solved once the others are known."""
    return bind_dims(graph.inputs, names, set())


def bind_dims(values, names: dict, known: set) -> list[str]:
    """Lines binding the symbolic dim names of ``values`` that are not in ``known`` (which
    they join) from their shapes: the inputs' at the top, and after a node whose results'
    sizes depend on its inputs' values (``by_value``), the new dims it made."""
    lines = []
    pending = [(names[v], i, d) for v in values for i, d in enumerate(v.shape)
               if isinstance(d, Sym)]
    progress = True
    while pending and progress:
        progress = False
        for item in list(pending):
            ident, i, d = item
            free = [n for n in d.names if n not in known]
            if len(free) > 1:
                continue
            if free and d.is_sum:   # (``s0 - 1``: solved where s0 is its one free name,
                expr = _solve_sum(d, free[0], f"{ident}.shape[{i}]")   # in one term)
                if expr is None:
                    continue
            pending.remove(item)
            if not free:
                continue
            if not d.is_sum:
                rest = Sym(coef=d.coef, names=tuple(n for n in d.names if n != free[0]))
                div = sym_expr(rest) if rest.names else (str(d.coef) if d.coef != 1 else "")
                expr = f"{ident}.shape[{i}]" + (f" // ({div})" if div else "")
            lines.append(f"{free[0]} = {expr}")
            known.add(free[0])
            progress = True
    return lines


def _solve_sum(dim: Sym, name: str, size: str) -> str | None:
    """Source text of ``name``'s value where ``dim``, a sum, has size ``size``: ``s0 - 1``
    of size ``n`` gives ``(n - (-1))``; None unless ``name`` is in one term of its own,
    of coefficient 1 (the others' names bound already)."""
    if [(names, coef) for names, coef in dim.terms if name in names] != [((name,), 1)]:
        return None
    rest = dim - Sym(name)
    return f"({size} - {sym_expr(rest) if isinstance(rest, Sym) else rest})"


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
             donated: dict | None = None, run_body: Callable | None = None) -> Program:
    """Compile ``graph`` into a Python function ``name(*inputs[, bufs][, on_node])``.

    ``slots`` maps values to indices into ``bufs`` (the preallocated outputs); ``fused``
    turns a ``fused`` node into a callable ``kernel(*inputs, out=None)`` (the fused-kernel
    compiler); ``instrument`` calls ``on_node(node, outputs)`` after each node (checked
    mode); ``donated`` maps output values to the inputs whose arrays they are written into
    (see ``buffers.donations``); ``run_body(graph, *arrays)`` runs the bodies of control
    flow (default: the reference interpreter).
    """
    has_bufs = bool(slots)
    slots = dict(slots or {})
    donated = donated or {}
    syms = sorted({n for v in graph.inputs for d in v.shape if isinstance(d, Sym)
                   for n in d.names})
    made = {n for node in graph.nodes for v in node.outputs for d in v.shape
            if isinstance(d, Sym) for n in d.names} - set(syms)   # (by the nodes: bound
    known = set(syms)                                                # where they appear)
    namer = Namer(syms + sorted(made) + ["bufs", "on_node", "NODES"])
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
        module.globals["NODES"] = list(graph.nodes)
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            names[v] = namer.fresh(v.name)
        body += node_lines(node, names, slots, module, fused)
        if made and any(isinstance(d, Sym) and not known.issuperset(d.names)
                        for v in node.outputs for d in v.shape):
            body += bind_dims(node.outputs, names, known)
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
    """``exec`` ``source`` as its own module registered in ``linecache`` (named under
    ``dualgraph.`` so that its NumPy floating-point warnings are silenced as the eager
    kernels' are: dualgraph/_warnings.py)."""
    _counter[0] += 1
    filename = f"<dualgraph-generated-{_counter[0]}>"
    module_globals.setdefault("__name__", f"dualgraph.generated_{_counter[0]}")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), module_globals)
    return Program(source, module_globals[name], filename, module_globals)


def node_lines(node: Node, names: dict, slots: dict, module: Module, fused) -> list[str]:
    """The line(s) computing ``node``'s outputs."""
    comment = f"    # {_short_location(node.location)}" if node.location else ""
    outs = [names[v] for v in node.outputs]
    if node.op is FUSED and fused is not None:
        call = fused_call(node, names, slots, module, fused)
    else:
        special = node.op.specialise(*node.inputs, **node.attrs) if node.op.specialise else None
        call = ((None if special else ufunc_call(node, names, slots, module))   # (a ufunc's
                or kernel_call(node, names, module, slots, special))    # op may specialise)
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


def operand(x, names: dict, module: Module) -> str:
    return names[x] if isinstance(x, Value) else literal(x, module)


def kernel_call(node: Node, names: dict, module: Module, slots: dict | None = None,
                special=None) -> str:
    """A call of the node's kernel, or of the kernel its op's ``specialise`` fits to the
    node's static types and attrs (bound once per module, called with the inputs only;
    ``special``: what it returned, when the caller asked already)."""
    args = [operand(x, names, module) for x in node.inputs]
    outs = [(slots or {}).get(v) for v in node.outputs]
    into = []
    if (node.op.writes_out or node.op.fills_out) and any(s is not None for s in outs):
        items = [out_target(s) if s is not None else "None" for s in outs]
        # (one array for a one-output fills_out op, as NumPy's out= takes it)
        one = node.op.fills_out and node.op.num_outputs == 1
        into = [f"out={items[0]}" if one else f"out=({', '.join(items)},)"]
    if special is None and node.op.specialise:
        special = node.op.specialise(*node.inputs, **node.attrs)
    if special is not None:
        name, kernel = special
        bound = module.bind(name, one_call_at_a_time(kernel, partial(_refit, node)),
                            ("obj", id(kernel)))   # (a kernel fitted to several nodes: once)
        return f"{bound}({', '.join(args + into)})"
    args += [f"{k}={literal(v, module)}" for k, v in node.attrs.items()]
    return f"{module.kernel(node.op)}({', '.join(args + into)})"


def _refit(node: Node):
    """The kernel ``node``'s op fits to it afresh (its ``specialise``)."""
    return node.op.specialise(*node.inputs, **node.attrs)[1]


def one_call_at_a_time(kernel, refit):
    """``kernel``, what an op's ``specialise`` fitted to a node, for one call at a time: a
    fitted kernel may keep its scratch between calls (conv_packed.fitted), and two threads
    may call one compiled graph (codegen/executable.py: the second runs without the
    planned buffers). A call made while another thread's is running gets a kernel fitted
    afresh for itself (``refit()``), never the one in use. A kernel fits its thread count
    too: after ``dg.set_num_threads`` (any change of ``kernels.tuning``) the next call fits
    it again, as torch's ops follow the count set between calls."""
    busy = threading.Lock()
    fitted = [kernel, tuning.changes]

    def run(*args, **kwargs):
        if not busy.acquire(blocking=False):
            return refit()(*args, **kwargs)
        try:
            if fitted[1] != tuning.changes:
                fitted[:] = refit(), tuning.changes
            return fitted[0](*args, **kwargs)
        finally:
            busy.release()
    return run


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
    """A call of the group's kernel; a group that runs with NumPy from the start (no
    lowering: too small for a loop, or no Numba) calls its generated NumPy function itself,
    without the kernel object's wrapper (a training step of small layers has a hundred
    such groups: running statistics, optimiser updates). Such a group writes fresh memory
    only through registry kernels, so it never gets ``out=``."""
    kernel = fused(node)
    outs = [slots.get(v) for v in node.outputs]
    if kernel.lowering is None and all(s is None for s in outs):
        kernel = kernel.fallback.fn
    fname = module.bind(f"f_{node.outputs[-1].name}", kernel)
    args = [operand(x, names, module) for x in node.inputs]
    if any(s is not None for s in outs):
        items = [out_target(s) if s is not None else "None" for s in outs]
        args.append(f"out=({', '.join(items)},)")
    return f"{fname}({', '.join(args)})"
