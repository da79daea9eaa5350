"""Domain errors: what went wrong, in words a user can act on.

Raised by the core and the strategies; only the UI turns them into `gr.Error`, and the CLI into an exit code.
"""


class LongQAError(Exception):
    """Base class: every error here carries a message meant for the user."""


class InputError(LongQAError, ValueError):
    """The request itself is unusable (empty question, too many tokens, ...)."""


class DocumentError(InputError):
    """A document cannot be read: missing, empty, unsupported, corrupt, encrypted, no text, too large."""


class CharLimitError(DocumentError):
    """A document has more characters than it may: `n_chars` counted when reading stopped (all of them unless
    `partial`), so a request of several documents can say what they have together."""

    def __init__(self, message: str, *, n_chars: int = 0, partial: bool = False):
        super().__init__(message)
        self.n_chars = n_chars
        self.partial = partial


class RequestTooLongError(InputError):
    """A request is predicted to take longer than the time a request may take; refused before (or, with no
    throughput measured yet, after one batch of) model work. Carries the numbers the prediction came from."""

    # Defaults only so that a pickled error (ZeroGPU sends errors across processes) can be rebuilt; BaseException
    # pickles the attributes beside the message.
    def __init__(self, message: str, *, predicted_s: float = 0.0, max_request_s: float = 0.0, windows: int = 0,
                 window_tokens: int = 0, tokens_per_s: float = 0.0):
        super().__init__(message)
        self.predicted_s = predicted_s
        self.max_request_s = max_request_s
        self.windows = windows
        self.window_tokens = window_tokens
        self.tokens_per_s = tokens_per_s


class Cancelled(LongQAError):
    """The caller asked a running request to stop (Stop pressed, tab closed, client gone); the model is unharmed
    and the next request runs as usual."""

    def __init__(self, message: str, *, windows_done: int = 0, windows_total: int = 0):
        super().__init__(message)
        self.windows_done = windows_done
        self.windows_total = windows_total
        self.best = None  # the best answer read before it stopped (`answering.Provisional`), where one was kept


class ModelLoadError(LongQAError):
    """A model could not be loaded (unknown id, offline, corrupt weights, not a QA model)."""


class ProfileError(LongQAError):
    """A profile or strategy combination is invalid or cannot run on this machine."""


class OutOfMemoryError(LongQAError):
    """A request ran out of device memory even at batch size 1."""
