"""The ONNX backend conformance cases, run through ``dg.onnx.load``.

The cases are the ones onnx's own backend runner (``onnx.backend.test.runner``) runs: the
node cases (built in memory by ``onnx.backend.test.case.node``, one or a few nodes with
inputs and expected outputs), and the model cases stored in the package (``simple``,
``pytorch-converted``, ``pytorch-operator``, and the ``light`` real models, fed the runner's
dummy inputs). Each case's model is loaded, run on every data set, and each output compared
as the runner does (same shape and dtype, values to rtol 1e-3 and atol 1e-7 unless the case
says otherwise). A failure is classified by what stopped it:

- ``unsupported op``: an op type the import has no rule for;
- ``dtype``: a data type dualgraph has no dtype for;
- ``runtime shape input``: a shape, axes or count that must be known at load time arrives as
  a value computed at run time;
- ``refused``: another ``OnnxError`` of the import (an attribute form it does not support);
- ``wrong value``: it ran, and an output differs (value, shape or dtype);
- ``crash``: any other exception, loading or running (a bug).

The full run prints per op type the passed and failed cases and a total::

    PYTHONPATH=$PWD python -m tests.onnx_conformance            # all 2033 cases
    PYTHONPATH=$PWD python -m tests.onnx_conformance -v resize  # cases matching a regex,
                                                                # each failure's message

``tests/test_onnx_conformance.py`` runs a fast subset in CI.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import glob
import os
import re
import signal
import sys
import time
import warnings

import numpy as np

CATEGORIES = ("unsupported op", "dtype", "runtime shape input", "refused", "wrong value",
              "crash", "timeout")


@dataclasses.dataclass
class Case:
    name: str
    kind: str          # node, simple, pytorch-converted, pytorch-operator, real
    load: object       # () -> (ModelProto, [(inputs, expected outputs)])
    rtol: float = 1e-3
    atol: float = 1e-7
    op: str = ""       # the op type it tests (node cases), else the kind in brackets


def _data_dir() -> str:
    import onnx.backend.test
    return os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")


def cases() -> list[Case]:
    """Every conformance case, in onnx's order: node, real (light), simple, pytorch-*."""
    import onnx
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node_cases = load_model_tests(kind="node")
    out = []
    for t in node_cases:
        out.append(Case(t.name, "node", _node_loader(t), t.rtol, t.atol, _op_of(t.model)))
    for kind in ("real", "simple", "pytorch-converted", "pytorch-operator"):
        for t in load_model_tests(kind=kind):
            if t.model_dir is not None:
                load = _dir_loader(onnx, t.model_dir)
            elif t.url and t.url.startswith("onnx/backend/test/data/light/"):
                load = _light_loader(onnx, t.url)
            else:
                continue   # (a real model to download: not run)
            out.append(Case(t.name, kind, load, t.rtol, t.atol, f"[{kind}]"))
    ops = {c.name: c.op for c in out}
    for c in out:   # (an expanded case tests the op of the case it expands)
        base = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        if base != c.name and base in ops:
            c.op = ops[base]
    return sorted(out, key=lambda c: (c.kind != "node", c.name))


def _op_of(model) -> str:
    nodes = model.graph.node
    return nodes[0].op_type if nodes else "?"


def _node_loader(t):
    def load():
        return t.model, [(list(map(_array, ins)), list(map(_array, outs)))
                         for ins, outs in t.data_sets]
    return load


def _array(x):
    import onnx
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return x


def _read_proto(onnx, path: str, type_proto):
    """A stored input or output: a tensor, a sequence or an optional, as the runner reads it."""
    data = open(path, "rb").read()
    if type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return onnx.numpy_helper.to_list(seq)
    if type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return onnx.numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return onnx.numpy_helper.to_array(t)


def _dir_loader(onnx, model_dir: str):
    def load():
        model = onnx.load(os.path.join(model_dir, "model.onnx"))
        sets = []
        for d in sorted(glob.glob(os.path.join(model_dir, "test_data_set*"))):
            n_in = len(glob.glob(os.path.join(d, "input_*.pb")))
            n_out = len(glob.glob(os.path.join(d, "output_*.pb")))
            ins = [_read_proto(onnx, os.path.join(d, f"input_{i}.pb"), model.graph.input[i].type)
                   for i in range(n_in)]
            outs = [_read_proto(onnx, os.path.join(d, f"output_{i}.pb"),
                                model.graph.output[i].type) for i in range(n_out)]
            sets.append((ins, outs))
        return model, sets
    return load


def _light_loader(onnx, url: str):
    """A ``light`` real model: the runner's dummy inputs (``arange / n`` in the input's
    shape), the expected outputs stored beside the model."""
    def load():
        path = os.path.normpath(os.path.join(_data_dir(), "light", os.path.basename(url)))
        model = onnx.load(path)
        inits = {i.name for i in model.graph.initializer}
        ins = []
        for x in model.graph.input:
            if x.name in inits:
                continue
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                          for d in x.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            ins.append((np.arange(n).reshape(shape) / n).astype(np.float32))
        prefix = os.path.splitext(path)[0]
        outs = [_read_proto(onnx, f"{prefix}_output_{i}.pb", o.type)
                for i, o in enumerate(model.graph.output)]
        return model, [(ins, outs)]
    return load


