"""``dg.save`` / ``dg.load``: tensors, state dicts and optimizer states in ONE safetensors file.

The tensors are the file's entries (named by their path in the saved object, e.g.
``layer.weight`` or ``state.0.exp_avg``, so other safetensors readers see a usable state
dict); the structure around them (dicts with str/int/... keys, lists, tuples, numbers,
strings, None) is JSON stored in the header's ``__metadata__["dualgraph"]`` with a format
version. Nothing is pickled, so loading a file never runs code.

Writes are atomic: the bytes go to a temporary file in the target's directory, are
fsync'ed, and replace the target with ``os.replace``; a failed or killed save leaves the old
file, and the next save removes the temporary files of killed ones. Any problem with a file
``dg.load`` reads raises :class:`LoadError`, nothing else (docs/reliability.md).

>>> import dualgraph as dg, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
>>> dg.save({"step": 3, "w": dg.ones(2)}, path)
>>> dg.load(path)["step"]
3
"""
from __future__ import annotations

import json
import math
import os
from collections import OrderedDict

import numpy as np
from safetensors import SafetensorError, TensorSpec, deserialize, serialize

from . import dtypes
from ._helpers import is_rust_panic, remove_stale_temps, write_atomic
from .tensor import Tensor

__all__ = ["save", "load", "LoadError", "MAX_DEPTH"]


class LoadError(ValueError):
    """A file ``dg.load`` can't read: truncated, corrupted, or not written by ``dg.save``."""

FORMAT_KEY = "dualgraph"
FORMAT_VERSION = 1
# Containers (lists, tuples, dicts) nest at most this deep: loading deeper metadata would
# exhaust Python's stack, so a file claiming it is refused, and dg.save does not write one.
MAX_DEPTH = 100
_DTYPE_NAMES = {d.name: d for d in dtypes.ALL}
_TENSOR_DTYPES = {d.np for d in dtypes.ALL}

# safetensors' dtype codes (what a file holds) -> NumPy dtypes; BF16 is ml_dtypes' bfloat16.
_FROM_CODE = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16,
              "I16": np.int16, "U32": np.uint32, "I32": np.int32, "U64": np.uint64,
              "I64": np.int64, "F16": np.float16, "BF16": dtypes.bfloat16_np,
              "F32": np.float32, "F64": np.float64}
