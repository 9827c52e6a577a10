"""Fuzzing ``dg.load``: any bytes give the saved object back or a ``LoadError`` naming the
file, never another exception, a hang or a crash.

The mutations start from a valid file holding every kind of node the format has (tensors
of several dtypes, one requiring grad, NumPy arrays, dtypes, tuples, dicts and ordered
dicts with int and str keys, non-finite floats): raw bytes, truncation with byte flips, the
structure tree (replace any part of it with any JSON value, the header rebuilt so that
dg.load's own checks are reached), the safetensors header (a tensor's dtype, shape or
offsets, the metadata) and deep nesting.

CI runs a few hundred examples in a few seconds; tests/fuzzing.py says how to run more.
"""
import atexit
import json
import math
import os
import shutil
import tempfile
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fuzzing import fuzz_settings, json_paths, no_hang, record, replace_paths

import dualgraph as dg
from dualgraph.io import MAX_DEPTH, LoadError

FUZZ = fuzz_settings(60)


def _sample():
    w = dg.arange(6.0).reshape(2, 3).requires_grad_()
    return OrderedDict([
        ("model", {"w": w, "b": dg.tensor([1.5, -2.0], dtype=dg.bfloat16),
                   "mask": dg.tensor([True, False]), "ids": dg.tensor([3, 1])}),
        ("step", 3), ("lr", math.nan), ("limits", (-math.inf, 1e300)),
        ("names", ["a", None, True, ""]), (7, {"int key": np.arange(3, dtype=np.int32)}),
        ("dtype", dg.float16), ("half", np.zeros((0, 2), np.float16))])


_DIR = tempfile.mkdtemp(prefix="io_fuzz_")
atexit.register(shutil.rmtree, _DIR, True)
_PATH = os.path.join(_DIR, "fuzzed.dg")
dg.save(_sample(), os.path.join(_DIR, "good.dg"))
with open(os.path.join(_DIR, "good.dg"), "rb") as _f:
    GOOD = _f.read()
_SIZE = int.from_bytes(GOOD[:8], "little")
HEADER = json.loads(GOOD[8:8 + _SIZE])
DATA = GOOD[8 + _SIZE:]
STRUCTURE = json.loads(HEADER["__metadata__"]["dualgraph"])


def _load(data: bytes):
    """Write ``data`` and load it: an object or a LoadError naming the file, nothing else."""
    with open(_PATH, "wb") as f:
        f.write(data)
    try:
        with no_hang():
            obj = dg.load(_PATH)
    except LoadError as e:
        assert _PATH in str(e), e
        record(f"LoadError: {str(e)[len(_PATH) + 2:][:28]}")
        return None
    record("loaded")
    repr(obj)   # a loaded object is usable: every tensor in it can be printed
    return obj


def _file(header: dict, data: bytes = DATA) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data


def _with_structure(structure) -> bytes:
    header = json.loads(json.dumps(HEADER))
    header["__metadata__"]["dualgraph"] = json.dumps(structure)
    return _file(header)


def test_the_sample_round_trips():
    back = _load(GOOD)
    assert list(back) == list(_sample()) and back["model"]["w"].requires_grad
    assert back["model"]["b"].dtype == dg.bfloat16 and math.isnan(back["lr"])
    assert _load(_with_structure(STRUCTURE)) is not None   # the rebuilt header is valid


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes(data):
    _load(data)


_EDITS = st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), max_size=4)


@FUZZ
@given(st.integers(-1, 10 ** 6), _EDITS)
def test_truncated_and_flipped_bytes(cut, edits):
    out = bytearray(GOOD[:cut % (len(GOOD) + 1)] if cut >= 0 else GOOD)
    for pos, byte in edits:
        if out:
            out[pos % len(out)] = byte
    _load(bytes(out))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False)
    | st.sampled_from(["tensor", "ndarray", "dict", "odict", "tuple", "float", "dtype", "nan",
                       "-inf", "float32", "bfloat16", "object", "model.w", "7.int key", ""])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["tensor", "ndarray", "dict", "odict", "tuple", "float",
                                       "dtype", "requires_grad", "version", "root", "x"]),
                      inner, max_size=3),
    max_leaves=10)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(list(json_paths(STRUCTURE))), _JSON),
                min_size=1, max_size=3))
