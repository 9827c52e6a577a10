"""The AST transformers of ``to_static``, one per construct, applied in this order:

1. :class:`ReturnTransformer` - an early ``return v`` becomes ``_jst_ret_val = v`` plus a
   flag (and a ``break`` inside a loop); what follows runs under ``if not flag``; the
   returned value passes through ``_jst.result``, which rejects unbound variables.
2. :class:`RangeTransformer` - ``for i in range(...)`` becomes a ``while`` over a counter,
   so a tensor bound gives one ``while_loop``.
3. :class:`JumpTransformer` - ``break`` / ``continue`` become flags: the rest of the body
   runs under ``if not flag`` and a ``while`` also tests the break flag.
4. :class:`ConditionTransformer` - ``and`` / ``or`` / ``not`` in conditions become
   ``_jst.and_`` / ``or_`` / ``not_``, which work on traced tensors.
5. :class:`IfTransformer` and :class:`LoopTransformer`, driven by :class:`BlockConverter`
   (which knows the variables live after each statement): each ``if`` / ``while`` / ``for``
   becomes nested functions over the variables it may change and a ``_jst.convert_*``
   call (see runtime.py), which stays Python unless the condition is a traced tensor.

Every new node takes the line of the construct it replaces, so the converted function
reports the user's own lines.
"""
from __future__ import annotations

import ast
import itertools

from .analysis import assigned, definite, exposed, live_before, reads

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.While, ast.For)


# -- building nodes -------------------------------------------------------------------------
def load(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def store(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Store())


def jst(fn: str, *args) -> ast.Call:
    """``_jst.fn(*args)``."""
    return ast.Call(func=ast.Attribute(value=load("_jst"), attr=fn, ctx=ast.Load()),
                    args=list(args), keywords=[])


def assign(names, value) -> ast.Assign:
    target = store(names) if isinstance(names, str) else ast.Tuple(
        elts=[store(n) for n in names], ctx=ast.Store())
    return ast.Assign(targets=[target], value=value)


def const(value) -> ast.Constant:
    return ast.Constant(value=value)


def names_tuple(names, ctx=ast.Load) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Name(id=n, ctx=ctx()) for n in names], ctx=ctx())


def thunk(expr) -> ast.Lambda:
    return ast.Lambda(args=_arguments([]), body=expr)


def _arguments(names) -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in names], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def function(name: str, params, body) -> ast.FunctionDef:
    return ast.FunctionDef(name=name, args=_arguments(params), body=body, decorator_list=[],
                           returns=None, type_comment=None)


def located(node, nodes: list) -> list:
    """``nodes`` (and their children) placed at ``node``'s line where they have none."""
    for n in nodes:
        for sub in ast.walk(n):
            if "lineno" in sub._attributes and not hasattr(sub, "lineno"):
                # one line, the construct's first: the graph and tracebacks show that line
                sub.lineno = sub.end_lineno = node.lineno
                sub.col_offset = sub.end_col_offset = node.col_offset
    return nodes


def scope_nodes(stmts, stop=_SCOPES):
    """Nodes of ``stmts`` not inside ``stop`` nodes (nested scopes by default)."""
    todo = list(stmts)
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, stop):
            todo.extend(ast.iter_child_nodes(n))


def blocks_of(stmt):
    """The statement lists inside a compound statement (names of the fields)."""
    return [f for f in ("body", "orelse", "finalbody") if isinstance(getattr(stmt, f, None),
                                                                      list)]


def map_blocks(stmt, fn):
    """Apply ``fn`` to each statement list of ``stmt`` (and of a try's handlers)."""
    for field in blocks_of(stmt):
        setattr(stmt, field, fn(getattr(stmt, field)))
    for handler in getattr(stmt, "handlers", []):
        handler.body = fn(handler.body)


class Names:
    """Fresh names for one conversion: ``_jst_true_3``, ``_jst_brk_4``, ..."""

    def __init__(self):
        self._ids = itertools.count()

    def new(self, *kinds):
        i = next(self._ids)
        return [f"_jst_{k}_{i}" for k in kinds]


