"""Writes docs/reference/ops.md, the table of every op in the registry, from the registry.

    python tools/gen_ops_doc.py           # rewrite docs/reference/ops.md
    python tools/gen_ops_doc.py --check   # exit 1 if the committed page is out of date

Each row reads one ``OpDef`` (``dualgraph/ops/opdef.py``): its inputs (the parameters of its
shape rule ``infer`` that are not attributes) and attributes, its outputs, whether it has a
VJP, its ONNX export (the op type, or the ONNX op types its export function names) and the
ONNX op types it imports, and its flags. The dtypes are those its rows in the op test table
(``tests/optable/``) check against PyTorch, so the page says what is tested, not hoped for.
``tests/test_docs_site.py`` fails when the page differs from what this script writes.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "ops.md"
DTYPE_ORDER = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int8",
               "uint8", "bool"]

HEADER = """\
# Ops (generated from the registry)

<!-- Written by `python tools/gen_ops_doc.py`; do not edit by hand. -->

Every operator dualgraph runs is one `OpDef` record in the registry
(`dualgraph.ops.REGISTRY`, `dualgraph/ops/opdef.py`): its kernel, shape and dtype rule,
VJP, fusion expression, flags and ONNX rules, read by eager execution, tracing, autograd,
the passes, codegen and export alike ([Architecture](../architecture.md)). This page is
written from the registry by `python tools/gen_ops_doc.py`; a test fails when it is out
of date.

The functions and methods you call (`dg.exp`, `x.sum(1)`, `F.softmax`, `nn.Linear`, ...)
are thin wrappers over these ops; many public functions are composites of several ops
(`dg.sigmoid` is one op, `F.silu(x)` is `x * sigmoid(x)`), so they get gradients,
tracing, fusion and ONNX export from the ops they use. Columns:

