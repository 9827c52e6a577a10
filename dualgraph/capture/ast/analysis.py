"""Which names a piece of code assigns and reads: the liveness that decides what a converted
``if`` or loop passes in and returns.

Only what control-flow conversion needs: names are plain local variables; nested functions,
lambdas and classes are their own scopes (their reads count, as free variables; their
assignments don't, except the name a ``def`` binds).
"""
from __future__ import annotations

import ast

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _walk_scope(node):
    """The nodes of ``node`` in its own scope (not inside nested functions or classes)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, _SCOPES):   # binds its name; its decorators run here
            todo.extend(getattr(n, "decorator_list", []))
            continue
        todo.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, _COMPREHENSIONS))


def assigned(stmts) -> set:
    """Names the statements bind in this scope, or change in place: ``x[i] = v`` and
    ``x.add_(v)`` (torch's trailing underscore) give ``x`` a new value, which a traced
    branch or loop must return like any other (its body can't write into an outer tensor).
    """
    out = set()
    for stmt in stmts:
        for n in _walk_scope(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                out.add(n.id)
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del)):
                out |= _root_name(n.value)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                    _is_inplace_method(n.func.attr)):
                out |= _root_name(n.func.value) - {"_jst"}   # (not the runtime's not_)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, ast.alias):
                out.add((n.asname or n.name).split(".")[0])
            elif isinstance(n, ast.ExceptHandler) and n.name:
                out.add(n.name)
    return out


def _root_name(node) -> set:
    """``{x}`` for ``x`` or ``x[i][j]``, else nothing (attributes are Python state)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return {node.id} if isinstance(node, ast.Name) else set()


def _is_inplace_method(name: str) -> bool:
    return name.endswith("_") and not name.startswith("_")


def reads(node) -> set:
    """Names ``node`` loads, nested scopes included (their free variables)."""
    nodes = node if isinstance(node, list) else [node]
    out = set()
    for root in nodes:
        for n in ast.walk(root):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                out.add(n.id)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                out.add(n.target.id)
    return out


def definite(stmts) -> set:
    """Names surely bound after the statements run (loops may run zero times)."""
    out = set()
    for s in stmts:
        if isinstance(s, ast.If):
            out |= definite(s.body) & definite(s.orelse)
        elif isinstance(s, (ast.While, ast.For, ast.Try)):
            continue
        else:
            out |= assigned([s])
    return out


def exposed(stmts, bound=frozenset()) -> set:
    """Names the statements may read before binding them (upward-exposed reads)."""
    out, bound = set(), set(bound)
    for s in stmts:
        if isinstance(s, ast.If):
            out |= reads(s.test) - bound
            out |= exposed(s.body, bound) | exposed(s.orelse, bound)
            bound |= definite(s.body) & definite(s.orelse)
        elif isinstance(s, ast.While):
            out |= reads(s.test) - bound
            out |= exposed(s.body, bound) | exposed(s.orelse, bound)
        elif isinstance(s, ast.For):
            out |= reads(s.iter) - bound
            out |= exposed(s.body, bound | assigned([ast.Assign([s.target], s.iter)]))
            out |= exposed(s.orelse, bound)
        else:
            out |= reads(s) - bound
            bound |= assigned([s])
    return out


def live_before(stmt, live_after: set) -> set:
    """Names live before ``stmt`` given those live after it."""
    return exposed([stmt]) | (live_after - definite([stmt]))
