"""A torch-exported BERT-style encoder (W10's) imported once by ``dg.onnx.load`` and called
at batch sizes 1, 3 and 16 in turn, against onnxruntime on the same model in the same run.

Three exports of the one encoder:

- ``batch``: a dynamic batch (``dynamic_axes`` on dim 0). Its reshapes' targets are
  computed by ``Shape -> Gather -> Concat``; the import folds them to the symbolic batch.
- ``batch+length``: a dynamic batch and sequence length; the positions are
  ``Range(0, T)``, a count computed from the input's shape.
- ``flat``: the ids arrive flat with their ``[batch, length]`` shape as a second input (a
  Reshape whose target is a graph input: a value that changes with every call).

For each it prints the load time, the first call at each batch size and the best
steady-state latency, as a ratio to onnxruntime's in the same round; for ``flat`` also the
model imported per value of its shape input (what ``dg.onnx.load`` did before such values
were read as the model runs: its first call at a new value pays an import and a compile),
called in turn with the other. Run it from the repository root (machine load makes absolute times noisy;
the ratios to onnxruntime in the same run are the figures to read)::

    PYTHONPATH=$PWD python -m benchmarks.onnx_dynamic_shapes
"""
import io
import time
import warnings

import numpy as np

from .w10_encoder_infer import SEQ, VOCAB, build, make_data

BATCHES = (1, 3, 16)
ROUNDS = 5


def _export(torch, model, ids, dynamic_axes):
    import onnx
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids,), buf, input_names=["ids"], output_names=["y"],
                          dynamic_axes=dynamic_axes, dynamo=False, opset_version=17)
    return onnx.load_from_string(buf.getvalue())


def _flat(model):
    """``model`` taking its ids flat, with their shape as input ``shape``."""
    import onnx
    from onnx import TensorProto, helper
    flat = onnx.ModelProto()
    flat.CopyFrom(model)
    g = flat.graph
    g.input[0].name = "flat_ids"
    g.input[0].type.tensor_type.shape.ClearField("dim")
    g.input[0].type.tensor_type.shape.dim.add().dim_param = "N"
    g.input.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    g.node.insert(0, helper.make_node("Reshape", ["flat_ids", "shape"], ["ids"]))
    return flat


def _feeds(kind, b, rng):
    ids = rng.integers(0, VOCAB, (b, SEQ)).astype(np.int64)
    if kind == "flat":
        return [ids.reshape(-1), np.array(ids.shape, np.int64)]
    return [ids]


def _per_value(dg, model):
    """The model imported per value of its graph inputs that set shapes (what
    ``dg.onnx.load`` did before such values were read as the model runs), or None where
    no input does."""
    import onnx

    from dualgraph.export import onnx_import
    names = {"shape"} & {i.name for i in model.graph.input}
    return onnx_import._Specialised(onnx, model, "model.onnx", names) if names else None


def _measure(kind, model, dg, ort):
    """Loads ``model`` (and, where it has shape inputs, the per-value import of it), then
    calls each at every batch size in turn, with onnxruntime, round after round."""
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    start = time.perf_counter()
    try:
        fns = {"run-time": dg.onnx.load(model)}
    except Exception as e:   # (an import that can't load the model: reported)
        print(f"{kind:13} dualgraph can't load it: {type(e).__name__}: {str(e)[:120]}")
        return
    load = time.perf_counter() - start
    if _per_value(dg, model) is not None:
        fns["per value"] = _per_value(dg, model)
    rng = np.random.default_rng(0)
    first = {(k, b): 0.0 for k in fns for b in BATCHES}
    best = {(k, b): np.inf for k in list(fns) + ["onnxruntime"] for b in BATCHES}
    for r in range(ROUNDS):
        for b in BATCHES:
            arrays = _feeds(kind, b, rng)
            start = time.perf_counter()
            want = session.run(None, dict(zip(names, arrays)))[0]
            best["onnxruntime", b] = min(best["onnxruntime", b], time.perf_counter() - start)
            for k, fn in fns.items():
                start = time.perf_counter()
                got = fn(*arrays).numpy()
                took = time.perf_counter() - start
                if r == 0:
                    first[k, b] = took
                else:
                    best[k, b] = min(best[k, b], took)
                assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1)
    run_time = fns["run-time"].run_time_nodes
    print(f"{kind:13} load {load * 1e3:6.0f} ms, {len(run_time)} run-time nodes")
    for k in fns:
        for b in BATCHES:
            print(f"  {k:9} batch {b:2}: first call {first[k, b] * 1e3:8.1f} ms, best "
                  f"{best[k, b] * 1e3:7.2f} ms, x{best[k, b] / best['onnxruntime', b]:.2f} "
                  f"onnxruntime's {best['onnxruntime', b] * 1e3:6.2f} ms")
    if "per value" in fns:
        print(f"  per value: {repr(fns['per value'])[-30:]}")


def main():
    import onnxruntime as ort
    import torch

    import dualgraph as dg
    model, ids = build(torch, make_data(1))
    batch = _export(torch, model, ids, {"ids": {0: "B"}})
    both = _export(torch, model, ids, {"ids": {0: "B", 1: "T"}})
    for kind, proto in (("batch", batch), ("batch+length", both), ("flat", _flat(batch))):
        _measure(kind, proto, dg, ort)


if __name__ == "__main__":
    main()
