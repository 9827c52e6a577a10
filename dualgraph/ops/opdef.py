"""The op registry: every operator is one :class:`OpDef`, defined once, read by everything.

Eager dispatch runs ``kernel``; tracing runs ``infer`` to type the new node; autograd runs
``vjp``; fusion reads ``elementwise``; export reads ``onnx``; the generated op tests read the
registry itself, so a new op is tested (or the suite fails) without touching the tests.

Calling conventions, shared by kernel, infer and vjp so that each reads like the others:

- ``kernel(*inputs, **attrs)``: inputs are NumPy arrays or Python scalars; returns an array
  (or a tuple of arrays when ``num_outputs != 1``) of exactly the dtype ``infer`` promises.
- ``infer(*inputs, **attrs)``: the same call with *avals* (anything with ``.shape``,
  ``.dtype`` and ``.ndim``: arrays, graph Values, ShapedTypes) -> ``ShapedType`` or a tuple.
  It raises :class:`~dualgraph.shapes.ShapeError` naming the shapes on bad input.
- ``vjp(g, out, *inputs, **attrs)``: written with dualgraph ops on Tensors, so the same rule
  serves eager backward, traced backward and higher-order gradients. ``g`` and ``out`` are
  the output gradient and output (tuples for multi-output ops); returns one gradient or
  ``None`` per input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

REGISTRY: dict[str, "OpDef"] = {}


@dataclass(eq=False, repr=False)
class OpDef:
    name: str
    kernel: Callable
    infer: Callable
    vjp: Callable | None = None
    attrs: tuple = ()
    num_outputs: int | None = 1     # None: as many as infer returns (fused)
    elementwise: str | None = None   # scalar expression over {0}, {1}, ... for fusion
    onnx: Any = None                 # ONNX mapping (an op type name or an export function)
    saves: str = "i"                 # what the VJP reads: inputs "i", outputs "o", both, none
    differentiable_outputs: tuple | None = None  # indices; None means all floating outputs
    view: bool = False               # the output may share memory with input 0
    writes_out: bool = False         # the kernel takes out=(array or None per output) and
                                     # writes there, elementwise (an out may be an input)
    doc: str = ""

    # -- facts passes and codegen read (they match these, never an op's name) --------------

    # -- lowering: compiler-only ops and the rewrite rules that make them ------------------
    # A compiler-only op (a fused or ``*_backward`` op that exists for speed) names the
    # ordinary ops it stands for: ``decomposition(*inputs, **attrs)``, written with dualgraph
    # ops on Tensors, returns what ``kernel`` returns (the op tests compare the two).
    decomposition: Callable | None = None
    # Codegen calls ``specialise(*inputs, **attrs)`` with the node's typed Values (and
    # literals): ``(name, kernel)`` binds ``kernel(*inputs)``, fitted to those static types
    # and attrs (no checks per call), in place of ``kernel``; None keeps ``kernel``.
    specialise: Callable | None = None
    # A group op names the op it runs many nodes of in one call (``group_updates``).
    group_of: "OpDef | None" = None

    # -- ONNX: export and import ------------------------------------------------------------

    def __post_init__(self):
        self.saves_inputs = "i" in self.saves
        self.saves_outputs = "o" in self.saves

    def __repr__(self):
        return f"<op {self.name}>"


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} is registered twice; an op is defined in one place")
    REGISTRY[op.name] = op
    return op


def defop(name: str, kernel: Callable, infer: Callable, vjp: Callable | None = None,
          **options) -> OpDef:
    """Define and register an op; see the module docstring for the calling conventions."""
    return register(OpDef(name, kernel, infer, vjp, **options))


def get(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} in the registry") from None