# -- 1. early return ------------------------------------------------------------------------
class ReturnTransformer:
    """``return v`` anywhere but at the end becomes ``_jst_ret_val = v; _jst_ret_flag = True``
    (plus ``break`` in a loop); the statements after it run under ``if not flag`` and the
    function ends with ``return _jst_ret_val``. Every ``return v`` left becomes ``return
    _jst.result(v)``: a variable a Python ``if`` left unbound raises there, as in Python,
    instead of leaving the function as a placeholder."""

    FLAG, VALUE = "_jst_ret_flag", "_jst_ret_val"

    def apply(self, fdef) -> None:
        returns = [n for n in scope_nodes(fdef.body) if isinstance(n, ast.Return)]
        if returns and returns != [fdef.body[-1]]:
            body = self._block(fdef.body, in_loop=False)
            fdef.body = located(fdef, [assign(self.FLAG, const(False)),
                                       assign(self.VALUE, const(None))]) + body + located(
                fdef.body[-1], [ast.Return(value=load(self.VALUE))])
        for n in scope_nodes(fdef.body):
            if isinstance(n, ast.Return) and n.value is not None:
                n.value = ast.copy_location(jst("result", n.value), n.value)

    def _block(self, stmts, in_loop: bool) -> list:
        out = []
        for i, s in enumerate(stmts):
            if isinstance(s, ast.Return):
                out += located(s, [assign(self.VALUE, s.value or const(None)),
                                   assign(self.FLAG, const(True))]
                               + ([ast.Break()] if in_loop else []))
                return out   # anything after a return is dead
            may_return = any(isinstance(n, ast.Return) for n in scope_nodes([s]))
            if may_return:
                loop = isinstance(s, _LOOPS)
                map_blocks(s, lambda b, inner=in_loop or loop: self._block(b, inner))
            out.append(s)
            if may_return and in_loop and isinstance(s, _LOOPS):
                out += located(s, [ast.If(test=load(self.FLAG), body=[ast.Break()],
                                          orelse=[])])
            elif may_return and not in_loop and i + 1 < len(stmts):
                rest = self._block(stmts[i + 1:], in_loop)
                out += located(s, [ast.If(test=ast.UnaryOp(ast.Not(), load(self.FLAG)),
                                          body=rest, orelse=[])])
                return out
        return out


# -- 2. for over range -> while ---------------------------------------------------------------
class RangeTransformer(ast.NodeTransformer):
    """``for i in range(a, b, s): body`` -> a counter and ``while``, so a tensor bound makes
    one ``while_loop`` (a Python bound stays a Python loop)."""

    def __init__(self, names: Names):
        self.names = names

    def visit_For(self, node):
        self.generic_visit(node)
        it = node.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and it.func.id == "range" and not it.keywords and 1 <= len(it.args) <= 3):
            return node
        start, stop, step, i = self.names.new("start", "stop", "step", "i")
        body = [ast.Assign(targets=[node.target], value=load(i)),
                assign(i, ast.BinOp(load(i), ast.Add(), load(step)))]
        loop = ast.While(test=jst("range_cond", load(i), load(stop), load(step)),
                         body=located(node, body) + node.body, orelse=node.orelse)
        return located(node, [assign([start, stop, step], jst("range_args", *it.args)),
                              assign(i, load(start)), loop])


