"""Small helpers with no dualgraph dependencies: where in the user's code we are, and
writing a file atomically."""
from __future__ import annotations

import os
import sys
import tempfile

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB_WRAPPERS = ("contextlib.py", "functools.py")
# one entry per ``dg.onnx.export`` in progress (dualgraph/onnx.py): layers read it to take the
# path ONNX writes as one op (nn/rnn.py's recurrent layers)
onnx_exports: list = []
_internal: dict[str, bool] = {}  # filename -> is it dualgraph's own (or a wrapper) frame?


_env_keys: dict[str, object] = {}   # name -> os.environ's key for it


def getenv(name: str, default: str | None = None) -> str | None:
    """``os.environ.get(name, default)`` at a dict lookup's cost: the mapping's ``get`` of
    an unset name raises and catches a KeyError inside (~4 us), and kernels ask for their
    switches (``DUALGRAPH_NUMBA``) at every call. It reads the dict ``os.environ`` writes
    to, so a change (``monkeypatch.setenv``) is seen at once."""
    data = getattr(os.environ, "_data", None)
    if data is None:   # (not CPython's os.environ)
        return os.environ.get(name, default)
    key = _env_keys.get(name)
    if key is None:
        key = _env_keys[name] = os.environ.encodekey(name)
    value = data.get(key)
    return default if value is None else os.environ.decodevalue(value)


def _is_internal(filename: str) -> bool:
    internal = _internal.get(filename)
    if internal is None:
        # contextlib and functools frames sit between the user and us (decorators, `with`).
        internal = (filename.startswith((PACKAGE_DIR, "<frozen "))
                    or os.path.basename(filename) in _STDLIB_WRAPPERS
                    and filename.startswith(sys.base_prefix))
        _internal[filename] = internal
    return internal


def user_frame(depth: int = 1):
    """The innermost stack frame that is the user's code (outside the dualgraph package)."""
    f = sys._getframe(depth)
    while f is not None and _is_internal(f.f_code.co_filename):
        f = f.f_back
    return f


def user_site() -> tuple | None:
    """Where the user's code calls into dualgraph, as (code object, bytecode offset):
    cheap, :func:`format_site` turns it into ``file:line`` when a message needs it.

    Dispatch calls this for every recorded op, so the walk is inlined, and it keeps the
    offset, not the line: a frame's ``f_lineno`` scans its code's line table from the
    start (~0.4 us at line 60 of a function), ``f_lasti`` is read as it is."""
    f = sys._getframe(2)
    known = _internal
    while f is not None:
        code = f.f_code
        internal = known.get(code.co_filename)
        if internal is None:
            internal = _is_internal(code.co_filename)
        if not internal:
            return (code, f.f_lasti)
        f = f.f_back
    return None


def user_stack(limit: int) -> tuple[str, ...]:
    """``file:line`` of up to ``limit`` frames of the user's code calling into dualgraph,
    innermost first (the profiler's ``with_stack``)."""
    lines = []
    f = sys._getframe(1)
    while f is not None and len(lines) < limit:
        if not _is_internal(f.f_code.co_filename):
            lines.append(f"{f.f_code.co_filename}:{f.f_lineno}")
        f = f.f_back
    return tuple(lines)


def format_site(site) -> str:
    """``file:line`` of a :func:`user_site`, or ``<unknown>``."""
    if site is None:
        return "<unknown>"
    code, offset = site
    return f"{code.co_filename}:{_line_at(code, offset)}"


def _line_at(code, offset: int) -> int:
    """The source line of the instruction at byte ``offset`` of ``code`` (what the
    frame's ``f_lineno`` was when it stood there)."""
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return line
    return code.co_firstlineno


def user_location() -> str:
    """``file.py:LINE`` of the user's code calling into dualgraph, or ``<unknown>``."""
    f = user_frame(2)
    return "<unknown>" if f is None else f"{f.f_code.co_filename}:{f.f_lineno}"


def short_location(location: str) -> str:
    """A location with the directory dropped, for printing graphs compactly."""
    if location.startswith("<"):
        return location
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def write_atomic(path, data: bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that it holds either its old or its new content, never
    a mix: a temp file in the same directory is written, fsync'ed and renamed over ``path``
    (``os.replace``); on failure the temp file is removed and the old file is untouched.

    ``durable=False`` skips the fsyncs: for caches, whose files a crash may lose (they are
    rebuilt) but must never leave half-written."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    # The writer's pid in the name lets remove_stale_temps tell a killed writer's leftover
    # from a file another process is writing right now.
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp",
                               prefix=f".{os.path.basename(path)}.{os.getpid()}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_directory(directory)


def remove_stale_temps(path) -> int:
    """Delete the temp files that :func:`write_atomic` calls for ``path`` (or for a name
    starting with ``path`` and a dot) left behind when their process was killed; returns how
    many. A temp file of a process that is still running is kept: it may be mid-write.

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); open(os.path.join(d, ".m.json.999999999.x1.tmp"), "w").close()
    >>> remove_stale_temps(os.path.join(d, "m.json")), os.listdir(d)
    (1, [])
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    prefix = "." + os.path.basename(path) + "."
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        parts = name[len(prefix):-len(".tmp")].split(".")   # [..., pid, random]
        pid = parts[-2] if len(parts) >= 2 else ""
        if pid.isdigit() and _pid_alive(int(pid)):
            continue
        try:
            os.unlink(os.path.join(directory, name))
            removed += 1
        except OSError:
            pass   # removed by another process meanwhile, or not ours to remove
    return removed


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":
        return True   # Windows' os.kill(pid, 0) would terminate the process
    if pid == 0 or pid > 2 ** 31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True   # exists but belongs to another user, or we cannot tell: keep it
    return True


def is_rust_panic(e: BaseException) -> bool:
    """Whether ``e`` is pyo3's PanicException: how a Rust library (safetensors) reports a
    panic on malformed input. It derives from BaseException, so ``except Exception`` misses it.

    >>> is_rust_panic(ValueError())
    False
    """
    return type(e).__name__ == "PanicException"


def fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (POSIX); not possible on every platform."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
