"""The built-in file types and object adapters load on first use (start-up), yet still come
before a plug-in's: each check runs in a fresh interpreter, where nothing has used a
registry yet (sources/base.py `_builtins`)."""

import subprocess
import sys

import pytest

PLUGIN_FIRST = """
import sys, numpy as np
from loader.sources import ObjectAdapter, object_source, register_object_source
from loader.sources.base import FileType, file_type, register_file_type
assert "loader.sources.shared" not in sys.modules and "loader.sources.npy" not in sys.modules

class Mine:
    pass

register_object_source(ObjectAdapter(lambda o: True, lambda o: ("mine", o)))  # takes anything
register_file_type((".mine",), FileType("mine", b"MINE", lambda p: ("mine", p)))
arr = np.zeros(3, dtype=[("a", "<i8")])
print(type(object_source(arr)).__name__, object_source(Mine())[0])
print(file_type(".npy", b"").name, file_type(".mine", b"").name, file_type(".x", b"MINE...").name)
"""

CONCURRENT = """
import threading, numpy as np
from loader.sources import object_source
arr = np.zeros(3, dtype=[("a", "<i8")])
barrier, found = threading.Barrier(4), []

def one():
    barrier.wait()
    found.append(type(object_source(arr)).__name__)

threads = [threading.Thread(target=one) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print(sorted(found))
"""


def run(code: str) -> list[str]:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.split()


def test_a_plugin_registered_first_still_comes_after_the_built_ins():
    """A plug-in's catch-all adapter and file type, registered before any use: an array is still
    the built-in MemorySource, a .npy file the built-in reader; what only the plug-in knows is its."""
    assert run(PLUGIN_FIRST) == ["MemorySource", "mine", "NumPy", ".npy", "mine", "mine"]


@pytest.mark.parametrize("attempt", range(3))
def test_threads_that_use_a_registry_first_all_see_the_built_ins(attempt):
    assert run(CONCURRENT) == ["['MemorySource',", "'MemorySource',", "'MemorySource',", "'MemorySource']"]
