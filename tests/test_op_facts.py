"""Passes, codegen and capture read facts about ops from their ``OpDef``, never from names.

Every fact a pass or codegen needs about an op is a field or flag of its OpDef (DESIGN.md:
"Passes match OpDef objects and flags, never name strings"), so understanding an op means
reading one record. This test parses every module of ``dualgraph/`` outside ``ops/`` and
fails on code that decides by an op's name:

- a comparison (``==``, ``!=``, ``in``, ``not in``) of an op's name (``node.op.name``,
  ``op.name``, a variable ``op_name`` / ``opname``, or a local variable the function
  assigned one to: ``name = node.op.name``) with anything;
- a table looked up by an op's name (``TABLE[node.op.name]``, ``TABLE.get(op.name)``);
- a module-level collection of op names (a set, list, tuple or dict whose strings are
  mostly names of registered ops).

Uses of a name that decide nothing (messages, printing, serialisation, kernel names) are
fine, and so is the registry's own lookup by name (``REGISTRY[name]``: serialisation and
import turn names into OpDefs there). A collection of the functions of the ``elementwise=``
template language (``where``, ``maximum``, ...) is that language's vocabulary, not a table
of ops, so one whose strings are all template functions is fine too.

Run as a script with a path to scan another tree: ``python tests/test_op_facts.py DIR``.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import re
import sys

import numpy as np
import pytest

import dualgraph
from dualgraph.ops.opdef import REGISTRY, Reduction

ROOT = pathlib.Path(dualgraph.__file__).parent

# Module-level collections whose strings happen to be op names but name something else.
NOT_OP_NAMES = {
    ("nn/functional_core.py", "_REDUCTIONS"),   # the values of PyTorch's ``reduction=`` argument
    ("nn/rnn.py", "_CELL_MODES"),          # ... and of ``nn.RNN``'s ``nonlinearity=``
    ("export/onnx_import_ops.py", "_REDUCERS"),   # ONNX's Reduce* kinds (ReduceMax: "max")
    ("kernels/epilogue.py", "ACTIVATIONS"),   # the epilogue ops' ``act=`` values (a kind
    #                                          of activation: "clamp", "hardswish", ...)
}

_NAME_VARIABLES = {"op_name", "opname"}
_TEMPLATE_CALL = re.compile(r"(\w+)\(")


def _op_names() -> set[str]:
    return set(REGISTRY)


def _template_functions() -> set[str]:
    """The function names the ``elementwise=`` templates use."""
    return {name for op in REGISTRY.values() if op.elementwise
            for name in _TEMPLATE_CALL.findall(op.elementwise)}


def _is_op_name(node: ast.AST, aliases=frozenset()) -> bool:
    """``<x>.op.name``, ``op.name`` or a variable holding an op's name (``aliases``: the
    local variables the enclosing function assigned one to)."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        v = node.value
        return (isinstance(v, ast.Attribute) and v.attr == "op"
                or isinstance(v, ast.Name) and v.id == "op")
    return isinstance(node, ast.Name) and (node.id in _NAME_VARIABLES or node.id in aliases)


def _aliases(tree: ast.AST) -> dict[int, frozenset]:
    """``id(node)`` -> the variables holding an op's name in the innermost function around
    ``node`` (``name = node.op.name``, ``name, x = node.op.name, ...``)."""
    scopes: dict[int, frozenset] = {}
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.Lambda,
                                                             ast.AsyncFunctionDef))]
    for f in functions:   # (outer functions first: an inner one overrides their scope)
        names = set()
        for a in ast.walk(f):
            if not isinstance(a, ast.Assign):
                continue
            for t in a.targets:
                pairs = ([(t, a.value)] if not isinstance(t, ast.Tuple) else
                         zip(t.elts, a.value.elts) if isinstance(a.value, ast.Tuple) else [])
                names |= {x.id for x, v in pairs if isinstance(x, ast.Name) and _is_op_name(v)}
        for n in ast.walk(f):
            scopes[id(n)] = frozenset(names)
    return scopes