# -- running one case ---------------------------------------------------------------------------
class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_case(case: Case, timeout: int = 120) -> tuple[str, str]:
    """("pass", "") or (a category of ``CATEGORIES``, the message)."""
    import dualgraph as dg
    from dualgraph.export.errors import OnnxError
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    stage = "load"
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            model, sets = case.load()
            f = dg.onnx.load(model)
            stage = "run"
            for inputs, expected in sets:
                got = f(*inputs)
                got = list(got) if isinstance(got, tuple) else [got]
                compare(expected, [g.numpy() if hasattr(g, "numpy") else g for g in got],
                        case.rtol, case.atol)
        return "pass", ""
    except _Timeout:
        return "timeout", f"over {timeout} s ({stage})"
    except OnnxError as e:
        return classify(str(e)), str(e)
    except AssertionError as e:
        return "wrong value", str(e).strip()
    except Exception as e:   # (anything else is a bug of the import or a kernel)
        return "crash", f"{stage}: {type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def classify(message: str) -> str:
    """The category of an OnnxError's message."""
    if "not supported by dualgraph's ONNX import" in message:
        return "unsupported op"
    if "has no dtype for" in message:
        return "dtype"
    if ("must be known when the model is loaded" in message
            or "they must be known numbers when the model is loaded" in message
            or "known only at run time" in message):
        return "runtime shape input"
    if "the import failed" in message:
        return "crash"
    return "refused"


def compare(expected: list, got: list, rtol: float, atol: float) -> None:
    """onnx's runner's check: as many outputs, each of the same shape and dtype, values
    within rtol and atol (NaN where NaN is expected); sequences element by element."""
    assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
    for k, (e, g) in enumerate(zip(expected, got)):
        if isinstance(e, list):
            assert isinstance(g, (list, tuple)), f"output {k} is not a sequence"
            compare(e, list(g), rtol, atol)
            continue
        e, g = np.asarray(e), np.asarray(g)
        assert g.shape == e.shape, f"output {k} has shape {g.shape}, expected {e.shape}"
        if e.dtype == object:
            np.testing.assert_array_equal(g, e)
            continue
        assert g.dtype == e.dtype, f"output {k} has dtype {g.dtype}, expected {e.dtype}"
        if e.dtype.kind == "V" or e.dtype.name == "bfloat16":   # (ml_dtypes' types)
            # NumPy can't promote them with a float: compared as float32, bfloat16 to two
            # of its ulps, as onnx's runner does
            rtol = max(rtol, 2 ** -6) if e.dtype.name == "bfloat16" else rtol
            e, g = e.astype(np.float32), g.astype(np.float32)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {k}")


# -- the full run -------------------------------------------------------------------------------
def run(pattern: str = "", verbose: bool = False, out=sys.stdout) -> dict:
    """Run the cases whose name matches ``pattern``; print per op type and a total. Returns
    {case name: (category, message)}."""
    selected = [c for c in cases() if re.search(pattern, c.name)]
    results, start = {}, time.time()
    for c in selected:
        results[c.name] = run_case(c)
        if verbose and results[c.name][0] != "pass":
            print(f"{c.name}: {results[c.name][0]}: {results[c.name][1][:300]}", file=out)
    by_op = collections.defaultdict(list)
    for c in selected:
        by_op[c.op].append(results[c.name][0])
    print(f"{'op type':28} pass fail  failures by category", file=out)
    for op in sorted(by_op):
        got = by_op[op]
        fails = collections.Counter(r for r in got if r != "pass")
        detail = ", ".join(f"{k} {n}" for k, n in fails.most_common())
        print(f"{op:28} {got.count('pass'):4} {len(got) - got.count('pass'):4}  {detail}",
              file=out)
    passed = sum(r[0] == "pass" for r in results.values())
    totals = collections.Counter(r[0] for r in results.values() if r[0] != "pass")
    print(f"\n{passed} of {len(results)} cases pass ({100 * passed / max(len(results), 1):.1f}%)"
          f" in {time.time() - start:.0f} s; failures: "
          + ", ".join(f"{k} {n}" for k, n in totals.most_common()), file=out)
    return results


FAILING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_conformance_failing.txt")


@functools.cache
def failing() -> dict:
    """{case name: category} of the cases listed as not passing yet (``FAILING``)."""
    with open(FAILING) as f:
        rows = [line.split(maxsplit=1) for line in f if line.strip() and line[0] != "#"]
    return {name: category.strip() for name, category in rows}


def write_failing(results: dict) -> None:
    lines = [f"{name} {category}\n" for name, (category, _) in sorted(results.items())
             if category != "pass"]
    with open(FAILING, "w") as f:
        f.write("# ONNX conformance cases that dualgraph's import does not pass yet, with why;\n"
                "# written by: PYTHONPATH=$PWD python -m tests.onnx_conformance --write-failing\n")
        f.writelines(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pattern", nargs="?", default="", help="a regex of case names")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each failure's category and message")
    parser.add_argument("--write-failing", action="store_true",
                        help=f"rewrite {os.path.basename(FAILING)} (a full run only)")
    args = parser.parse_args(argv)
    results = run(args.pattern, args.verbose)
    if args.write_failing and not args.pattern:
        write_failing(results)


if __name__ == "__main__":
    main()
