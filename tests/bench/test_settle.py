"""Every benchmark sample starts from settled memory (loader/bench/processes.settle): the
memory it touches before the sample is resident once (VmHWM, the peak RSS of a fresh
process - not ru_maxrss, which execve keeps from the parent - no time)."""

import subprocess
import sys

from loader.bench import processes

PROBE = """
import sys
import numpy  # in both runs: the difference is the touched memory alone
from loader.bench import processes
processes.warm_for(int(sys.argv[1]))
processes.settle()
print(next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def _peak_rss(nbytes: int) -> int:
    return int(
        subprocess.run([sys.executable, "-c", PROBE, str(nbytes)], check=True, capture_output=True, text=True).stdout
    )


def test_settle_touches_three_times_the_records_a_sample_moves():
    assert _peak_rss(40 << 20) - _peak_rss(0) >= 0.8 * (120 << 20)  # (the baseline reuses some freed heap)


def test_warming_is_capped_at_half_the_available_memory(monkeypatch):
    monkeypatch.setitem(processes.WARM, "bytes", 0)
    processes.warm_for(1 << 50)
    with open("/proc/meminfo") as f:
        avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    assert 0 < processes.WARM["bytes"] <= avail // 2 + (64 << 20)
    processes.warm_for(40 << 20)
    assert processes.WARM["bytes"] == 120 << 20
