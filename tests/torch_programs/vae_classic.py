"""The VAE of vae.py at the classic example's size: 784-400-20 on 28x28 images, batch 32,
with vae.py's normal(0, 0.2) weights. Those saturate the decoder's sigmoid at first (the
first losses are ~1e8): its probabilities reach 0 and 1, where binary cross-entropy's
gradient is torch's capped quotient ``(p - t) / max(p (1 - p), 1e-12)``."""
import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "torch_program_vae", pathlib.Path(__file__).with_name("vae.py"))
vae = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vae)


def main(steps=10, compile=False, seed=0):
    return vae.main(steps, compile, seed, batch_size=32, sizes=(784, 400, 20), side=28)