_SAVABLE = {np.dtype(dt).name for dt in _FROM_CODE.values()}
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# -- encoding: Python object -> (JSON tree, {entry name: array}) --------------------------
class _Encoder:
    """Walks the object; each JSON object in the tree is a tag with one key (``tensor``,
    ``dict``, ``tuple``, ...; a tensor's may add ``requires_grad``), so plain JSON values
    (lists, finite numbers, strings) stay plain. ``path`` is the tuple of keys to ``obj``."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def encode(self, obj, path: tuple):
        if obj is None or isinstance(obj, (bool, int, str)):
            return obj
        if len(path) >= MAX_DEPTH and isinstance(obj, (list, tuple, dict)):
            raise ValueError(f"dg.save can't store containers nested more than {MAX_DEPTH} "
                             f"levels deep (at {_readable(path[:3])}...): dg.load refuses "
                             "them, as it would a corrupted file")
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"float": repr(obj)}
        if isinstance(obj, Tensor):
            node = {"tensor": self._add(obj.detach()._concrete("dg.save"), path)}
            if obj.requires_grad:
                node["requires_grad"] = True
            return node
        if isinstance(obj, np.ndarray):
            return {"ndarray": self._add(obj, path)}
        if isinstance(obj, dtypes.DType):
            return {"dtype": obj.name}
        if isinstance(obj, list):
            return [self.encode(v, path + (i,)) for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"tuple": [self.encode(v, path + (i,)) for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            tag = "odict" if isinstance(obj, OrderedDict) else "dict"
            return {tag: [[self.encode(k, path + ("<key>",)), self.encode(v, path + (k,))]
                          for k, v in obj.items()]}
        raise TypeError(
            f"dg.save can't store {type(obj).__name__} (at {_readable(path)}); it stores "
            "Tensors, NumPy arrays, dicts, lists, tuples, str, int, float, bool and None. "
            "Convert other objects (e.g. NumPy scalars with .item()) first")

    def _add(self, array: np.ndarray, path: tuple) -> str:
        if array.dtype.name not in _SAVABLE:
            raise TypeError(f"dg.save can't store arrays of dtype {array.dtype} "
                            f"(at {_readable(path)})")
        base = ".".join(str(p) for p in path) or "tensor"
        name, n = base, 1
        while name in self.arrays:  # two paths spelled the same (keys with dots in them)
            name, n = f"{base}#{n}", n + 1
        little_endian = array.dtype.newbyteorder("<")  # the format is little-endian
        self.arrays[name] = array.astype(little_endian, order="C", copy=False)
        return name


def _readable(path: tuple) -> str:
    return "obj" + "".join(f"[{p!r}]" for p in path)


def _to_bytes(obj) -> bytes:
    encoder = _Encoder()
    tree = encoder.encode(obj, ())
    header = json.dumps({"version": FORMAT_VERSION, "root": tree}, allow_nan=False)
    specs = {name: TensorSpec(dtype=a.dtype.name, shape=a.shape, data_ptr=a.ctypes.data,
                              data_len=a.nbytes)
             for name, a in encoder.arrays.items()}
    return bytes(serialize(specs, metadata={FORMAT_KEY: header}))


def save(obj, f) -> None:
    """Write ``obj`` (a Tensor or nested dicts/lists/tuples of tensors, numbers, strings,
    bools and None) to the path ``f`` atomically, or to a binary file object. A tensor
    reachable twice is stored twice (loading gives two independent tensors)."""
    data = _to_bytes(obj)
    if hasattr(f, "write"):
        f.write(data)
        return
    remove_stale_temps(f)   # of earlier saves to ``f`` that were killed
    write_atomic(f, data)


# -- decoding ---------------------------------------------------------------------------------
def load(f, map_location=None, weights_only=None, mmap=None):
    """Read what :func:`save` wrote (from a path or a binary file object).

    ``map_location``, ``weights_only`` and ``mmap`` are accepted for torch compatibility
    and ignored: everything loads onto the CPU, and the format holds only data.
    Any problem, an unreadable, truncated, corrupted or foreign file, nesting deeper than
    :data:`MAX_DEPTH`, a format version other than 1 .. current, raises :class:`LoadError`
    (a ``ValueError``) naming the file and what is wrong, and no other exception escapes.
    """
    from_object = hasattr(f, "read")
    name = str(getattr(f, "name", "<file object>")) if from_object else os.fspath(f)
    try:
        if from_object:
            data = f.read()
        else:
            with open(name, "rb") as fh:
                data = fh.read()
    except (OSError, ValueError) as e:   # ValueError: a closed file, text mode decoding
        raise LoadError(f"{name}: cannot read the file: {getattr(e, 'strerror', None) or e}"
                        ) from None
    if not isinstance(data, (bytes, bytearray)):
        raise LoadError(f"{name}: a file object opened in text mode; open it with 'rb'")
    tree = _read_structure(data, name)
    try:
        arrays = {key: _to_array(view) for key, view in deserialize(data)}
    except (SafetensorError, KeyError, ValueError) as e:  # KeyError: an unknown dtype code
        raise LoadError(f"{name}: truncated or corrupted tensor data ({e})") from None
    except BaseException as e:
        if not is_rust_panic(e):
            raise
        raise LoadError(f"{name}: corrupted tensor data ({e})") from None
    return _Decoder(arrays, name).decode(tree, 0)


def _read_structure(data: bytes, name: str):
    """Check the safetensors header by hand (the library's errors don't name the file) and
    return the JSON structure tree dg.save put in its metadata."""
    if len(data) < 8:
        raise LoadError(f"{name}: not a dualgraph file: {len(data)} bytes is too short "
                         "for a safetensors header (truncated?)")
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8:
        raise LoadError(f"{name}: truncated or not a safetensors file: the header claims "
                         f"{size} bytes but only {len(data) - 8} follow")
    try:
        header = json.loads(data[8:8 + size])
        meta = header.get("__metadata__") or {}
        dualgraph_meta = meta.get(FORMAT_KEY) if isinstance(meta, dict) else None
    except (ValueError, AttributeError, RecursionError) as e:
        raise LoadError(f"{name}: corrupted safetensors header ({e!r:.200})") from None
    if not isinstance(dualgraph_meta, str):
        raise LoadError(f"{name}: a safetensors file that dg.save did not write (no "
                         f"'{FORMAT_KEY}' metadata); read its tensors with "
                         "safetensors.numpy.load_file")
    try:
        structure = json.loads(dualgraph_meta)
        version, tree = structure["version"], structure["root"]
    except RecursionError:
        raise LoadError(f"{name}: corrupted dualgraph metadata: nested more than "
                         f"{MAX_DEPTH} levels deep") from None
    except (ValueError, TypeError, KeyError) as e:
        raise LoadError(f"{name}: corrupted dualgraph metadata ({e!r:.200})") from None
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:   # not True or 1.0
        upgrade = " (upgrade it)" if type(version) is int and version > FORMAT_VERSION else ""
        raise LoadError(f"{name}: written in dualgraph format version {version!r:.40}; this "
                         f"dualgraph reads versions 1 to {FORMAT_VERSION}{upgrade}")
    return tree


def _to_array(view) -> np.ndarray:
    # The data is a fresh bytearray, so the array is writable and owns no file mapping.
    return np.frombuffer(view["data"], dtype=_FROM_CODE[view["dtype"]]).reshape(view["shape"])


class _Decoder:
    def __init__(self, arrays: dict, name: str):
        self.arrays, self.name = arrays, name

    def decode(self, node, depth: int):
        if isinstance(node, list):
            return [self.decode(v, depth + 1) for v in self._deeper(node, depth)]
        if not isinstance(node, dict):
            return node
        tag = next(iter(node), None)
        decoders = {
            "tensor": None,   # below: the one tag with an optional second key
            "ndarray": self._array,
            "float": lambda v: _SPECIAL_FLOATS[v],
            "dtype": lambda v: _DTYPE_NAMES[v],
            "tuple": lambda v: tuple(self.decode(x, depth + 1) for x in self._deeper(v, depth)),
            "dict": lambda v: {self.decode(k, depth + 1): self.decode(x, depth + 1)
                               for k, x in self._deeper(v, depth)},
            "odict": lambda v: OrderedDict((self.decode(k, depth + 1), self.decode(x, depth + 1))
                                           for k, x in self._deeper(v, depth)),
        }
        if tag not in decoders or len(node) != 1 + (tag == "tensor" and "requires_grad" in node):
            raise self._corrupt(f"unknown node {node!r:.80}")
        try:
            if tag == "tensor":
                return self._tensor(node["tensor"], node.get("requires_grad", False))
            return decoders[tag](node[tag])
        except LoadError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise self._corrupt(f"bad {tag} node ({e!r:.80})") from None

    def _deeper(self, items, depth: int):
        """``items`` of a container at ``depth``: a list, refused past MAX_DEPTH."""
        if not isinstance(items, list):
            raise TypeError(f"{items!r:.40} is not a list")
        if depth >= MAX_DEPTH:
            raise self._corrupt(f"nested more than {MAX_DEPTH} levels deep")
        return items

    def _tensor(self, name: str, requires_grad) -> Tensor:
        array = self._array(name)
        if array.dtype not in _TENSOR_DTYPES:
            raise self._corrupt(f"tensor {name!r} has dtype {array.dtype}, not a Tensor's")
        if requires_grad is not True and requires_grad is not False or (
                requires_grad and array.dtype not in dtypes.FLOATING):
            raise self._corrupt(f"tensor {name!r} of dtype {array.dtype} has requires_grad="
                                f"{requires_grad!r:.20}")
        t = Tensor._make(array)
        return t.requires_grad_() if requires_grad else t

    def _array(self, name: str) -> np.ndarray:
        if not isinstance(name, str) or name not in self.arrays:
            raise self._corrupt(f"the structure names a tensor {name!r:.60} the file lacks")
        return self.arrays[name]

    def _corrupt(self, what: str) -> LoadError:
        return LoadError(f"{self.name}: corrupted dualgraph metadata: {what}")
