"""The argparse value types the commands share."""

from __future__ import annotations

import argparse

import pytest

from longqa.arguments import positive_int, positive_int_list


def test_positive_int_takes_whole_numbers_from_one():
    assert positive_int("1") == 1 and positive_int("4096") == 4096
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1, got 0"):
        positive_int("0")
    with pytest.raises(ValueError):  # argparse words a ValueError as "invalid positive_int value"
        positive_int("2.5")


def test_positive_int_list_keeps_order_and_drops_repeats():
    assert positive_int_list("4096,1024,4096,") == [4096, 1024]


@pytest.mark.parametrize("text", ["0", "a,b", "", "1,-2"])
def test_positive_int_list_rejects_nonsense(text):
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int_list(text)
