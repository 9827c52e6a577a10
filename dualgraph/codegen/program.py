"""Small fused groups as a register program, run by a generated Numba interpreter.

A fused group on few elements but many ops (thousands of ops on a few numbers: a model
unrolled over scalars) suits neither of the other ways to run a group: a Numba kernel of
its own compiles its loop body at ~10 ms per op (most of a minute for thousands), and the
NumPy fallback pays ~0.6 us of call overhead per op. Here each member becomes one
instruction ``(opcode, out, a, b, c)`` over a register file ``R[registers, n]``: a register
holds one value of the group (n elements; a number operand or a reduction's result is a
register filled with it). The interpreter is one generated Numba function with a case per
distinct scalar expression of the group::

    for p in range(code.shape[0]):
        op = code[p, 0]
        ro, ra, rb, rc = R[code[p, 1]], R[code[p, 2]], R[code[p, 3]], R[code[p, 4]]
        if op == 0:    # add
            for j in range(n):
                ro[j] = np.float32(ra[j] + rb[j])
        elif op == 1:    # sin
            for j in range(n):
                ro[j] = np.float32(sin32(ra[j]))

Its source depends only on the set of expressions, so graphs made of the same ops share one
compile and one file in the kernel cache; the program itself is data (the kernel's
``source`` lists it, one instruction per line). Each case computes what the op's eager
kernel computes, to the bit: the scalar expressions are the fused kernels'
(``kernels.scalar_expr``). A reduction over all elements (a loss's ``sum``) is not a case:
the program stops there, the op's own kernel reduces the register, and the interpreter
goes on with the rest. Registers are reused once their value is dead.

:func:`compile_group` (at the end) picks the way for each group: a Numba kernel of its own
(``kernels.py``), else a program, else the NumPy fallback. It lives here, above both, so
that ``kernels.py`` need not import this module, which builds on its scalar expressions.
"""
from __future__ import annotations

import math

import numpy as np

from ..graph import Graph, Node, Value
from ..kernels import MIN_ELEMENTS, numba_available
from ..shapes import Sym
from .kernels import (ACCUMULATED, FASTMATH_IMPORT, FusedKernel, Lowering, Unsupported, _ident,
                      _reduced_dims, scalar_expr)

# members: below this a group's NumPy calls cost less than a compile of its interpreter
PROGRAM_MIN_OPS = 32
_OPERANDS = ("ra[j]", "rb[j]", "rc[j]")


