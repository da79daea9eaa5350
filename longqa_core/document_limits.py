"""One document's reading limits: characters, PDF pages and seconds of extraction, and the errors that name them;
with the request's stop check (a cancel) and how it hears that it waits (for a reading child: HTML or PDF).

Every reader (`text_files`, `pdf_files`, `html_files`) checks the `ReadLimits` it is handed; `documents` builds one
per document. It holds no rule about how many characters a request may have (`limits.max_chars_for`), and reads
nothing itself.
"""

from __future__ import annotations

import time
from typing import Callable

from longqa_core.errors import CharLimitError, DocumentError

# A book of 5,000 pages holds far more text than the default token limit lets through (about 3,000 pages of
# prose); more pages than that is a file built to make extraction slow.
DEFAULT_MAX_PAGES = 5_000
# Extracting one document, or all of one request's documents together, may take this long: enough for a genuine
# book, not for a PDF whose pages share one huge content stream (docs/serving.json has what that costs).
DEFAULT_MAX_READ_S = 30.0


class ReadLimits:
    """One document's reading limits, the time limit counted from when reading began. `should_stop` says when the
    request was abandoned (a reader that waits or runs a child polls it); `on_wait(ahead)` hears how many reads are
    ahead of this one while it waits for a reader."""

    def __init__(self, max_chars: int | None = None, max_pages: int = DEFAULT_MAX_PAGES,
                 max_read_s: float | None = None, began: float | None = None, *,
                 should_stop: Callable[[], bool] | None = None, on_wait: Callable[[int], None] | None = None):
        self.max_chars = max_chars
        self.max_pages = max_pages
        self.max_read_s = max_read_s
        self.began = time.perf_counter() if began is None else began
        self.should_stop = should_stop
        self.on_wait = on_wait

    def stopped_message(self, name: str, progress: str) -> str:
        """What a reader's Cancelled says when the request was stopped while it was `progress` `name`."""
        return f"The request was stopped while {progress} '{name}'."

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.began

    def is_over_time(self) -> bool:
        return self.max_read_s is not None and self.elapsed_s() > self.max_read_s

    def remaining_s(self) -> float | None:
        """Seconds left of the time limit (None: no limit)."""
        return None if self.max_read_s is None else max(self.max_read_s - self.elapsed_s(), 0.0)

    def is_over_chars(self, n_chars: int) -> bool:
        return self.max_chars is not None and n_chars > self.max_chars

    def check_chars(self, name: str, n_chars: int) -> None:
        if self.is_over_chars(n_chars):
            raise CharLimitError(f"'{name}' has {n_chars:,} characters, over the limit of {self.max_chars:,} "
                                 f"characters.", n_chars=n_chars)

    def time_error(self, name: str, progress: str) -> DocumentError:
        return DocumentError(f"'{name}': reading stopped after {self.elapsed_s():.1f} s ({progress}), over the "
                             f"time limit of {self.max_read_s:g} s for reading documents.")
