"""The layering of STYLE.md ("Layers: what may import what"), checked by parsing imports.

Every module under ``dualgraph/`` gets a layer from ``LAYERS``; no module may import a
module of a higher layer. Imports inside functions count too: a deferred import is still a
dependency, only hidden from the reader. The training library (``nn/``, ``optim/``,
``utils/``, ``amp/``, ``io.py``, ``distributed/``) sits at layer 7 but may import layers 0-3
only (plus its own package), so that it runs unchanged eagerly or captured; ``export/``
may import layers 0-6. Within a layer too, the imports form no cycle: for every pair of
modules one is the lower, and it never imports the other (``CYCLES`` names the few that
stay, each with its reason).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

import dualgraph

ROOT = pathlib.Path(dualgraph.__file__).parent

# module prefix (relative to dualgraph, dotted) -> layer; the longest matching prefix wins,
# so ``ops.opdef`` is layer 1 while the rest of ``ops`` is layer 3. "" is the package itself.
LAYERS = {
    "_helpers": 0, "kernels": 0, "dtypes": 0, "shapes": 0, "errors": 0,
    "_pytree": 0, "_version": 0, "devices": 0, "_warnings": 0, "_gc": 0,
    "ops.opdef": 1, "graph": 1,
    "tensor": 2, "dispatch": 2, "autograd.tape": 2,
    "ops": 3, "autograd": 3,
    "passes": 4,
    "codegen": 5,
    "capture": 6,
    "nn": 7, "optim": 7, "utils": 7, "amp": 7, "io": 7, "distributed": 7, "export": 7,
    "distributions": 7,
    "": 8, "__main__": 8, "jit": 8, "static": 8, "demo": 8, "onnx": 8,
    "profiler": 8, "_namespace": 8, "_aten_forms": 8, "cuda": 8, "backends": 8, "accelerator": 8,
    "compat": 8, "cli": 8, "cpu": 8, "linalg": 8, "sparse": 8, "version": 8,
    "special": 8, "func": 8,
}

# layer-7 packages reach less far down than their layer says (besides their own modules):
# the training library runs unchanged eager or captured, so it sees no capture machinery
REACH = {"nn": 3, "optim": 3, "utils": 3, "amp": 3, "io": 3, "distributed": 3, "export": 6,
         "distributions": 3}

# (importer, imported) -> why the edge is fine although it points upwards. Keep it short:
# every entry is a design decision someone should be able to defend.
ALLOWED: dict[tuple[str, str], str] = {
    ("nn.parallel", "distributed"): "DistributedDataParallel is a Module (torch's "
    "nn.parallel) that reduces gradients with dg.distributed; distributed imports no nn",
    ("nn.layers.sync_norm", "distributed"): "SyncBatchNorm is a layer (torch's nn) whose "
    "statistics are all-reduced with dg.distributed; distributed imports no nn",
    ("nn.layers.sync_norm", "distributed.functional"): "(the same: its differentiable "
    "all-reduce)",
    ("distributed.checkpoint", "io"): "a distributed checkpoint is written in dg.save's "
    "format (safetensors, no pickle); io imports no distributed",
    ("nn.utils.stateless", "func.modules"): "torch's older home of "
    "torch.func.functional_call: the same function; func imports no nn.utils",
    ("optim.swa_utils", "nn.module"): "AveragedModel is a Module (torch's optim.swa_utils); "
    "nn imports no optim",
    ("optim.swa_utils", "nn.layers.norm"): "update_bn finds BatchNorm layers by their class, "
    "as torch's does; nn imports no optim",
}

# import cycles that stay for now: the modules of one strongly connected component of the
# import graph -> why. Like ALLOWED, every entry is a decision to defend, and it names the
# whole component, so a module that joins or leaves it shows up.
CYCLES: dict[frozenset[str], str] = {
}

# outside packages dualgraph itself must never import: torch, jax and onnxruntime are test
# oracles only, and pickle would make loading a file run code
FORBIDDEN = {"torch", "jax", "jaxlib", "onnxruntime", "tensorflow", "pickle", "dill"}
# (module, forbidden package) -> why it may import it, inside a function, when installed
ORACLE_USES: dict = {}   # (dualgraph imports no peer: dg.onnx.check takes the caller's runtime)


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(name: str) -> bool:
    return (ROOT / name.replace(".", "/") / "__init__.py").exists() if name else True


def _is_module(name: str) -> bool:
    return _is_package(name) or (ROOT / (name.replace(".", "/") + ".py")).exists()


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _imports(name: str, tree: ast.AST):
    """(line, imported) for every import in ``tree``: dualgraph modules relative to the
    package (``"ops.shape"``), other packages as ``"<top>"`` with a leading ``!``."""
    here = name if _is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top, _, rest = alias.name.partition(".")
                yield node.lineno, rest if top == "dualgraph" else "!" + top
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".") if here else []
                base = base[:len(base) - (node.level - 1)]
                target = _join(*base, node.module or "")
            else:
                top, _, rest = (node.module or "").partition(".")
                if top != "dualgraph":
                    yield node.lineno, "!" + top
                    continue
                target = rest
            for alias in node.names:
                # ``from pkg import mod`` imports the module; ``from mod import name`` the module
                sub = _join(target, alias.name)
                yield node.lineno, sub if alias.name != "*" and _is_module(sub) else target


def layer_of(name: str) -> int | None:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + ".") or prefix == "":
            return LAYERS[prefix]
    return None


def _path(name: str) -> str:
    where = name.replace(".", "/")
    return f"dualgraph/{where}/__init__.py" if _is_package(name) else f"dualgraph/{where}.py"


def _top(name: str) -> str:
    return name.partition(".")[0]


def _reach(name: str) -> int:
    """The highest layer ``name`` may import."""
    return REACH.get(_top(name), layer_of(name))


MODULES = sorted((_module_name(p), p) for p in ROOT.rglob("*.py"))
EDGES = [(name, line, imported) for name, path in MODULES
         for line, imported in _imports(name, ast.parse(path.read_text(), str(path)))]


def test_every_module_has_a_layer():
    unknown = [name for name, _ in MODULES
               if name and "." not in name and name not in LAYERS]
    assert not unknown, f"new top-level modules {unknown}: give each a layer in LAYERS"


def test_no_module_imports_a_higher_layer():
    bad = []
    for name, line, imported in EDGES:
        if imported.startswith("!") or (name, imported) in ALLOWED:
            continue
        same_package = _top(imported) == _top(name) and _top(name) in REACH
        if layer_of(imported) > _reach(name) and not same_package:
            bad.append(f"{_path(name)}:{line} (layer {layer_of(name)}) imports "
                       f"{imported} (layer {layer_of(imported)})")
    assert not bad, "layering violations (STYLE.md):\n" + "\n".join(bad)


def test_graph_reads_only_the_registry_of_ops():
    bad = [f"{_path(name)}:{line} imports {imported}" for name, line, imported in EDGES
           if _top(name) == "graph" and _top(imported) == "ops" and imported != "ops.opdef"]
    assert not bad, "graph/ may read the op registry (ops.opdef), never a family:\n" \
        + "\n".join(bad)


def test_no_test_oracle_or_pickle_is_imported():
    bad = [f"{_path(name)}:{line} imports {imported[1:]}" for name, line, imported in EDGES
           if imported.startswith("!") and imported[1:] in FORBIDDEN
           and (name, imported[1:]) not in ORACLE_USES]
    assert not bad, "\n".join(bad)


def _import_graph() -> dict[str, dict[str, int]]:
    """importer -> {imported dualgraph module: line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for name, line, imported in EDGES:
        if not imported.startswith("!") and imported != name:
            graph.setdefault(name, {}).setdefault(imported, line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _cycle_through(start: str, component: set[str], graph) -> list[str]:
    """A shortest import cycle from ``start`` back to it inside ``component``."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                return paths[v] + [start]
            if w in component and w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    raise AssertionError(f"{start} is in no cycle of {sorted(component)}")


def _format_cycle(path: list[str], graph) -> str:
    return " -> ".join([path[0]] + [f"{b} ({_path(a)}:{graph[a][b]})"
                                     for a, b in zip(path, path[1:])])


def test_no_import_cycles():
    """The imports between dualgraph's modules, deferred ones included, form no cycle: a
    cycle hides which module is the lower one, and a deferred import only hides the cycle
    from the reader. Break one by moving a shared helper down, moving a composite up into
    the module that needs both sides, or passing a function in."""
    graph = _import_graph()
    bad = [f"{', '.join(sorted(c))}; one loop: "
           + _format_cycle(_cycle_through(min(c), c, graph), graph)
           for c in _cycles(graph) if frozenset(c) not in CYCLES]
    assert not bad, "modules that import each other in a cycle:\n" + "\n".join(bad)


def test_cycle_finder():
    graph = {"a": {"b": 1}, "b": {"c": 2, "d": 3}, "c": {"a": 4}, "d": {}}
    (component,) = _cycles(graph)
    assert component == {"a", "b", "c"}
    assert _cycle_through("a", component, graph) == ["a", "b", "c", "a"]
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


def test_allowed_cycles_are_still_cycles():
    current = {frozenset(c) for c in _cycles(_import_graph())}
    stale = [sorted(c) for c in CYCLES if c not in current]
    assert not stale, f"remove these from CYCLES, they are no longer cycles: {stale}"


def test_allow_list_entries_are_still_needed():
    edges = {(name, imported) for name, _, imported in EDGES}
    stale = [edge for edge in ALLOWED if edge not in edges]
    assert not stale, f"remove these from ALLOWED, the imports are gone: {stale}"


@pytest.mark.parametrize("source,expected", [
    ("from ..ops import opdef", "ops.opdef"),
    ("from ..ops.opdef import REGISTRY", "ops.opdef"),
    ("from .. import dtypes", "dtypes"),
    ("from . import ir", "graph.ir"),
    ("from .ir import Graph", "graph.ir"),
    ("import dualgraph.nn.functional as F", "nn.functional"),
    ("def f():\n    from ..capture import Compiled", "capture"),
    ("from ..capture import compile", "capture.compile"),
    ("import numpy as np", "!numpy"),
])
def test_import_resolution(source, expected):
    """The parser itself: relative imports resolve from the module's package, and ``from
    pkg import mod`` names the module rather than the package."""
    got = [imported for _, imported in _imports("graph.printer", ast.parse(source))]
    assert got == [expected]


def test_layer_lookup():
    assert [layer_of(m) for m in ("ops.opdef", "ops.shape", "autograd.tape",
                                  "autograd.engine", "graph.ir", "", "nn.layers.norm")] \
        == [1, 3, 2, 3, 1, 8, 7]
