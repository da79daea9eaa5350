"""Value types for argparse shared by the commands (`ask`, `bench`): each parses one text or raises
`argparse.ArgumentTypeError` with the reason; none knows which command uses it.
"""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_int_list(text: str) -> list[int]:
    """Comma-separated positive integers, repeats dropped, order kept: "1024,4096" -> [1024, 4096]."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive whole numbers, got {text!r}")
    return list(dict.fromkeys(values))
