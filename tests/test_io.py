"""dg.save / dg.load: exact round trips, safetensors interop, atomic writes, clear errors."""
from __future__ import annotations

import io
import json
import math
import os
from collections import OrderedDict

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import dualgraph as dg

# dg.save/dg.load are exported by dualgraph/__init__.py; dg.io has them either way.
save = getattr(dg, "save", dg.io.save)
load = getattr(dg, "load", dg.io.load)


def same(a, b):
    """Deep equality that also checks types (tuple vs list, int vs float vs bool), tensor
    dtypes and bits, and treats nan as equal to nan."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dg.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
        x, y = a.detach().numpy(), b.detach().numpy()
        assert x.tobytes() == np.ascontiguousarray(y).tobytes()
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    elif isinstance(a, dict):
        assert list(a) == list(b) and [type(k) for k in a] == [type(k) for k in b]
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


def round_trip(obj, tmp_path):
    path = tmp_path / "obj.safetensors"
    save(obj, path)
    loaded = load(path)
    same(loaded, obj)
    return loaded


@pytest.mark.parametrize("dtype", [dg.float32, dg.float64, dg.float16, dg.bfloat16, dg.int32,
                                   dg.int64, dg.bool])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4)])
def test_tensor_round_trip_is_bit_exact(tmp_path, dtype, shape):
    values = np.random.default_rng(0).standard_normal(shape) * 100
    if dtype.is_floating_point and values.size:
        values.flat[0] = np.nan
    t = dg.tensor(values.astype(dtype.np))
    loaded = round_trip(t, tmp_path)
    assert loaded.numpy().flags.writeable
    loaded.numpy()[...] = 0  # independent of the saved tensor
    same(round_trip(t, tmp_path), t)


def test_views_and_requires_grad(tmp_path):
    base = dg.arange(12.0).reshape(3, 4)
    view = base.permute(1, 0)  # non-contiguous
    w = dg.tensor([1.0, 2.0], requires_grad=True)
    loaded = round_trip({"view": view, "w": w}, tmp_path)
    assert loaded["w"].requires_grad and loaded["w"].is_leaf
    save(dg.nn.Parameter(dg.ones(2)), tmp_path / "p")
    p = load(tmp_path / "p")  # a Parameter comes back as a plain tensor (docs/nn.md)
    assert type(p) is dg.Tensor and p.requires_grad
    np.testing.assert_array_equal(loaded["view"].numpy(), np.arange(12.0).reshape(3, 4).T)


def test_nested_python_values_round_trip_exactly(tmp_path):
    obj = {
        "ints": [0, -1, 2**62, 10**30],
        "floats": [0.1, -0.0, 1e308, float("nan"), float("inf"), float("-inf")],
        "flags": (True, False, None),
        "text": ["", "ünïcödé", "with \"quotes\"", "a.b"],
        0: "int key", "0": "str key", 1.5: "float key", (1, "x"): "tuple key",
        None: "none key", True: "bool key",
        "nested": {"empty_list": [], "empty_tuple": (), "empty_dict": {},
                   "deep": [[(1, [2, {"x": (3,)}])]]},
        "ordered": OrderedDict([("z", 1), ("a", 2)]),
        "dtype": dg.bfloat16,
        "array": np.arange(6, dtype=np.uint8).reshape(2, 3),
    }
    loaded = round_trip(obj, tmp_path)
    assert isinstance(loaded["ordered"], OrderedDict)


def test_state_dicts_round_trip(tmp_path):
    class Net(dg.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = dg.nn.Parameter(dg.randn(3, 2))
            self.seq = dg.nn.Sequential(dg.nn.Module())
            self.seq[0].b = dg.nn.Parameter(dg.randn(2, dtype=dg.bfloat16))
            self.register_buffer("steps", dg.tensor(7))

    sd = Net().state_dict()
    loaded = round_trip(sd, tmp_path)
    assert isinstance(loaded, OrderedDict) and list(loaded) == ["w", "steps", "seq.0.b"]
    optim_state = {
        "state": {0: {"step": dg.tensor(3.0), "exp_avg": dg.zeros(3, 2),
                      "exp_avg_sq": dg.ones(3, 2)}, 1: {"momentum_buffer": None}},
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0,
                          "amsgrad": False, "foreach": None, "params": [0, 1]}],
    }
    loaded = round_trip(optim_state, tmp_path)
    assert list(loaded["state"]) == [0, 1]


def test_entries_are_named_by_path_and_readable_by_other_tools(tmp_path):
    path = tmp_path / "sd.safetensors"
    bf = dg.tensor([1.5, -2.0], dtype=dg.bfloat16)
    save({"fc.weight": dg.ones(2, 2), "state": {0: {"m": bf}}, "odd": [dg.zeros(1)]}, path)
    with_torch = safetensors.torch.load_file(str(path))
    assert sorted(with_torch) == ["fc.weight", "odd.0", "state.0.m"]
    assert with_torch["state.0.m"].dtype == torch.bfloat16
    assert with_torch["state.0.m"].tolist() == [1.5, -2.0]
    header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
    assert json.loads(header["__metadata__"]["dualgraph"])["version"] == 1


def test_clashing_entry_names_and_shared_tensors(tmp_path):
    a, b = dg.tensor([1.0]), dg.tensor([2.0])
    loaded = round_trip({"a.b": a, "a": {"b": b}}, tmp_path)
    assert loaded["a.b"].tolist() == [1.0] and loaded["a"]["b"].tolist() == [2.0]
    loaded = round_trip([a, a], tmp_path)  # stored twice, loaded as two tensors
    assert loaded[0] is not loaded[1]


def test_file_objects_and_ignored_torch_arguments(tmp_path):
    buffer = io.BytesIO()
    save({"x": dg.arange(3)}, buffer)
    buffer.seek(0)
    same(load(buffer, map_location="cpu", weights_only=True), {"x": dg.arange(3)})
    path = str(tmp_path / "t.safetensors")
    save(dg.ones(2), path)
    same(load(path, map_location=lambda storage, loc: storage), dg.ones(2))


def test_unsupported_values_are_refused_with_their_location(tmp_path):
    with pytest.raises(TypeError, match=r"can't store float32 \(at obj\['a'\]\[1\]\).*\.item\(\)"):
        save({"a": [1, np.float32(2.0)]}, tmp_path / "x")
    with pytest.raises(TypeError, match="can't store set"):
        save({1, 2}, tmp_path / "x")
    assert not os.listdir(tmp_path)


def test_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    save({"v": dg.tensor([1.0])}, path)
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        save({"v": dg.tensor([2.0])}, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]  # no temporary file left behind
    assert load(path)["v"].tolist() == [1.0]


@pytest.fixture
def good_bytes(tmp_path):
    path = tmp_path / "good.safetensors"
    save({"w": dg.arange(10.0), "meta": {"epoch": 2}}, path)
    return path.read_bytes()


def check_load_error(tmp_path, data: bytes, match: str):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=match) as err:
        load(path)
    assert str(path) in str(err.value)
    assert isinstance(err.value, dg.io.LoadError)


@pytest.mark.parametrize("cut", [0, 5, 8, 30, -41, -1])
def test_truncated_files_give_a_clear_error(tmp_path, good_bytes, cut):
    check_load_error(tmp_path, good_bytes[:cut], "truncated|too short|corrupted")


def test_corrupted_and_foreign_files_give_a_clear_error(tmp_path, good_bytes):
    size = int.from_bytes(good_bytes[:8], "little")
    header = good_bytes[8:8 + size]
    check_load_error(tmp_path, good_bytes[:8] + b"#" * size + good_bytes[8 + size:],
                     "corrupted safetensors header")
    check_load_error(tmp_path, b"PK\x03\x04 a zip file, maybe a torch checkpoint" * 3,
                     "truncated or not a safetensors file")
    meta = json.loads(header)["__metadata__"]["dualgraph"]
    for bad_meta, match in [(meta.replace('"version": 1', '"version": 99'), "version 99"),
                            (meta.replace('"tensor": "w"', '"tensor": "nope"'), "lacks"),
                            (meta[:-3], "corrupted dualgraph metadata")]:
        new_header = header.replace(json.dumps(meta).encode(), json.dumps(bad_meta).encode())
        new_header += b" " * (-len(new_header) % 8)
        check_load_error(tmp_path, len(new_header).to_bytes(8, "little") + new_header
                         + good_bytes[8 + size:], match)
    plain = safetensors.numpy.save({"w": np.zeros(2, np.float32)})
    check_load_error(tmp_path, plain, "did not write")


def test_bfloat16_values_survive_exactly(tmp_path):
    bits = np.arange(0, 2**16, 97, dtype=np.uint16)
    t = dg.from_numpy(bits.view(ml_dtypes.bfloat16).copy())
    same(round_trip(t, tmp_path), t)
