"""The malloc tuning done at import (dualgraph/_allocator.py): on by default on glibc,
off when asked or when the user tuned glibc through its own environment variables."""
import subprocess
import sys

import pytest

from dualgraph import _allocator


def test_opt_out_and_user_settings_leave_malloc_alone():
    assert _allocator.tune_malloc({"DUALGRAPH_TUNE_MALLOC": "0"}) is False
    assert _allocator.tune_malloc({"MALLOC_MMAP_THRESHOLD_": "65536"}) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_import_tunes_malloc_on_glibc_unless_opted_out():
    code = "import dualgraph._allocator as a; print(a.MALLOC_TUNED)"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"DUALGRAPH_TUNE_MALLOC": "0", "PATH": ""})
    assert on.stdout.strip() == "True" and off.stdout.strip() == "False"
