"""The IR data structures: :class:`Value`, :class:`Node` and :class:`Graph`.

A graph is a typed SSA program. Values are defined once (as a graph input, a constant or a
node output) and have a shape whose dims are ints or :class:`~dualgraph.shapes.Sym`, and a
NumPy dtype. Nodes sit in a topologically ordered list; each calls one op of the registry
with Values and Python literals as inputs and attrs as keyword arguments. Building a node
runs the op's shape rule, so every Value is typed the moment it exists.

Nodes are immutable: passes build new graphs rather than editing old ones. Because nothing
about a node can change, graphs may share them: a pass's new graph holds the nodes it leaves
as they were (with their output Values) themselves, not copies (:meth:`Graph.copy_node`),
so a pass costs in proportion to what it changes. Subgraphs (the bodies of ``cond`` /
``while_loop`` / ``scan``) are ``Graph`` objects held in attrs; they are closed, so
everything they read flows in through their own inputs.

>>> import dualgraph
>>> g = Graph()
>>> x = g.add_input(("B", 3), "float32", name="x")
>>> (y,) = g.add_node("exp", [x], location="model.py:3")
>>> g.set_outputs([y])
>>> print(g)
graph(%x: f32[B,3]) {
  %exp: f32[B,3] = exp(%x)    # model.py:3
  return (%exp)
}
"""
from __future__ import annotations

import re
from operator import is_

import numpy as np

from .. import dtypes
from ..ops.opdef import OpDef, get
from ..shapes import ShapedType, Sym


class GraphError(ValueError):
    """A malformed graph or a bad graph-building call; names the node and what is wrong."""


_SHORT_DTYPE = {"bool": "bool", "int32": "i32", "int64": "i64", "float16": "f16",
                "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
_LITERALS = (bool, int, float, type(None))
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.]")
_DIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIM_COEF = re.compile(r"[0-9]{1,18}")
_DIM_TERM = re.compile(r"([+-])([^+-]+)")   # the signed terms of a sum: "+s0", "-1"


def type_str(shape, dtype) -> str:
    """``f32[B,512]``: the printed form of a type."""
    short = _SHORT_DTYPE.get(np.dtype(dtype).name, np.dtype(dtype).name)
    return f"{short}[{','.join(str(d) for d in shape)}]"


class UniqueNames:
    """Hands out ``base``, then ``base_1``, ``base_2``, ... skipping names already taken.

    The next suffix is remembered per base, so naming n values of one op costs O(n), not
    the O(n^2) of probing ``base_1, base_2, ...`` from the start each time (a traced
    500-step loop has thousands of ``%mul``s)."""

    def __init__(self, taken=()):
        self.used = set(taken)
        self._next: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        n = self._next.get(base, 0)
        name = base if n == 0 else f"{base}_{n}"
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self._next[base] = n + 1
        self.used.add(name)
        return name

    def take(self, names) -> bool:
        """Claim exactly ``names`` (what ``fresh`` gives for each while it is free) when none
        is taken; False, claiming nothing, otherwise. (``fresh`` needs no update: every
        suffix below its next one is taken, so it still returns the first free name.)"""
        if not self.used.isdisjoint(names):
            return False
        self.used.update(names)
        return True


def is_literal(x) -> bool:
    """A Python scalar passed straight to a kernel as a node input."""
    return type(x) in _LITERALS


def parse_dim(text: str):
    """``"784*B"`` or ``"s0 + 1"`` -> the dim it prints as (a ``Sym``, or an int when no
    name is left)."""
    signed = "+" + text.replace(" ", "")
    if signed.startswith("+-"):
        signed = signed[1:]
    terms = _DIM_TERM.findall(signed)
    if "".join(sign + term for sign, term in terms) != signed:
        terms = [("+", signed)]   # (the error below names it)
    dim = 0
    for sign, term in terms:
        part_dim = 1
        for part in term.split("*"):
            if _DIM_COEF.fullmatch(part):
                part_dim = part_dim * int(part)
            elif _DIM_NAME.fullmatch(part):
                part_dim = part_dim * Sym(part)
            else:
                raise GraphError(f"{text!r:.40} is not a dim: dims are ints, products of "
                                 "positive ints and names, like 784*B, or sums of those")
        if part_dim == 0 and "0" in term.split("*") and _DIM_NAME.search(term):
            raise GraphError(f"{text!r:.40} is not a dim: a coefficient is 0")
        dim = dim + (-part_dim if sign == "-" else part_dim)
    return dim