# -- 3. break and continue -> flags -------------------------------------------------------------
class JumpTransformer:
    """``break`` / ``continue`` set a flag; the rest of the body runs under ``if not flag``;
    a ``while`` tests ``not break_flag`` first and a ``for`` body runs under it; a loop's
    ``else`` runs when the break flag is unset."""

    def __init__(self, names: Names):
        self.names = names

    def apply(self, stmts) -> list:
        out = []
        for s in stmts:
            if not isinstance(s, _SCOPES):
                map_blocks(s, self.apply)   # inner loops first
            out += self._loop(s) if isinstance(s, _LOOPS) else [s]
        return out

    def _loop(self, loop) -> list:
        mine = [n for n in scope_nodes(loop.body, _SCOPES + _LOOPS)
                if isinstance(n, (ast.Break, ast.Continue))]
        has_break = any(isinstance(n, ast.Break) for n in mine)
        if not mine:
            return [loop]
        brk, cont = self.names.new("brk", "cont")
        flags = {ast.Break: brk, ast.Continue: cont}
        body = self._block(loop.body, flags)
        if any(isinstance(n, ast.Continue) for n in mine):
            body = located(loop, [assign(cont, const(False))]) + body
        pre, post = [], []
        if has_break:
            pre = located(loop, [assign(brk, const(False))])
            if isinstance(loop, ast.While):
                loop.test = jst("and_", thunk(jst("not_", load(brk))), thunk(loop.test))
            else:
                body = located(loop, [ast.If(test=jst("none_of", load(brk)), body=body,
                                             orelse=[])])
                loop.jst_break = brk
            if loop.orelse:
                post = located(loop, [ast.If(test=jst("none_of", load(brk)),
                                             body=loop.orelse, orelse=[])])
                loop.orelse = []
        loop.body = body
        return pre + [loop] + post

    def _block(self, stmts, flags: dict) -> list:
        out = []
        for i, s in enumerate(stmts):
            if isinstance(s, (ast.Break, ast.Continue)):
                out += located(s, [assign(flags[type(s)], const(True))])
                return out
            jumps = {flags[type(n)] for n in scope_nodes([s], _SCOPES + _LOOPS)
                     if isinstance(n, (ast.Break, ast.Continue))}
            if not isinstance(s, _LOOPS):
                map_blocks(s, lambda b: self._block(b, flags))
            out.append(s)
            if jumps and i + 1 < len(stmts):
                test = jst("none_of", *(load(f) for f in sorted(jumps)))
                out += located(s, [ast.If(test=test, body=self._block(stmts[i + 1:], flags),
                                          orelse=[])])
                return out
        return out


# -- 4. boolean operators in conditions -----------------------------------------------------
class ConditionTransformer(ast.NodeTransformer):
    """``a and b`` / ``a or b`` / ``not a`` in ``if`` and ``while`` conditions become
    ``_jst.and_(lambda: a, lambda: b)`` / ``or_`` / ``not_``: Python's short circuit for
    Python values, logical ops for traced tensors."""

    def visit_If(self, node):
        self.generic_visit(node)
        node.test = self.convert(node.test)
        return node

    visit_While = visit_If

    def convert(self, expr):
        if isinstance(expr, ast.BoolOp):
            fn = "and_" if isinstance(expr.op, ast.And) else "or_"
            return ast.copy_location(jst(fn, *(thunk(self.convert(v)) for v in expr.values)),
                                     expr)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return ast.copy_location(jst("not_", self.convert(expr.operand)), expr)
        return expr


# -- 5. if / while / for -> convert_* calls ---------------------------------------------------
class BlockConverter:
    """Walks statement lists knowing which variables are live after each statement, and
    hands each ``if`` / ``while`` / ``for`` to its transformer."""

    def __init__(self, names: Names, filename: str):
        self.names = names
        self.filename = filename
        self.ifs = IfTransformer(self)
        self.loops = LoopTransformer(self)

    def where(self, node) -> str:
        return f"{self.filename}:{node.lineno}"

    def function(self, fdef) -> None:
        a = fdef.args
        params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        params |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        fdef.body = self.block(fdef.body, set(), params)

    def block(self, stmts, live_out: set, defined: set) -> list:
        after, live = [], set(live_out)
        for s in reversed(stmts):
            after.append(live)
            live = live_before(s, live)
        out, defined = [], set(defined)
        for s, live_after in zip(stmts, reversed(after)):
            out += self.statement(s, live_after, defined)
            defined |= definite([s])
        return out

    def statement(self, s, live_after: set, defined: set) -> list:
        if isinstance(s, ast.If):
            return self.ifs.convert(s, live_after, defined)
        if isinstance(s, ast.While):
            return self.loops.convert_while(s, live_after, defined)
        if isinstance(s, ast.For):
            return self.loops.convert_for(s, live_after, defined)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function(s)
            return [s]
        if not isinstance(s, _SCOPES):
            live = live_after | reads([h for h in getattr(s, "handlers", [])])
            map_blocks(s, lambda b: self.block(b, live | exposed(getattr(s, "finalbody", [])),
                                               defined))
        return [s]

    def undefined_guards(self, node, names, defined) -> list:
        """``y = _jst.ld(locals(), 'y')`` for each variable that may be unbound here."""
        call = ast.Call(func=load("locals"), args=[], keywords=[])
        return located(node, [assign(n, jst("ld", call, const(n)))
                              for n in names if n not in defined])

    def call(self, node, names, fn: str, *args) -> list:
        """``names = _jst.fn(*args, names, 'names', 'file:line')``."""
        labels = ast.Tuple(elts=[const(n) for n in names], ctx=ast.Load())
        value = jst(fn, *args, names_tuple(names), labels, const(self.where(node)))
        return located(node, [assign(names, value) if names else ast.Expr(value)])


