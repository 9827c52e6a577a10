"""What the workload files share: turning one torch-style model definition into the four
dualgraph/torch implementations, and the optimisers written out for JAX.

A workload's ``build(lib, data)`` is written once against the torch-style API (``lib`` is
``dualgraph`` or ``torch``) and returns ``(fn, *args)``; ``fn(*args)`` is a training step
returning the loss tensor, or a forward pass whose output ``check`` reduces, in NumPy, to
the float that the runner compares across implementations.
"""
import numpy as np


def torch_style_impls(build, check=None, inference=False) -> dict:
    """``{"dualgraph_eager": ..., "torch_compile": ...}``: each builds the workload in its
    library, compiles ``fn`` where the name says so (the whole training step for training
    workloads), and returns ``step()`` giving the loss (or ``check(output)``) as a float.
    ``inference`` runs every call under the library's ``no_grad``."""
    def make(lib_name: str, compiled: bool):
        def impl(data):
            import importlib
            lib = importlib.import_module(lib_name)
            fn, *args = build(lib, data)
            if compiled:
                fn = lib.compile(fn)

            def step():
                out = fn(*args)
                return float(check(out)) if check else out.item()
            if not inference:
                return with_explain(step, fn)

            def step_no_grad():
                with lib.no_grad():
                    return step()
            return with_explain(step_no_grad, fn)
        return impl
    return {"dualgraph_eager": make("dualgraph", False),
            "dualgraph_compiled": make("dualgraph", True),
            "torch_eager": make("torch", False), "torch_compile": make("torch", True)}


def with_explain(step, fn):
    """``step``, given ``fn``'s ``explain`` when ``fn`` is a ``dg.compile``d function: the
    runner reports where its first call's time went."""
    if hasattr(fn, "explain"):
        step.explain = fn.explain
    return step


def training_step(lib, model, data, make_optimizer, loss=None):
    """``(train_step, x, y)``, what a training workload's ``build`` returns: ``model`` gets
    the weights ``data["params"]``, ``make_optimizer(parameters)`` its optimiser, and a step
    is zero_grad, ``loss(model(x), y)`` (cross-entropy by default), backward, step."""
    loss = loss or lib.nn.functional.cross_entropy
    model.load_state_dict({k: lib.tensor(v) for k, v in data["params"].items()})
    opt = make_optimizer(model.parameters())

    def train_step(x, y):
        opt.zero_grad()
        value = loss(model(x), y)
        value.backward()
        opt.step()
        return value
    return train_step, lib.tensor(data["x"]), lib.tensor(data["y"])


def jax_adam_step(loss_fn, data, lr, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8):
    """``step()`` for a jitted Adam (AdamW when ``weight_decay``) training step on
    ``loss_fn(params, x, y)``, written out as torch's: bias-corrected moments, eps added
    after the square root, decoupled decay ``p *= 1 - lr * wd`` before the update."""
    import jax
    import jax.numpy as jnp
    b1, b2 = betas
    tmap = jax.tree_util.tree_map

    @jax.jit
    def train_step(params, m, v, t, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        m = tmap(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = tmap(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        step_size = lr / (1 - b1 ** t)
        root_correction = jnp.sqrt(1 - b2 ** t)

        def update(p, m, v):
            p = p * (1 - lr * weight_decay)
            return p - step_size * m / (jnp.sqrt(v) / root_correction + eps)
        return loss, tmap(update, params, m, v), m, v

    params = {k: jnp.asarray(a) for k, a in data["params"].items()}
    state = {"params": params, "m": tmap(jnp.zeros_like, params),
             "v": tmap(jnp.zeros_like, params), "t": 0}
    x, y = jnp.asarray(data["x"]), jnp.asarray(data["y"])

    def step():
        state["t"] += 1
        loss, state["params"], state["m"], state["v"] = train_step(
            state["params"], state["m"], state["v"], jnp.float32(state["t"]), x, y)
        return float(loss)
    return step


def onnxruntime_from_torch(build, check, name: str):
    """The onnxruntime peer of an inference workload: ``build(torch, data)``'s model
    exported by ``torch.onnx.export`` (the TorchScript exporter: the dynamo one needs
    onnxscript), run with its intra-op threads capped as the other libraries' are."""
    def impl(data):
        import os
        import tempfile

        import onnxruntime as ort
        import torch
        model, *inputs = build(torch, data)
        options = ort.SessionOptions()
        if os.environ.get("OMP_NUM_THREADS"):
            options.intra_op_num_threads = int(os.environ["OMP_NUM_THREADS"])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.onnx")
            with torch.no_grad():
                torch.onnx.export(model, tuple(inputs), path, dynamo=False,
                                  input_names=[f"input{i}" for i in range(len(inputs))])
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = {f"input{i}": x.numpy() for i, x in enumerate(inputs)}
        return lambda: float(check(session.run(None, feed)[0]))
    return impl


def random_state(model, seed: int) -> dict:
    """NumPy values for every entry of ``model``'s state dict (any library's): He-scaled
    normal weights for convolutions and linears, BatchNorm/LayerNorm scales near 1, small
    biases and running means, running variances in [0.5, 1.5]; integer counters as
    they are. Every implementation loads the same values."""
    import numpy as np
    rng = np.random.default_rng(seed)
    state = {}
    for key, value in model.state_dict().items():
        shape = tuple(value.shape)
        if "int" in str(value.dtype):
            state[key] = np.zeros(shape, np.int64)
        elif key.endswith("running_var"):
            state[key] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            state[key] = (rng.standard_normal(shape) * np.sqrt(2 / fan_in)).astype(np.float32)
        elif key.endswith("weight"):
            state[key] = rng.uniform(0.8, 1.2, shape).astype(np.float32)
        else:
            state[key] = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    return state


def image_classifier(model_fn, seed: int, name: str, batch: int = 1):
    """``(make_data, build, check, IMPLS)`` of an image classifier's inference workload:
    ``model_fn(lib)``'s architecture with random weights and 3x224x224 images drawn from
    ``seed``, run in eval mode by every torch-style implementation and by onnxruntime (the
    model as ``torch.onnx.export`` writes it); the mean absolute logit is compared."""
    def make_data(batch=batch):
        import dualgraph as dg
        rng = np.random.default_rng(seed)
        return {"params": random_state(model_fn(dg), seed),
                "x": rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)}

    def build(lib, data):
        model = model_fn(lib)
        model.load_state_dict({k: lib.tensor(v) for k, v in data["params"].items()})
        model.eval()
        return model, lib.tensor(data["x"])

    def check(logits):
        return np.abs(np.asarray(logits)).mean()

    impls = {**torch_style_impls(build, check=check, inference=True),
             "onnxruntime": onnxruntime_from_torch(build, check, name)}
    return make_data, build, check, impls
