"""The answers' download files (the readout's JSON, the history's CSV): a folder per answer, old ones removed; and
the project's write-ups the page links to, served as they are. Not what goes in them (`page.asking.show_outcome`
writes them).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

DOWNLOADS_KEEP_S = 3600.0  # a download file is removed after an hour (gradio serves its own copy)
REPOSITORY = Path(__file__).resolve().parent.parent
PUBLIC_DOCS = ("docs/no-answer.md",  # linked from the not-found verdict's "How this is decided"
               "docs/gpu-planning.md")  # linked from the plan panel's article, which it names and checks


def public_files() -> list[str]:
    """The write-ups the page links to (PUBLIC_DOCS), for gradio's `allowed_paths`."""
    return [str(REPOSITORY / path) for path in PUBLIC_DOCS]


def doc_url(path: str | None) -> str | None:
    """Where the page serves the write-up at `path` (one of PUBLIC_DOCS, relative to the repository), relative to
    the page; None for any other."""
    return f"gradio_api/file={REPOSITORY / path}" if path in PUBLIC_DOCS else None


class DownloadFolders:
    """The answers' download folders under `root` (gradio serves its own copy of each file): a new folder per answer,
    and those older than `keep_s` removed as new ones come. `root` is listed at the first answer and then once every
    `keep_s`, for the folders an earlier run of the page or another process sharing `root` left; between listings
    the folders made here are known, in the order made, so an answer lists nothing."""

    def __init__(self, root: Path, keep_s: float, clock: Callable[[], float] = time.time):
        self.root, self.keep_s, self.clock = root, keep_s, clock
        self._made: deque[tuple[float, Path]] | None = None  # (made at, folder), oldest first
        self._listed_at = 0.0
        self._lock = threading.Lock()  # answers end on several threads at once

    def new(self) -> Path:
        """A new, empty folder for one answer's downloads, after removing those past their time."""
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            now = self.clock()
            if self._made is None or now - self._listed_at > self.keep_s:
                self._made, self._listed_at = deque(sorted(self._left_before())), now
            while self._made and now - self._made[0][0] > self.keep_s:
                shutil.rmtree(self._made.popleft()[1], ignore_errors=True)
            folder = Path(tempfile.mkdtemp(dir=self.root))
            self._made.append((now, folder))
            return folder

    def _left_before(self) -> list[tuple[float, Path]]:
        """The folders already in `root`, with the time each was last changed."""
        found = []
        for folder in self.root.iterdir():
            with contextlib.suppress(OSError):
                found.append((folder.stat().st_mtime, folder))
        return found


DOWNLOADS = DownloadFolders(Path(tempfile.gettempdir()) / "longqa-downloads", DOWNLOADS_KEEP_S)