def as_shape(shape) -> tuple:
    """Normalise a shape: ints stay ints, ``Sym``s stay, strings are parsed (``"B"``,
    ``"784*B"``)."""
    dims = []
    for d in shape:
        if type(d) is not int:   # (the common case: nothing to convert)
            if isinstance(d, str):
                d = parse_dim(d)
            elif isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)):
                d = int(d)
            elif not isinstance(d, Sym):
                raise GraphError(f"shape {tuple(shape)} has a dim of type "
                                 f"{type(d).__name__}; dims are ints or Syms")
        if type(d) is int and d < 0:
            raise GraphError(f"shape {tuple(shape)} has a negative dim")
        dims.append(d)
    return tuple(dims)


def as_dtype(dtype) -> np.dtype:
    """Any dtype spelling -> one of dualgraph's NumPy dtypes (a GraphError otherwise)."""
    try:
        return dtypes.to_np(dtype)
    except TypeError as e:
        raise GraphError(str(e)) from None


class Value:
    """An SSA value: a name unique in its graph, a shape and a NumPy dtype.

    Values compare and hash by identity. ``producer`` is the defining Node, or None for graph
    inputs and constants. The name is printed with a ``%`` sigil, which is not part of it.
    """

    __slots__ = ("name", "shape", "dtype", "producer")

    def __init__(self, name: str, shape: tuple, dtype: np.dtype, producer=None):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.producer = producer

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def type(self) -> ShapedType:
        return ShapedType(self.shape, self.dtype)

    def __repr__(self):
        return f"%{self.name}: {type_str(self.shape, self.dtype)}"


class Node:
    """One op call: ``outputs = op(*inputs, **attrs)``, with the user's source location.

    Immutable once built; ``attrs`` is a read-only copy of the attrs given.
    """

    __slots__ = ("op", "inputs", "attrs", "outputs", "location")

    def __init__(self, op: OpDef, inputs: tuple, attrs: dict, outputs: tuple, location):
        init = object.__setattr__   # (graphs are built node by node: no loop, no tuples)
        init(self, "op", op)
        init(self, "inputs", tuple(inputs))
        init(self, "attrs", dict(attrs))
        init(self, "outputs", tuple(outputs))
        init(self, "location", location)

    def __setattr__(self, key, val):
        raise AttributeError("graph nodes are immutable; build a new graph instead")

    # (__repr__, one line of the program text, is printer.format_node: see graph/__init__.py)


def subgraphs(attrs: dict):
    """``(label, graph)`` for each Graph in ``attrs``, also inside tuples and lists.

    Labels are the attr name, with ``[i]`` appended per level of nesting (``branches[1]``).
    """
    def walk(label, val):
        if isinstance(val, Graph):
            yield label, val
        elif isinstance(val, (tuple, list)):
            for i, item in enumerate(val):
                yield from walk(f"{label}[{i}]", item)
    for key in sorted(attrs):
        yield from walk(key, attrs[key])


class HostFunction:
    """Base of an attr that is a Python function a kernel calls (``by_value``'s ``fn``: an
    imported ONNX node's rule, run on values known only as the graph runs). It prints as
    its repr and can't be serialised (``save`` names it)."""

    def __call__(self, *arrays):
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__}>"


