"""Host-RAM peak over a block of code (what loading a model costs in RAM): Linux's resettable high-water mark,
else RSS sampled in a thread. Measures only; never raises.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import psutil

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def current_rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def _high_water_mark_bytes() -> int | None:
    try:
        match = re.search(r"VmHWM:\s+(\d+) kB", STATUS.read_text())
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def _reset_high_water_mark() -> bool:
    try:
        CLEAR_REFS.write_text("5")  # "5": reset the peak RSS counter (Linux 4.0+)
    except OSError:
        return False
    return _high_water_mark_bytes() is not None


class HostPeak:
    """`with HostPeak() as peak: ...` then `peak.peak_rss_bytes` (process RSS peak inside the block, bytes)."""

    def __init__(self, interval_s: float = 0.005):
        self.interval_s = interval_s
        self.baseline_rss_bytes = 0
        self.peak_rss_bytes: int | None = None
        self.method = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, current_rss_bytes())

    def __enter__(self) -> "HostPeak":
        self.baseline_rss_bytes = current_rss_bytes()
        if _reset_high_water_mark():
            self.method = "VmHWM"
        else:
            self.method = "sampled RSS"
            self.peak_rss_bytes = self.baseline_rss_bytes
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak_rss_bytes = max(self.peak_rss_bytes or 0, current_rss_bytes())
        else:
            self.peak_rss_bytes = _high_water_mark_bytes()
