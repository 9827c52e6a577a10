"""``import dualgraph`` freezes the objects that exist then (dualgraph/_gc.py), so full
collections during eager training walk only what the program made; ``DUALGRAPH_GC_FREEZE=0``
leaves the collector alone."""
import os
import subprocess
import sys

PROBE = ("import gc, dualgraph as dg\n"
         "walked = len(gc.get_objects())\n"
         "x = dg.ones(3, requires_grad=True)\n"
         "(x * 2).sum().backward()\n"
         "gc.collect()\n"
         "print(gc.get_freeze_count(), walked, x.grad.tolist())\n")


def _probe(**env) -> list:
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **env},
                         capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
    return [int(out[0]), int(out[1]), out[2].strip()]


def test_import_freezes_its_objects_and_collections_walk_the_rest():
    frozen, walked, grad = _probe()
    plain_frozen, plain_walked, plain_grad = _probe(DUALGRAPH_GC_FREEZE="0")
    assert plain_frozen == 0 and frozen > 10_000
    assert walked < plain_walked // 10      # what a full collection still walks
    assert grad == plain_grad == "[2.0, 2.0, 2.0]"