class Program:
    """One small group as register code; calling it runs the interpreter (compiled at the
    first call, cached on disk). Same interface as ``kernels.Lowering``."""

    def __init__(self, sub: Graph, name: str, fast_math: bool = False):
        self.sub, self.name, self.compiled = sub, f"program_{name}", False
        if len(sub.nodes) < PROGRAM_MIN_OPS:
            raise Unsupported(f"{len(sub.nodes)} ops: NumPy's calls are cheaper than a "
                              "compile")
        self.dtype, self.shape = _check_values(sub)
        self.n = math.prod(self.shape)
        if self.n >= MIN_ELEMENTS:
            raise Unsupported(f"{self.n} elements: a fused loop, not a program")
        self.cases: dict[str, int] = {}       # scalar expression -> opcode
        self.case_ops: dict[str, str] = {}    # ... -> the op it came from (a comment)
        self.regs: dict[Value, int] = {v: i for i, v in enumerate(sub.inputs)}
        self.constants: dict[str, tuple[float, int]] = {}   # repr -> (value, register)
        self.instructions: list[tuple[int, int, int, int, int]] = []
        self.lines: list[str] = []
        self._exprs: dict = {}                # a kind of member -> its scalar expression
        self._assign(fast_math)
        if not self.cases:
            raise Unsupported("no elementwise ops")
        self.source = self._interpreter_source()
        self._fn = None

    # -- building ------------------------------------------------------------------------------
    def _assign(self, fast_math: bool) -> None:
        """Instructions and registers for the members, in order; a register is free again
        after the last read of its value (group outputs are kept to the end)."""
        last_use = {}
        for i, node in enumerate(self.sub.nodes):
            for x in node.inputs:
                if isinstance(x, Value):
                    last_use[x] = i
        for v in self.sub.outputs:
            last_use[v] = len(self.sub.nodes)
        free: list[int] = []
        self.n_registers = len(self.sub.inputs)
        for i, node in enumerate(self.sub.nodes):
            regs = [self._operand_register(x) for x in node.inputs]
            if len(regs) > len(_OPERANDS):
                raise Unsupported(f"{node.op.name} has {len(regs)} operands")
            if node.op.elementwise is not None:
                opcode = self._opcode(self._expr(node, fast_math), node)
            else:
                self._check_reduction(node)
                opcode = -1
            dying = {x for x in node.inputs if isinstance(x, Value) and last_use[x] == i}
            free += sorted(self.regs[x] for x in dying)   # they can take the result
            out = free.pop() if free else self._new_register()
            self.regs[node.outputs[0]] = out
            if node.outputs[0] not in last_use:   # an unused result: its register is free
                free.append(out)
            self.instructions.append((opcode, out, *(regs + [0] * (3 - len(regs)))))
            args = ", ".join(f"r{r}" for r in regs)
            self.lines.append(f"r{out} = {node.op.name}({args})    # %{node.outputs[0].name}")

    def _expr(self, node: Node, fast_math: bool) -> str:
        """The member's scalar expression over registers. Members of the same op, dtypes
        and attrs have the same one (a group of thousands of members has a dozen or so
        expressions), so it is worked out once per such kind."""
        try:
            kind = (node.op, node.outputs[0].dtype, tuple(sorted(node.attrs.items())),
                    tuple(x.dtype if isinstance(x, Value) else type(x) for x in node.inputs))
            hash(kind)
        except TypeError:   # an attr that is not hashable: no sharing
            kind = node
        expr = self._exprs.get(kind)
        if expr is None:
            names = list(_OPERANDS[:len(node.inputs)])
            expr = self._exprs[kind] = scalar_expr(node, names, fast_math)
        return expr

    def _operand_register(self, x) -> int:
        """The register of an operand; a number gets a constant register (other operands,
        such as None, make the group Unsupported)."""
        if isinstance(x, Value):
            return self.regs[x]
        if type(x) in (int, float, bool):
            key = repr(float(x))    # (0.0 and -0.0 are different constants)
            if key not in self.constants:
                self.constants[key] = (float(x), self._new_register())
            return self.constants[key][1]
        raise Unsupported(f"operand {x!r} has no register")

    def _new_register(self) -> int:
        self.n_registers += 1
        return self.n_registers - 1

    def _opcode(self, expr: str, node: Node) -> int:
        key = f"ro[j] = {expr}"
        self.case_ops.setdefault(key, node.op.name)
        return self.cases.setdefault(key, len(self.cases))

    def _check_reduction(self, node: Node) -> None:
        """A reduction of a whole register to one number (its kernel runs it), of the kinds
        a fused loop accumulates (``kernels.ACCUMULATED``)."""
        name, x = node.op.name, node.inputs[0]
        if node.op.reduction not in ACCUMULATED:
            raise Unsupported(f"{name} has no scalar expression")
        if len(_reduced_dims(node)) != x.ndim or math.prod(x.shape) != self.n:
            raise Unsupported(f"{name} over some dims only")

    def _split(self) -> list[tuple]:
        """The program in pieces: ``(first, end)`` for a run of interpreter instructions,
        ``(node, index)`` for a reduction that its kernel runs."""
        segments, first = [], 0
        for i, (node, ins) in enumerate(zip(self.sub.nodes, self.instructions)):
            if ins[0] < 0:
                if first < i:
                    segments.append((first, i))
                segments.append((node, i))
                first = i + 1
        if first < len(self.instructions):
            segments.append((first, len(self.instructions)))
        return segments

    def _interpreter_source(self) -> str:
        cases = sorted(self.cases, key=self.cases.get)
        body = []
        for opcode, key in enumerate(cases):
            body += [f"{'if' if opcode == 0 else 'elif'} op == {opcode}:    "
                     f"# {self.case_ops[key]}", "    for j in range(n):", f"        {key}"]
        ops = ", ".join(self.case_ops[k] for k in cases)
        lines = [
            '"""Generated by dualgraph: the interpreter of register programs."""',
            "import numpy as np", "",
            "from dualgraph.kernels import loop",
            FASTMATH_IMPORT, "", "",
            "@loop",
            "def run(code, R, n):",
            f'    """Runs ``code`` (rows: opcode, out, a, b, c) over registers ``R``: {ops}"""',
            "    for p in range(code.shape[0]):",
            "        op = code[p, 0]",
            "        ro, ra, rb, rc = R[code[p, 1]], R[code[p, 2]], R[code[p, 3]], "
            "R[code[p, 4]]"]
        return "\n".join(lines + ["        " + line for line in body]) + "\n"

    # -- reading -------------------------------------------------------------------------------
    def legend(self) -> str:
        """Comment lines: which registers hold the group's inputs, constants and outputs,
        and the program, one instruction per line."""
        ins = ", ".join(f"r{self.regs[u]} = %{u.name}" for u in self.sub.inputs)
        consts = ", ".join(f"r{r} = {c}" for c, (_, r) in self.constants.items())
        outs = ", ".join(f"%{v.name} = r{self.regs[v]}" for v in self.sub.outputs)
        head = [f"# {self.name}: {len(self.instructions)} instructions on "
                f"{self.n_registers} registers of {self.n} x {self.dtype.name}",
                f"# inputs: {ins}", f"# constants: {consts or '-'}", f"# outputs: {outs}"]
        return "\n".join(head + ["#   " + line for line in self.lines]) + "\n"

    # -- running -------------------------------------------------------------------------------
    def __call__(self, inputs, out):
        R = np.empty((self.n_registers, self.n), self.dtype)
        for u, a in zip(self.sub.inputs, inputs):
            R[self.regs[u]] = a.reshape(-1)      # a size-1 input fills its register
        for c, r in self.constants.values():
            R[r] = c
        fn = self._compiled()
        for first, end in self._segments:
            if isinstance(first, Node):   # a reduction: its registry kernel
                x = first.inputs[0]
                _, out_reg, in_reg = self.instructions[end][:3]
                R[out_reg] = first.op.kernel(R[in_reg].reshape(x.shape), **first.attrs)
            else:
                fn(self._code[first:end], R, self.n)
        self.compiled = True
        results = []
        for i, v in enumerate(self.sub.outputs):
            shape = tuple(v.shape)
            value = R[self.regs[v], :math.prod(shape)].reshape(shape)
            o = out[i] if out is not None else None
            if o is None:
                results.append(value.copy())
            else:
                np.copyto(o, value)
                results.append(o)
        return tuple(results)

    def _compiled(self):
        if self._fn is None:
            from .cache import load_module
            self._code = np.array(self.instructions, dtype=np.int64).reshape(-1, 5)
            self._segments = self._split()
            self._fn = load_module(self.source).run
        return self._fn


