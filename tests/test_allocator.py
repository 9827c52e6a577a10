"""glibc's malloc settings (the ``"malloc"`` trick of ``kernels/tuning.py``): left alone by
``import dualgraph`` and by running eager and compiled code, applied only when asked for
(``DUALGRAPH_CPU_TUNING=1`` or ``dg.tune_cpu()``), put back when turned off, and never
over the user's own ``MALLOC_*`` settings.

The observable is glibc's own (``mallinfo2``): whether 100 MiB freed at the top of the heap
stays there. glibc trims the heap once its free top exceeds the trim threshold, 128 KiB
by default and at most 64 MiB as glibc raises it by itself (when big blocks are freed:
importing NumPy's OpenBLAS does); the tuned threshold is 256 MiB."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

PROBE = r"""
import ctypes, json, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def kept():
    '''Whether ten 10 MiB blocks, freed, stay in the heap (the trim threshold is above).'''
    before = libc.mallinfo2().arena
    blocks = [libc.malloc(10 << 20) for _ in range(10)]
    for block in reversed(blocks):
        libc.free(block)
    return libc.mallinfo2().arena - before >= 64 << 20

seen = {"before import": kept()}
import numpy as np
import dualgraph as dg
seen["after import"] = kept()
x = dg.tensor(np.ones((64, 64), np.float32), requires_grad=True)
step = dg.compile(lambda x: (dg.nn.functional.gelu(x @ x, approximate="tanh")).sum())
step(x).backward()
(x * x).sum().backward()
seen["after eager and compiled code"] = kept()
seen["applied at import"] = dg.kernels.tuning.report()["malloc_applied"]
if "--tune" in sys.argv:
    dg.tune_cpu()
    seen["after tune_cpu()"] = kept()
    dg.tune_cpu("default")
    seen["after tune_cpu('default')"] = kept()
print(json.dumps(seen))
"""


def probe(*args, **environ):
    env = {k: v for k, v in os.environ.items()
           if k != "DUALGRAPH_CPU_TUNING" and not k.startswith("MALLOC_")}
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                            text=True, timeout=300, env={**env, **environ})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_and_running_code_leave_malloc_settings_alone():
    seen = probe()
    assert seen == {"before import": False, "after import": False,
                    "after eager and compiled code": False, "applied at import": False}


def test_tune_cpu_applies_the_malloc_settings_and_the_default_puts_glibcs_back():
    seen = probe("--tune")
    assert not seen["after import"] and not seen["applied at import"]
    assert seen["after tune_cpu()"] is True
    assert seen["after tune_cpu('default')"] is False


@pytest.mark.parametrize("setting", ["1", "malloc", "blas,matvec,malloc"])
def test_the_switch_applies_them_at_import_when_asked(setting):
    seen = probe(DUALGRAPH_CPU_TUNING=setting)
    assert not seen["before import"] and seen["after import"] and seen["applied at import"]


def test_the_users_own_glibc_settings_win():
    seen = probe(DUALGRAPH_CPU_TUNING="1", MALLOC_TOP_PAD_="131072")
    assert not seen["after import"] and not seen["applied at import"]
