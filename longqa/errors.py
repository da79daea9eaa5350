"""Domain errors: what went wrong, in words a user can act on.

Raised by the core and the strategies; only the UI turns them into `gr.Error`, and the CLI into an exit code.
"""


class LongQAError(Exception):
    """Base class: every error here carries a message meant for the user."""


class InputError(LongQAError, ValueError):
    """The request itself is unusable (empty question, too many tokens, ...)."""


class DocumentError(InputError):
    """A document cannot be read: missing, empty, unsupported, corrupt, encrypted, no text, too large."""


class ModelLoadError(LongQAError):
    """A model could not be loaded (unknown id, offline, corrupt weights, not a QA model)."""


class ProfileError(LongQAError):
    """A profile or strategy combination is invalid or cannot run on this machine."""


class OutOfMemoryError(LongQAError):
    """A request ran out of device memory even at batch size 1."""