- **signature**: the op's inputs, then `;` and its attributes (static values stored in the
  graph node); `*xs` takes any number of inputs. Outputs: how many (`n`: as many as the
  op's shape rule returns).
- **tested dtypes**: the input dtypes its rows in the op test table (`tests/optable/`)
  check against PyTorch. Other dtypes often work too (most ops take every float dtype, and
  integers where PyTorch does); these are the ones the tests compare.
- **grad**: whether the op has a VJP (written with dualgraph ops, so gradients of gradients
  work too).
- **ONNX export**: the ONNX op type, or the op types its export function builds; `-`: no
  ONNX form (the export names the node and stops). **ONNX import**: the ONNX op types that
  load as this op.
- **facts**: the flags the passes and codegen read (`elementwise`: fusable, with a scalar
  expression; `view`: the output may share the input's memory; `bodies`: runs subgraphs;
  `fills out`: the kernel may write its results into planned buffers, never returns a view).

Compiler-only ops are made by autodiff or by a lowering pass for speed, never called by
users; each names the ordinary ops it stands for (its decomposition), and the op tests
check it against them.
"""


def _load_registry():
    sys.path.insert(0, str(ROOT))
    import dualgraph  # (registers the op families)
    import dualgraph.optim  # noqa: F401  (the optimiser update ops)
    from dualgraph.ops import REGISTRY
    return REGISTRY


def _cases() -> dict:
    """Op name -> the rows of the op test table that name it."""
    sys.path.insert(0, str(ROOT / "tests"))
    import optable
    rows: dict = {}
    for info in pkgutil.iter_modules(optable.__path__):
        for case in importlib.import_module(f"optable.{info.name}").CASES:
            rows.setdefault(case.op, []).append(case)
    return rows


def _input_names(op) -> list:
    """The shape rule's parameters that are inputs (not attrs); ``*xs`` for any number."""
    inputs = []
    for p in inspect.signature(op.infer).parameters.values():
        if p.name in op.attrs or p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            inputs.append(f"*{p.name}")
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            inputs.append(p.name)
    return inputs


def signature(op) -> str:
    """``(x, w, *bias; stride, padding)`` from the shape rule's parameters and the attrs."""
    text = ", ".join(_input_names(op))
    if op.attrs:
        text += "; " + ", ".join(op.attrs)
    outputs = "n" if op.num_outputs is None else str(op.num_outputs)
    return f"`({text})` -> {outputs}"


def tested_dtypes(cases) -> str:
    from optable import In
    seen = set()
    for case in cases:
        for dtype in case.dtypes:
            rng = np.random.default_rng(0)
            for spec in case.inputs:
                if isinstance(spec, In):
                    seen.add(np.asarray(spec.make(rng, dtype)).dtype.name)
    order = {name: i for i, name in enumerate(DTYPE_ORDER)}
    return ", ".join(sorted(seen, key=lambda name: (order.get(name, 99), name))) or "-"


def _onnx_types_named(fn) -> list:
    """The ONNX op types an export function names: its string constants and the strings it
    closes over (``_onnx_reduce("ReduceSum")``), kept where ONNX has such an op."""
    import onnx.defs
    strings = set(re.findall(r"\"([A-Z][A-Za-z]+)\"", inspect.getsource(fn)))
    closure = inspect.getclosurevars(fn)
    strings |= {v for v in closure.nonlocals.values() if isinstance(v, str)}
    return sorted(s for s in strings if onnx.defs.has(s))


def onnx_export(op) -> str:
    if op.onnx is None:
        return "-"
    if isinstance(op.onnx, str):
        return op.onnx
    return ", ".join(_onnx_types_named(op.onnx)) or "(function)"


def onnx_import(op) -> str:
    types = op.onnx_import
    if types is None:
        types = {op.onnx: None} if isinstance(op.onnx, str) else {}
    return ", ".join(sorted(types)) or "-"


def facts(op) -> str:
    names = [name for name, on in [
        ("elementwise", op.elementwise is not None), ("view", op.view),
        ("commutative", op.commutative), ("shape-only", op.shape_only),
        ("bodies", op.bodies), ("writes out", op.writes_out),
        ("fills out", op.fills_out)] if on]
    if op.reduction is not None:
        names.append(f"reduction ({op.reduction.value})")
    if op.decomposition is not None and not op.compiler_only:
        names.append("has a decomposition")
    return ", ".join(names) or "-"


def description(op) -> str:
    """The op's own doc, else the first line of the public function of its name."""
    import dualgraph as dg
    text = op.doc
    for namespace in (dg, dg.nn.functional, dg.Tensor):
        public = getattr(namespace, op.name, None)
        if not text and callable(public):
            text = getattr(public, "__doc__", None) or ""
    if not text and op.elementwise:     # the scalar expression fusion computes
        names = [n for n in _input_names(op) if not n.startswith("*")]
        expr = op.elementwise.format(*names, **{a: a for a in op.attrs})
        text = f"elementwise ``{expr}``"
    text = " ".join(text.split()).replace("``", "`")
    first = re.split(r"(?<=[.;:])\s", text, maxsplit=1)[0]
    return first.replace("|", "\\|").rstrip(":;")


def table(ops, rows) -> list:
    lines = ["| op | signature | tested dtypes | grad | ONNX export | ONNX import | facts "
             "| what |",
             "|---|---|---|---|---|---|---|---|"]
    for op in ops:
        lines.append(" | ".join([
            f"| `{op.name}`", signature(op), tested_dtypes(rows.get(op.name, [])),
            "yes" if op.vjp is not None else "no", onnx_export(op), onnx_import(op),
            facts(op), description(op) + " |"]))
    return lines


def render() -> str:
    registry = _load_registry()
    rows = _cases()
    ops = sorted(registry.values(), key=lambda op: op.name)
    ordinary = [op for op in ops if not op.compiler_only]
    compiler = [op for op in ops if op.compiler_only]
    lines = [HEADER, f"## Ops ({len(ordinary)})", ""] + table(ordinary, rows)
    lines += ["", f"## Compiler-only ops ({len(compiler)})", ""] + table(compiler, rows)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/reference/ops.md is not what this writes")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = PAGE.read_text() if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python tools/gen_ops_doc.py",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    tmp = PAGE.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(PAGE)
    print(f"wrote {PAGE.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