class IfTransformer:
    """``if c: A else: B`` -> two functions over the variables either branch may change,
    and ``vars = _jst.convert_if(c, true_fn, false_fn, vars, names, where)``."""

    def __init__(self, blocks: BlockConverter):
        self.blocks = blocks

    def convert(self, node, live_after: set, defined: set) -> list:
        changed = assigned(node.body) | assigned(node.orelse)
        names = sorted(changed & (live_after | exposed(node.body) | exposed(node.orelse)))
        inner = defined | set(names)
        t, f = self.blocks.names.new("true", "false")
        fns = [function(name, names, self.blocks.block(b, set(names), inner) +
                        [ast.Return(value=names_tuple(names))])
               for name, b in ((t, node.body), (f, node.orelse))]
        return (self.blocks.undefined_guards(node, names, defined) + located(node, fns) +
                self.blocks.call(node, names, "convert_if", node.test, load(t), load(f)))


class LoopTransformer:
    """``while c: B`` -> condition and body functions over the loop variables and
    ``vars = _jst.convert_while(...)``; ``for x in xs: B`` -> a body function taking the
    item first and ``vars = _jst.convert_for(xs, ...)``."""

    def __init__(self, blocks: BlockConverter):
        self.blocks = blocks

    def convert_while(self, node, live_after: set, defined: set) -> list:
        names = sorted(assigned(node.body) & (live_after | exposed(node.body) |
                                              reads(node.test)))
        c, b = self.blocks.names.new("cond", "body")
        body = self.blocks.block(node.body, set(names), defined | set(names))
        fns = [function(c, names, [ast.Return(value=node.test)]),
               function(b, names, body + [ast.Return(value=names_tuple(names))])]
        return (self.blocks.undefined_guards(node, names, defined) + located(node, fns) +
                self.blocks.call(node, names, "convert_while", load(c), load(b)) +
                self.blocks.block(node.orelse, live_after, defined))

    def convert_for(self, node, live_after: set, defined: set) -> list:
        targets = assigned([ast.Assign(targets=[node.target], value=node.iter)])
        flag = getattr(node, "jst_break", None)
        names = (assigned(node.body) | targets) & (live_after | exposed(node.body))
        names = sorted((names - (targets - live_after)) | ({flag} if flag else set()))
        b, item = self.blocks.names.new("body", "item")
        body = self.blocks.block(node.body, set(names), defined | set(names) | targets)
        fn = function(b, [item] + names, located(node, [ast.Assign(
            targets=[node.target], value=load(item))]) + body +
            [ast.Return(value=names_tuple(names))])
        call = self.blocks.call(node, names, "convert_for", node.iter, load(b))
        if flag:
            call[0].value.args.append(const(flag))
        return (self.blocks.undefined_guards(node, names, defined) + located(node, [fn]) +
                call + self.blocks.block(node.orelse, live_after, defined))