def check_attr(name: str, val) -> object:
    """Check an attr value is one the IR can print and serialise; NumPy scalars become
    Python scalars (kernels and shape rules treat them alike)."""
    if isinstance(val, np.generic):
        val = val.item()
    if type(val) in _LITERALS or type(val) is str or val is Ellipsis:
        return val
    if isinstance(val, (Sym, Graph, HostFunction)):
        return val
    if isinstance(val, (np.dtype, dtypes.DType)) or (
            isinstance(val, type) and issubclass(val, np.generic)):
        return as_dtype(val)
    if isinstance(val, tuple):   # (subclasses such as Size become plain tuples)
        return tuple(check_attr(name, v) for v in val)
    if isinstance(val, list):
        return [check_attr(name, v) for v in val]
    if isinstance(val, slice):
        return slice(*(check_attr(name, v) for v in (val.start, val.stop, val.step)))
    raise GraphError(f"attr {name}={val!r} has type {type(val).__name__}; attrs may be "
                     "numbers, bools, None, strings, dtypes, Syms, slices, ..., graphs "
                     "and tuples/lists of these")


class Graph:
    """A typed SSA program: inputs, constants, nodes in topological order and outputs.

    Build it with :meth:`add_input`, :meth:`add_constant`, :meth:`add_node` and
    :meth:`set_outputs`; ``print(graph)`` shows it as a program, ``graph(*arrays)`` runs it
    with the reference interpreter, ``graph.save(path)`` writes it (see ``serialize``).
    """

    def __init__(self):
        self.inputs: list[Value] = []
        self.constants: dict[Value, np.ndarray] = {}   # insertion ordered
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self._names = UniqueNames()
        self._defined: set[Value] = set()
        self._rule_types: dict = {}   # the memo of infer_types for add_node

    # -- building ----------------------------------------------------------------------------
    def _fresh(self, base: str) -> str:
        """A unique name from ``base``: invalid characters become ``_``, clashes get ``_N``."""
        if not (base.isascii() and base.isidentifier()):   # (most are: the regex is slow)
            base = _NAME_CHARS.sub("_", base) or "v"
        return self._names.fresh(base)

    def _new_value(self, name, shape, dtype) -> Value:
        v = Value(self._fresh(name), as_shape(shape), as_dtype(dtype))
        self._defined.add(v)
        return v

    def add_input(self, shape, dtype, name: str | None = None) -> Value:
        """A new graph input; string dims in ``shape`` become ``Sym``s."""
        v = self._new_value(name or "x", shape, dtype)
        self.inputs.append(v)
        return v

    def rename(self, value: Value, name: str) -> None:
        """Give ``value`` a new name (made unique in this graph as ``add_input`` does).

        Rename before passes run: the graphs they make share the values they leave as
        they were."""
        value.name = self._fresh(name)

    def add_constant(self, array, name: str | None = None) -> Value:
        """A Value bound to ``array``, stored in the graph.

        The array is copied (and the copy made read-only) unless it is already read-only, so
        later writes to the caller's array do not change the graph.
        """
        arr = np.asarray(array)
        if arr.flags.writeable or not arr.flags.c_contiguous:
            arr = np.array(arr, copy=True, order="C")
            arr.flags.writeable = False
        v = self._new_value(name or "const", arr.shape, arr.dtype)
        self.constants[v] = arr
        return v

    def add_node(self, op, inputs, attrs: dict | None = None, location: str | None = None,
                 names=None) -> tuple[Value, ...]:
        """Append ``op(*inputs, **attrs)``; returns its output Values, typed by ``op.infer``.

        ``op`` is an OpDef or a registry name; ``inputs`` are Values of this graph or Python
        literals (int, float, bool, None); ``names`` optionally names the outputs.
        """
        op = get(op) if isinstance(op, str) else op
        inputs = self._check_inputs(op, inputs)
        attrs = {k: check_attr(k, v) for k, v in attrs.items()} if attrs else {}
        unknown = sorted(set(attrs) - set(op.attrs)) if attrs else ()
        if unknown:
            raise GraphError(f"{op.name} got unknown attrs {unknown}; it takes "
                             f"{list(op.attrs)}")
        types = infer_types(op, inputs, attrs, self._rule_types)
        return self._append(op, inputs, attrs, types, location, names)

    def copy_node(self, node: Node, inputs, location: str | None = None,
                  names=None) -> tuple[Value, ...]:
        """Append ``node`` (of another graph) reading ``inputs`` instead of its own.

        When ``inputs`` are its own (the same objects) and no location or names are given,
        that is ``node`` itself, if its output names are free here: being immutable, a node
        can be in two graphs, and sharing it gives the same graph a copy would (so a pass
        costs in proportion to what it changes). Otherwise a copy: when the new inputs have
        exactly the old ones' types, the old output types hold and the shape rule is not
        run again (passes copy every node of big graphs many times); failing that, this is
        ``add_node``."""
        if (location is None and names is None and len(inputs) == len(node.inputs)
                and all(map(is_, inputs, node.inputs)) and self.share_nodes((node,)) == 1):
            return node.outputs
        names = names or [v.name for v in node.outputs]
        if len(inputs) == len(node.inputs) and all(map(same_type, inputs, node.inputs)):
            return self._append(node.op, self._check_inputs(node.op, inputs), node.attrs,
                                node.outputs,   # (Values are typed: shape and dtype)
                                location if location is not None else node.location, names)
        return self.add_node(node.op, inputs, node.attrs, location or node.location, names)

    def share_input(self, value: Value) -> Value:
        """Append ``value``, an input or a constant of another graph, to this graph's inputs
        itself (as ``copy_node`` shares nodes); its name must be free here."""
        if value.producer is not None or not self._share((value,)):
            raise GraphError(f"{value!r} can't be shared as an input of this graph")
        self.inputs.append(value)
        return value

    def share_constant(self, value: Value, array: np.ndarray) -> bool:
        """Bind ``value``, a constant of another graph, to ``array`` (read-only, as
        ``add_constant`` keeps arrays) in this graph itself; False when its name is taken."""
        if value.producer is not None or array.flags.writeable or not self._share((value,)):
            return False
        self.constants[value] = array
        return True

    def share_nodes(self, nodes, start: int = 0) -> int:
        """Append ``nodes[start:]`` themselves, in order (as ``copy_node`` shares a node
        that reads its own inputs), up to the first one that reads a value this graph lacks
        or whose output names are taken here; returns where it stopped (``len(nodes)`` when
        all were appended). One loop for the many nodes a pass leaves as they are."""
        defined, take, append = self._defined, self._names.take, self.nodes.append
        for i in range(start, len(nodes)):
            node = nodes[i]
            for x in node.inputs:
                if type(x) is Value and x not in defined:
                    return i
            if not take([v.name for v in node.outputs]):
                return i
            defined.update(node.outputs)
            append(node)
        return len(nodes)

    def _share(self, values) -> bool:
        """Define ``values`` (of another graph) here too when all their names are free."""
        if not self._names.take([v.name for v in values]):
            return False
        self._defined.update(values)
        return True

    def _append(self, op, inputs, attrs, types, location, names) -> tuple[Value, ...]:
        if names:
            names = [n or op.name for n in names]
            if len(names) != len(types):
                raise GraphError(f"{op.name} has {len(types)} outputs but {len(names)} names")
        else:
            names = [op.name] * len(types)
        # (types here are normalised already: by infer_types, or those of existing values)
        fresh = self._fresh
        outs = tuple([Value(fresh(n), t.shape, t.dtype) for n, t in zip(names, types)])
        self._defined.update(outs)
        node = Node(op, inputs, attrs, outs, location)
        for v in outs:
            v.producer = node
        self.nodes.append(node)
        return outs

    def _check_inputs(self, op, inputs) -> tuple:
        """``inputs`` as a tuple, each checked by ``_check_input`` (Values of this graph and
        Python scalars, the common cases, pass straight through)."""
        defined = self._defined
        return tuple([x if type(x) is Value and x in defined or type(x) in _LITERALS
                      else self._check_input(op, x) for x in inputs])

    def _check_input(self, op, x):
        if isinstance(x, np.generic):
            x = x.item()
        if is_literal(x):
            return x
        if not isinstance(x, Value):
            raise GraphError(f"{op.name}: node inputs are Values or Python scalars, got "
                             f"{type(x).__name__}")
        if x not in self._defined:
            raise GraphError(f"{op.name}: input {x!r} is not a value of this graph "
                             "(subgraphs are closed: pass outer values in as inputs)")
        return x

    def __contains__(self, value) -> bool:
        """``value in graph``: is ``value`` defined in this graph (not in a subgraph)?"""
        return value in self._defined

    def set_outputs(self, values) -> None:
        """Set the graph's outputs (a Value or a sequence of Values of this graph)."""
        values = [values] if isinstance(values, Value) else list(values)
        for v in values:
            if v not in self._defined:
                raise GraphError(f"output {v!r} is not a value of this graph")
        self.outputs = values

    # The other modules' jobs are methods too: ``str(graph)`` (printer.format_graph),
    # ``graph.verify()``, ``graph(*arrays)`` (interpret), ``graph.to_dot()``,
    # ``graph.to_html(path)`` and ``graph.save(path)``. graph/__init__.py binds them, since
    # those modules import this one.
    def __repr__(self):
        return (f"<Graph: {len(self.inputs)} inputs, {len(self.constants)} constants, "
                f"{len(self.nodes)} nodes, {len(self.outputs)} outputs>")


