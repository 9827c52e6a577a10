"""Compiling loops with Numba, which is imported here and nowhere else.

Loops and helpers are plain Python functions whose globals hold :class:`Helper` and
:class:`Intrinsic` objects; Numba resolves a function's globals when it compiles it, so
each function is compiled as a copy whose globals hold the helpers' Numba versions
instead (:func:`numba_function`). A loop then becomes either

- an *entry* (:func:`entry`): a C-callable function around it, taking arrays as ndarray
  objects (``PyObject *``) and reading their data pointer and shape from NumPy's array
  struct; ``native.py`` stores its machine code and calls it through ctypes. The loop is
  inlined into it in Numba's IR and the entry compiled with the loop's fast-math flags
  (a separately compiled loop cost 15-25% more compile time); or
- a *dispatcher* (:func:`dispatcher`): Numba's own, for argument types with no native form.

The helpers keep Numba's on-disk cache (``cache=True``), so a new loop calling them compiles
only itself. Numba decides whether a cached function is stale from its own file alone, so a
loop cached before a helper in another file changed would keep the old helper's code:
the locators below add :func:`cache.kernels_hash` (every file of this package) to the
freshness stamp of the files compiled here.

:func:`entry` takes the object code Numba's JIT linked from Numba's internals
(the compiled library, as Numba's own cache serialises it, and its final LLVM module;
Numba 0.68): where they change, native.py warns and runs Numba's dispatcher instead.
"""
from __future__ import annotations

import copy
import types as pytypes
from functools import lru_cache

from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import inline_closurecall
from numba.core import ir as numba_ir
from numba.core.caching import CacheImpl, InTreeCacheLocator, UserWideCacheLocator
from numba.extending import intrinsic

from .abi import DATA_OFFSET, DIMS_OFFSET, JOB
from .cache import kernels_hash
from .decl import Helper, Intrinsic

_numba_globals: dict[int, dict] = {}      # id(module globals) -> their Numba version
_helpers: dict[Helper, object] = {}       # helper -> its dispatcher
_intrinsics: dict[Intrinsic, object] = {}
_dispatchers: dict = {}             # loop (a kernels.Loop) -> its dispatcher
_SCALARS = {"b": types.boolean, "i8": types.int64, "i4": types.int32, "f8": types.float64,
            "f4": types.float32}
_cached_files: set[str] = set()           # source files of functions compiled with cache=True
_WORD_DTYPES = {"b": "b1", "i8": "i8", "i4": "i4", "f8": "f8", "f4": "f4"}   # scalar -> load
_DTYPES = {"f4": types.float32, "f8": types.float64, "i4": types.int32, "i8": types.int64,
           "b1": types.boolean, "u1": types.uint8, "i1": types.int8}


def _stamped(locator):
    """``locator`` for the files in ``_cached_files``, whose cached code is stale when any
    kernel file changed (not only when their own file did)."""
    class Stamped(locator):
        def get_source_stamp(self):
            return (super().get_source_stamp(), kernels_hash())

        @classmethod
        def from_function(cls, py_func, py_file):
            return super().from_function(py_func, py_file) if py_file in _cached_files else None
    Stamped.__name__ = Stamped.__qualname__ = f"Kernels{locator.__name__}"
    return Stamped


CacheImpl._locator_classes[:0] = [_stamped(InTreeCacheLocator), _stamped(UserWideCacheLocator)]


_inline_memos: list[dict] = []   # per inline in progress: id(scope) -> its blocks' memo


def _deepcopy(x, memo=None):
    """``copy.deepcopy``, but for Numba's inliner: the blocks of one scope copied in one
    inline share one memo (:func:`_copy_scopes_once`)."""
    if memo is None and _inline_memos and isinstance(x, numba_ir.Block):
        memo = _inline_memos[-1].setdefault(id(x.scope), {})
    return copy.deepcopy(x, memo)


def _copy_scopes_once() -> None:
    """Numba's IR inliner (``InlineWorker.inline_ir``, Numba 0.68) copies a callee's IR
    with ``copy.deepcopy`` block by block, each block with a fresh memo. Every variable
    refers to the function's scope, which holds every variable, so each block's copy
    copies the whole scope again: blocks x variables, per inline. A loop's helpers inline
    their own helpers first, so the callees grow as they nest: copying took ~80% of the
    compile of the largest loops (``conv_blocked._pointwise``: 55 of 67 CPU seconds).

    The inliner's ``copy`` module is swapped for one whose ``deepcopy`` copies the blocks
    of one scope during one inline with one memo: the copy's blocks share one scope, as
    the original's do; the rest of the IR is the same, and so is the machine code
    (``tests/test_native.py`` compares the objects). Left out where the inliner is not
    as described (its compiles are then slower, not different)."""
    worker = getattr(inline_closurecall, "InlineWorker", None)
    if getattr(inline_closurecall, "copy", None) is not copy or worker is None:
        return
    inline_ir = worker.inline_ir

    def inline_ir_copying_scopes_once(self, *args, **kwargs):
        _inline_memos.append({})
        try:
            return inline_ir(self, *args, **kwargs)
        finally:
            _inline_memos.pop()
    inline_ir_copying_scopes_once.__wrapped__ = inline_ir
    shim = pytypes.ModuleType("copy", copy.__doc__)
    shim.__dict__.update(vars(copy))
    shim.deepcopy = _deepcopy
    worker.inline_ir = inline_ir_copying_scopes_once
    inline_closurecall.copy = shim


_copy_scopes_once()