def test_mutated_structure(replacements):
    _load(_with_structure(replace_paths(json.loads(json.dumps(STRUCTURE)), replacements)))


_NODE_FIELDS = [p for p in json_paths(STRUCTURE) if p and isinstance(p[-1], str)]


@FUZZ
@given(st.sampled_from(_NODE_FIELDS), _JSON, st.sampled_from([None, "requires_grad", "x"]))
def test_mutated_node_fields(path, value, extra_key):
    """One tagged node's content (a tensor's name, a float's spelling, a dict's items, ...)
    replaced, or a key added to the node: the cases the structure fuzzer hits seldom."""
    doc = json.loads(json.dumps(STRUCTURE))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if extra_key is None:
        node[path[-1]] = value
    else:
        node[extra_key] = value
    _load(_with_structure(doc))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(list(json_paths(HEADER))), _JSON),
                min_size=1, max_size=2), st.booleans())
def test_mutated_safetensors_header(replacements, keep_metadata):
    header = replace_paths(json.loads(json.dumps(HEADER)), replacements)
    if keep_metadata and isinstance(header, dict):   # reach the tensor checks more often
        header["__metadata__"] = HEADER["__metadata__"]
    _load(_file(header))


@FUZZ
@given(st.integers(MAX_DEPTH - 3, 3000), st.sampled_from(["list", "tuple", "dict"]))
def test_deep_nesting(depth, kind):
    """Nesting beyond what dg.save writes is refused with a LoadError (no RecursionError),
    at every depth up to and beyond Python's recursion limit (json.loads recurses too)."""
    opening, closing = {"list": ("[", "]"), "tuple": ('{"tuple": [', "]}"),
                        "dict": ('{"dict": [["k", ', "]]}")}[kind]
    header = json.loads(json.dumps(HEADER))
    header["__metadata__"]["dualgraph"] = (
        '{"version": 1, "root": ' + opening * depth + "1" + closing * depth + "}")
    got = _load(_file(header))
    assert (got is not None) == (depth <= MAX_DEPTH)


@pytest.mark.parametrize("version", [0, -1, 2, True, 1.0, "1", None, 2 ** 70])
def test_versions_other_than_the_ones_written_are_refused(tmp_path, version):
    path = tmp_path / "v.dg"
    path.write_bytes(_with_structure({**STRUCTURE, "version": version}))
    with pytest.raises(LoadError, match=f"{path}: .*format version {version!r}"):
        dg.load(path)


def test_saving_deeper_than_the_loader_reads_is_refused(tmp_path):
    deep = 0
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValueError, match=f"nested more than {MAX_DEPTH} levels"):
        dg.save(deep, tmp_path / "deep.dg")
    assert not os.listdir(tmp_path)
    dg.save(deep[0], tmp_path / "ok.dg")
    assert dg.load(tmp_path / "ok.dg") == deep[0]


def test_unreadable_paths_and_file_objects_give_a_load_error(tmp_path):
    for path in (tmp_path / "missing.dg", tmp_path):
        with pytest.raises(LoadError, match=f"{path}: cannot read the file"):
            dg.load(path)
    path = tmp_path / "good.dg"
    path.write_bytes(GOOD)
    for mode, problem in [("r", "cannot read the file"), ("a", "cannot read the file"),
                          ("rb", "cannot read the file: read of closed file")]:
        with open(path, mode) as f:
            if mode == "rb":
                f.close()
            with pytest.raises(LoadError, match=f"{path}: {problem}"):
                dg.load(f)