def _check_values(sub: Graph) -> tuple[np.dtype, tuple]:
    """The group's one float dtype and its full (static) shape; every value must be of
    that shape or of size 1."""
    values = list(sub.inputs) + [v for n in sub.nodes for v in n.outputs]
    if any(v in sub.inputs for v in sub.outputs):
        raise Unsupported("an output that is not computed in the group")
    dtypes = {v.dtype for v in values}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (np.float32, np.float64):
        raise Unsupported(f"dtypes {sorted(d.name for d in dtypes)}: one float dtype only")
    if any(isinstance(d, Sym) for v in values for d in v.shape):
        raise Unsupported("a symbolic shape")
    try:
        shape = np.broadcast_shapes(*(tuple(v.shape) for v in values))
    except ValueError:   # (a reduction over some dims: f32[3,5] -> f32[3])
        raise Unsupported("values whose shapes do not broadcast together") from None
    for v in values:
        if math.prod(v.shape) != 1 and tuple(v.shape) != shape:
            raise Unsupported(f"%{v.name} of shape {tuple(v.shape)} is broadcast in "
                              f"{shape}")
    return next(iter(dtypes)), shape


def compile_group(node: Node, fast_math: bool = False) -> FusedKernel:
    """The kernel for one ``fused`` node: Numba when it can, else the NumPy fallback.

    ``fast_math`` uses the vectorisable float32 ``exp32`` / ``tanh32`` (a few ulps from
    NumPy's) instead of libm's, which are exact to the last bit but run one at a time."""
    sub = node.attrs["graph"]
    name = _ident(node.outputs[-1].name)
    if not numba_available():
        return FusedKernel(sub, name, None, "Numba is not available")
    try:
        lowering = Lowering(sub, name, fast_math)
    except Unsupported as e:
        try:   # a small group of many ops: register code for a shared interpreter
            lowering = Program(sub, name, fast_math)
        except Unsupported as e2:
            return FusedKernel(sub, name, None, f"{e}; as a program: {e2}")
    return FusedKernel(sub, name, lowering, "")