def _cached_njit(fn, **options):
    """``njit(cache=True, ...)`` of ``fn``, cached by the locators above."""
    _cached_files.add(fn.__code__.co_filename)
    return njit(cache=True, **options)(fn)


def numba_function(fn):
    """``fn`` with the helpers among its globals replaced by their Numba versions."""
    return _with_globals(fn, _globals_of(fn))


def _with_globals(fn, module_globals: dict):
    copy = pytypes.FunctionType(fn.__code__, module_globals, fn.__name__, fn.__defaults__,
                                fn.__closure__)
    copy.__qualname__, copy.__doc__ = fn.__qualname__, fn.__doc__
    return copy


def compiled_helper(helper: Helper):
    """The Numba dispatcher of ``helper`` (compiled when a loop calling it compiles)."""
    _globals_of(helper.fn)    # makes the dispatchers of every helper of its module
    return _helpers[helper]


def _globals_of(fn) -> dict:
    """The Numba version of ``fn``'s module globals: made once per module, with the module's
    own helpers first, so helpers that call each other (in any order) find each other."""
    module_globals = fn.__globals__
    done = _numba_globals.get(id(module_globals))
    if done is not None:
        return done
    done = _numba_globals[id(module_globals)] = dict(module_globals)
    for name, value in module_globals.items():
        if isinstance(value, Helper) and value.fn.__globals__ is module_globals:
            options = dict(value.options)
            copy = _with_globals(value.fn, done)
            cached = options.pop("cache", False)
            compiled = _cached_njit(copy, **options) if cached else njit(**options)(copy)
            done[name] = _helpers[value] = compiled
    for name, value in module_globals.items():
        if isinstance(value, Helper) and value.fn.__globals__ is not module_globals:
            done[name] = compiled_helper(value)
        elif isinstance(value, Intrinsic):
            if value not in _intrinsics:
                _intrinsics[value] = intrinsic(value.fn)
            done[name] = _intrinsics[value]
    return done


def dispatcher(loop):
    """Numba's dispatcher for ``loop`` (compiled per argument types, cached on disk by
    Numba); it releases the GIL."""
    fn = _dispatchers.get(loop)
    if fn is None:
        fn = _dispatchers[loop] = _cached_njit(numba_function(loop.fn), error_model="numpy",
                                               nogil=True, fastmath=loop.fastmath)
    return fn


def entry(loop, codes: tuple, name: str) -> tuple[bytes, str, set]:
    """Compile a C-callable entry ``name`` calling ``loop`` on arguments of ``codes``
    (``native.signature``): its object code, its symbol, and the symbols it leaves for
    the linker to find. Codes that begin with ``native.JOB`` make a job entry: one int64
    argument, the address of a block of words holding the arguments in order (an
    array's object, a scalar's bytes: ``native.job_words``), which OpenBLAS's threads
    can run (``blas_threads.py``)."""
    job = codes[:1] == (JOB,)
    if job:   # one int64: the address of a block holding each argument in a word
        codes = codes[1:]
    params, argtypes, lines, call = [], [], [], []
    for k, code in enumerate(codes):
        if code.endswith("]"):     # an array: its object
            dtype, ndim = code[:-1].split("[")
            params.append(f"o{k}")
            argtypes.append(types.int64)
            if job:
                lines.append(f"o{k} = _word(block + {8 * k})")
            dims = ", ".join(f"_word(d{k} + {8 * i})" for i in range(int(ndim)))
            lines += [f"d{k} = _word(o{k} + {DIMS_OFFSET})",
                      f"a{k} = carray(_pointer_{dtype}(_word(o{k} + {DATA_OFFSET})), "
                      f"({dims},))"]
            call.append(f"a{k}")
        else:
            params.append(f"x{k}")
            argtypes.append(_SCALARS[code])
            if job:   # (the value's bytes at the word's start: little-endian)
                lines.append(f"x{k} = carray(_pointer_{_WORD_DTYPES[code]}(block + {8 * k}), "
                             "(1,))[0]")
            call.append(f"x{k}")
    if job:
        params, argtypes = ["block"], [types.int64]
    source = "\n    ".join([f"def {name}({', '.join(params)}):", *lines,
                            f"loop({', '.join(call)})"])
    namespace = {"carray": carray, "_word": _word,
                 "loop": njit(inline="always")(numba_function(loop.fn)),
                 **{f"_pointer_{c}": _pointer(t) for c, t in _DTYPES.items()}}
    exec(compile(source, f"<dualgraph entry of {loop.fn.__qualname__}>", "exec"), namespace)
    compiled = cfunc(types.void(*argtypes), error_model="numpy",
                     fastmath=loop.fastmath)(namespace[name])
    library = compiled._library
    module = library._final_module
    _, _, (code, _) = library.serialize_using_object_code()   # what Numba's JIT linked
    undefined = {f.name for f in module.functions if f.is_declaration} | {
        g.name for g in module.global_variables if g.is_declaration}
    return code, compiled.native_name, {s for s in undefined if not s.startswith("llvm.")}


@intrinsic
def _word(typingctx, address):
    """The int64 stored at ``address``."""
    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(64).as_pointer()))
    return types.int64(types.int64), codegen


@lru_cache(maxsize=None)
def _pointer(dtype):
    """An intrinsic: an int64 address as a pointer to ``dtype``."""
    @intrinsic
    def pointer(typingctx, address):
        signature = types.CPointer(dtype)(types.int64)

        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))
        return signature, codegen
    return pointer

