"""The project's one cache folder on disk: random-weight architectures, converted checkpoints, offloaded weights.

A path only: nothing here creates, fills or cleans the folder.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """LONGQA_CACHE, else ~/.cache/longqa."""
    return Path(os.environ.get("LONGQA_CACHE", Path.home() / ".cache" / "longqa"))