def _is_registry(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "REGISTRY"


def _strings(node: ast.AST) -> list[str] | None:
    """The strings of a constant collection (a dict's keys), or None if it is not one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
            "frozenset", "set", "tuple", "list", "dict") and len(node.args) == 1:
        return _strings(node.args[0])
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        items = node.elts
    elif isinstance(node, ast.Dict):
        items = [k for k in node.keys if k is not None]
    else:
        return None
    return [x.value for x in items if isinstance(x, ast.Constant) and isinstance(x.value, str)]


def violations(root: pathlib.Path) -> list[str]:
    """``"file:line: what"`` for every place outside ``ops/`` that decides by an op's name."""
    names, vocabulary = _op_names(), _template_functions()
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("ops/"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        scopes = _aliases(tree)
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                aliases = scopes.get(id(node), frozenset())
                if any(isinstance(o, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                       for o in node.ops) and any(_is_op_name(s, aliases) for s in sides):
                    found.append(f"{where}: compares an op's name: {ast.unparse(node)}")
            elif isinstance(node, ast.Subscript):
                if (_is_op_name(node.slice, scopes.get(id(node), ()))
                        and not _is_registry(node.value)):
                    found.append(f"{where}: a table looked up by an op's name: "
                                 f"{ast.unparse(node)}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if (node.func.attr in ("get", "setdefault", "pop") and node.args
                        and _is_op_name(node.args[0], scopes.get(id(node), ()))
                        and not _is_registry(node.func.value)):
                    found.append(f"{where}: a table looked up by an op's name: "
                                 f"{ast.unparse(node)}")
        for stmt in tree.body:
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            label = ", ".join(ast.unparse(t) for t in targets)
            strings = _strings(stmt.value)
            if not strings or label == "__all__" or (rel, label) in NOT_OP_NAMES:
                continue
            ops = [s for s in strings if s in names]
            if 2 * len(ops) > len(strings) and not set(strings) <= vocabulary:
                found.append(f"{rel}:{stmt.lineno}: a table of op names: {label} "
                             f"({', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''})")
    return sorted(found, key=lambda v: (v.split(":")[0], int(v.split(":")[1])))


def test_no_op_name_decisions_outside_ops():
    found = violations(ROOT)
    assert not found, ("decide by OpDef objects or flags, not op names:\n  "
                       + "\n  ".join(found))


def test_the_check_finds_name_decisions(tmp_path):
    """The checker itself: each kind of name decision is found, and the allowed uses are
    not."""
    (tmp_path / "bad.py").write_text(
        'COMMUTATIVE = frozenset({"add", "mul"})\n'
        'def f(node, op, table):\n'
        '    a = node.op.name == "relu"\n'
        '    b = op.name in COMMUTATIVE\n'
        '    c = table[node.op.name]\n'
        '    name, d = node.op.name, 1\n'
        '    e = name == "linear"\n'
        '    return table.get(op.name)\n')
    (tmp_path / "good.py").write_text(
        '_EXACT = {"maximum", "where"}\n'
        '__all__ = ["add", "mul"]\n'
        'def g(node, REGISTRY):\n'
        '    print(f"{node.op.name} failed")\n'
        '    return REGISTRY[node.op.name], node.op is REGISTRY.get(node.op.name)\n')
    found = violations(tmp_path)
    assert [v.split(":")[:2] for v in found] == [
        ["bad.py", "1"], ["bad.py", "3"], ["bad.py", "4"], ["bad.py", "5"], ["bad.py", "7"],
        ["bad.py", "8"]]


# -- the facts themselves, checked against each op's kernel ----------------------------------
def _ops(fact: str) -> list:
    return [op for op in REGISTRY.values() if getattr(op, fact)]


@pytest.mark.parametrize("op", _ops("commutative"), ids=lambda op: op.name)
def test_a_commutative_op_ignores_the_order_of_its_inputs(op):
    rng = np.random.default_rng(0)
    for a, b in ((rng.standard_normal((3, 4)), rng.standard_normal((1, 4))),
                 (rng.integers(-8, 8, (3, 4)), rng.integers(-8, 8, (4,)))):
        try:
            want = op.kernel(a, b)
        except TypeError:   # (bitwise ops take integers only)
            continue
        np.testing.assert_array_equal(op.kernel(b, a), want)
        assert op.kernel(b, a).dtype == want.dtype


_COMBINE = {Reduction.SUM: np.sum, Reduction.MEAN: np.mean, Reduction.PROD: np.prod,
            Reduction.MAX: np.max, Reduction.MIN: np.min, Reduction.ALL: np.all,
            Reduction.ANY: np.any}


@pytest.mark.parametrize("op", _ops("reduction"), ids=lambda op: op.name)
def test_a_reduction_combines_as_it_says(op):
    x = np.random.default_rng(0).standard_normal((3, 4, 5)) > 0.3 if op.reduction in (
        Reduction.ALL, Reduction.ANY) else np.random.default_rng(0).standard_normal((3, 4, 5))
    assert op.attrs[:2] == ("dims", "keepdim")
    for dims, keepdim in (((1,), False), ((0, 2), True), (None, False)):
        got = op.kernel(x, dims=dims, keepdim=keepdim)
        np.testing.assert_allclose(got, _COMBINE[op.reduction](x, axis=dims, keepdims=keepdim),
                                   rtol=1e-12)


@pytest.mark.parametrize("op", _ops("shape_only"), ids=lambda op: op.name)
def test_a_shape_only_op_reads_only_its_input_type(op):
    attrs = {"fill_value": 2.5, "dtype": np.dtype(np.float32)}
    x = np.random.default_rng(0).standard_normal((2, 3))
    np.testing.assert_array_equal(op.kernel(x, **attrs), op.kernel(np.zeros_like(x), **attrs))


@pytest.mark.parametrize("op", _ops("scalar32"), ids=lambda op: op.name)
def test_a_shared_scalar_function_exists_and_is_the_templates_one(op):
    fastmath = pytest.importorskip("dualgraph.kernels.fastmath")   # (Numba's)
    from dualgraph.codegen.kernels import FASTMATH_IMPORT
    assert len(_TEMPLATE_CALL.findall(op.elementwise)) == 1   # (the one it stands for)
    assert callable(getattr(fastmath, op.scalar32))
    assert op.scalar32 in re.findall(r"\w+", FASTMATH_IMPORT)   # generated kernels see it


@pytest.mark.parametrize("op", _ops("row_epilogue"), ids=lambda op: op.name)
def test_a_row_epilogue_names_its_row_function_and_stats(op):
    epilogue = op.row_epilogue
    assert callable(getattr(importlib.import_module(epilogue.module), epilogue.function))
    assert len(epilogue.stats) == op.num_outputs - 1
    assert set(epilogue.attrs) <= set(op.attrs)


@pytest.mark.parametrize("op", _ops("bodies"), ids=lambda op: op.name)
def test_an_op_with_bodies_has_graph_attrs_and_takes_run(op):
    assert "run" in inspect.signature(op.kernel).parameters
    assert any(a.endswith("graph") for a in op.attrs)


if __name__ == "__main__":
    for line in violations(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT):
        print(line)
