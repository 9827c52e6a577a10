"""Fuzzing graph loading: any bytes in either file give a Graph or a GraphFormatError.

Byte-level mutations mostly break the JSON syntax, so structural mutations (replace any part
of the document with any JSON value) and constants mutations with the recorded SHA-256
fixed up (so that the safetensors parser itself is reached) are fuzzed as well.
"""
import atexit
import hashlib
import json
import os
import shutil
import tempfile

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import dualgraph  # noqa: F401  (registers every op)
from dualgraph.graph import Graph, GraphFormatError, load, verify
from dualgraph.shapes import Sym

FUZZ = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _sample_graph() -> Graph:
    g = Graph()
    x = g.add_input(("B", 4), "float32", name="x")
    w = g.add_constant(np.arange(4, dtype=ml_dtypes.bfloat16), name="w")
    m = g.add_constant(np.array([True, False, True, True]), name="mask")
    (h,) = g.add_node("mul", [x, w], location="m.py:1")
    (r,) = g.add_node("where", [m, h, float("-inf")], location="m.py:2")
    (p,) = g.add_node("reshape", [r], {"shape": (Sym("B"), 2, 2)})
    (t,) = g.add_node("permute", [p], {"perm": (2, 0, 1)})
    (s,) = g.add_node("sum", [t], {"dims": (0,), "keepdim": True, "dtype": np.float64})
    (c,) = g.add_node("cast", [s], {"dtype": np.dtype(np.int32)})
    (f,) = g.add_node("full_like", [c], {"fill_value": float("nan"), "dtype": np.float16})
    g.set_outputs([f, c])
    return g


_DIR = tempfile.mkdtemp(prefix="graph_fuzz_")
atexit.register(shutil.rmtree, _DIR, True)
_PATH = os.path.join(_DIR, "g.json")
_sample_graph().save(_PATH)
with open(_PATH, "rb") as _f:
    JSON_BYTES = _f.read()
with open(os.path.join(_DIR, "g.safetensors"), "rb") as _f:
    ST_BYTES = _f.read()
DOC = json.loads(JSON_BYTES)


def _load(json_bytes: bytes, st_bytes: bytes):
    """Write the pair and load it: a verified Graph or a GraphFormatError, nothing else."""
    path = os.path.join(_DIR, "fuzzed.json")
    with open(path, "wb") as f:
        f.write(json_bytes)
    with open(os.path.join(_DIR, "fuzzed.safetensors"), "wb") as f:
        f.write(st_bytes)
    try:
        g = load(path)
    except GraphFormatError as e:
        assert path in str(e) or "fuzzed.safetensors" in str(e)
        return None
    verify(g)
    str(g)
    return g


def _with_hash(st_bytes: bytes, doc=None) -> bytes:
    """The JSON document with its constants record matching ``st_bytes``."""
    doc = json.loads(json.dumps(DOC if doc is None else doc))
    doc["constants"] = {"bytes": len(st_bytes), "sha256": hashlib.sha256(st_bytes).hexdigest()}
    return json.dumps(doc).encode()


def test_the_sample_loads():
    assert str(_load(JSON_BYTES, ST_BYTES)) == str(_sample_graph())


@FUZZ
@given(st.binary(max_size=600), st.booleans())
def test_arbitrary_bytes(data, as_json):
    if as_json:
        _load(data, ST_BYTES)
    else:
        _load(_with_hash(data), data)


def _mutate(blob: bytes, cut: int, edits) -> bytes:
    out = bytearray(blob[:cut % (len(blob) + 1)] if cut >= 0 else blob)
    for pos, byte in edits:
        if out:
            out[pos % len(out)] = byte
    return bytes(out)


_EDITS = st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), max_size=4)


@FUZZ
@given(st.integers(-1, 10 ** 6), _EDITS)
def test_mutated_json(cut, edits):
    _load(_mutate(JSON_BYTES, cut, edits), ST_BYTES)


@FUZZ
@given(st.integers(-1, 10 ** 6), _EDITS, st.booleans())
def test_mutated_constants(cut, edits, fix_hash):
    blob = _mutate(ST_BYTES, cut, edits)
    _load(_with_hash(blob) if fix_hash else JSON_BYTES, blob)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False)
    | st.sampled_from(["x", "mul", "B", "2*B", "float32", "bfloat16", "add", "graph", "nan",
                       "inf", "sym", "list", "dtype", "slice", "ellipsis", ""])
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["name", "shape", "dtype", "op", "inputs", "attrs",
                                       "outputs", "float", "sym", "list", "dtype", "slice",
                                       "graph", "ellipsis", "tensor", "perm"]),
                      inner, max_size=3),
    max_leaves=12)


def _paths(node, prefix=()):
    """Every path into a JSON document (keys and indices)."""
    yield prefix
    items = node.items() if isinstance(node, dict) else (
        enumerate(node) if isinstance(node, list) else ())
    for key, child in items:
        yield from _paths(child, prefix + (key,))


PATHS = list(_paths(DOC))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), _JSON), min_size=1, max_size=3))
def test_structurally_mutated_json(replacements):
    doc = json.loads(JSON_BYTES)
    for path, value in replacements:
        if not path:
            doc = value
            continue
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass   # an earlier replacement removed this path
    _load(json.dumps(doc).encode(), ST_BYTES)


def _st_header(blob: bytes) -> dict:
    n = int.from_bytes(blob[:8], "little")
    return json.loads(blob[8:8 + n])


@FUZZ
@given(st.sampled_from(sorted(_st_header(ST_BYTES))),
       st.sampled_from(["dtype", "shape", "data_offsets"]), _JSON)
def test_mutated_constants_header(tensor, field, value):
    header = _st_header(ST_BYTES)
    n = int.from_bytes(ST_BYTES[:8], "little")
    if isinstance(header[tensor], dict):
        header[tensor][field] = value
    text = json.dumps(header).encode()
    blob = len(text).to_bytes(8, "little") + text + ST_BYTES[8 + n:]
    _load(_with_hash(blob), blob)


def test_valid_variants_still_load():
    """A sanity check that the fuzzers can reach success: renaming a value everywhere."""
    text = JSON_BYTES.decode().replace('"mask"', '"keep"')
    blob = ST_BYTES.replace(b'"mask"', b'"keep"')
    g = _load(_with_hash(blob, json.loads(text)), blob)
    assert g is not None and "%keep: bool[4]" in str(g)