def same_type(new, old) -> bool:
    """Typed things (Values, ShapedTypes) of exactly the same shape (symbols included) and
    dtype, or equal literals."""
    if hasattr(old, "dtype"):
        return (hasattr(new, "dtype") and tuple(new.shape) == tuple(old.shape)
                and (new.dtype is old.dtype or new.dtype == old.dtype))
    return type(new) is type(old) and new == old


def infer_types(op: OpDef, inputs, attrs, memo: dict | None = None) -> tuple[ShapedType, ...]:
    """Run ``op``'s shape rule; always a tuple of ShapedTypes with normalised fields.

    With ``memo`` (a dict kept by the caller), a call like an earlier one returns that
    one's types without running the rule: a rule reads only the op, its inputs' shapes and
    dtypes, literal inputs and attrs (see ``OpDef.infer``), and a traced loop calls the same
    few rules on the same types thousands of times."""
    key = _rule_call(op, inputs, attrs) if memo is not None else None
    if key is not None:
        try:
            types = memo.get(key)
        except TypeError:   # an unhashable shape (a malformed graph): no memo
            types = key = None
        if types is not None:
            return types
    result = op.infer(*inputs, **attrs)
    types = (result,) if op.num_outputs == 1 else tuple(result)
    if op.num_outputs is not None and len(types) != op.num_outputs:
        raise GraphError(f"{op.name}'s shape rule gave {len(types)} types for "
                         f"{op.num_outputs} outputs")
    types = tuple([ShapedType(as_shape(t.shape), as_dtype(t.dtype)) for t in types])
    if key is not None:
        memo[key] = types
    return types


def _rule_call(op: OpDef, inputs, attrs):
    """What a shape rule reads of a call, as a dict key: input types, and literals and attrs
    by repr (which tells ``1`` from ``1.0`` and ``-0.0`` from ``0.0``); None when an attr's
    repr could stand for other values (a subgraph, a list, a slice)."""
    if attrs and not all(_plain(v) for v in attrs.values()):
        return None
    return (op, tuple([(x.shape, x.dtype) if isinstance(x, Value) else repr(x) for x in inputs]),
            tuple([(k, repr(v)) for k, v in attrs.items()]) if attrs else ())


def _plain(val) -> bool:
    if type(val) is tuple:
        return all(_plain(v) for v in val)
    return type(val) in _LITERALS or type(val) is str or isinstance(val, (np.dtype, Sym))
