"""A paragraph's lines as a typesetter breaks them: words as pieces that remember where they stand in the text, a word
hyphenated at a line's end, and the breaks that fill the lines most evenly (the least sum of squared slack, as TeX and
`par` choose), with breaks that must fall after given pieces.

It measures with the function it is given (a font's points, or characters) and draws nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

_WORD = re.compile(r"\S+")
_VOWELS = frozenset("aeiouyAEIOUY")
# never hyphenated between: letters that spell one sound, or that begin syllables together ("agree-ment", not "ag-")
_CLUSTERS = frozenset({"ch", "ck", "gh", "ng", "ph", "sh", "th", "wh", "wr", "qu", "bl", "br", "cl", "cr", "dr", "fl",
                       "fr", "gl", "gr", "pl", "pr", "sc", "sl", "sp", "st", "tr"})
_TRAILING = ".,;:!?"


@dataclass(frozen=True)
class Piece:
    """A word as drawn, or one part of a word broken at a line's end ("Ves-", "mira"): its drawn text and the stretch
    `start`..`end` of the reading text it stands for (a hyphen added at a line's end stands for nothing)."""

    text: str
    start: int
    end: int


def pieces_of(text: str, offset: int = 0) -> list[Piece]:
    """The words of `text`, each standing at `offset` plus its place in `text`."""
    return [Piece(match.group(), offset + match.start(), offset + match.end()) for match in _WORD.finditer(text)]


def hyphen_point(word: str) -> int | None:
    """Where a word of letters may be hyphenated (the length of its first part): between two consonants that do not
    sound or start a syllable together, else after a vowel before a consonant, nearest the middle, leaving two
    letters before and three after (TeX's minimums); None for a word of fewer than five letters, or one that is not
    all letters."""
    letters = word.rstrip(_TRAILING)
    if len(letters) < 5 or not letters.isalpha():
        return None
    places = range(2, len(letters) - 2)
    between_consonants = [i for i in places if letters[i - 1] not in _VOWELS and letters[i] not in _VOWELS
                          and letters[i - 1:i + 1].lower() not in _CLUSTERS]
    after_vowel = [i for i in places if letters[i - 1] in _VOWELS and letters[i] not in _VOWELS]
    chosen = between_consonants or after_vowel or list(places)
    return min(chosen, key=lambda i: abs(i - len(letters) / 2))


def compound_point(word: str) -> int | None:
    """Where a compound word breaks after its own hyphen ("four-hour": 5, for "four-" and "hour"); None for a word
    that is not two runs of letters joined by one hyphen."""
    match = re.fullmatch(r"([A-Za-z]+-)[A-Za-z]+[.,;:!?]?", word)
    return len(match.group(1)) if match else None


def split_piece(piece: Piece, at: int, add_hyphen: bool) -> tuple[Piece, Piece]:
    """`piece` broken after its first `at` characters, a hyphen added to the first part where `add_hyphen` (a
    syllable's break; a compound's own hyphen is already there)."""
    first = Piece(piece.text[:at] + ("-" if add_hyphen else ""), piece.start, piece.start + at)
    return first, Piece(piece.text[at:], piece.start + at, piece.end)


def break_lines(pieces: list[Piece], width_of: Callable[[str], float], max_width: float,
                forced: Iterable[int] = ()) -> list[list[Piece]]:
    """`pieces` broken into lines no wider than `max_width` (a piece wider than that gets a line of its own), a line
    ending after each index in `forced`, the other breaks where the sum of the squared slack of every line but the
    last is least."""
    n = len(pieces)
    widths = [width_of(piece.text) for piece in pieces]
    space = width_of(" ")
    next_forced = [n] * (n + 1)  # next_forced[i]: the first forced break at or after piece i
    forced_set = set(forced)
    for index in range(n - 1, -1, -1):
        next_forced[index] = index if index in forced_set else next_forced[index + 1]
    cost = [0.0] + [float("inf")] * n  # cost[j]: the least cost of lines holding pieces[:j]
    start_of = [0] * (n + 1)
    for end in range(1, n + 1):
        width = -space
        for start in range(end - 1, -1, -1):
            width += widths[start] + space
            if width > max_width and start < end - 1:
                break
            if next_forced[start] < end - 1:  # a forced break falls inside this line
                break
            slack = 0.0 if end == n else max(max_width - width, 0.0)
            if cost[start] + slack * slack < cost[end]:
                cost[end], start_of[end] = cost[start] + slack * slack, start
    lines, end = [], n
    while end > 0:
        lines.append(pieces[start_of[end]:end])
        end = start_of[end]
    return lines[::-1]


def line_width(line: list[Piece], width_of: Callable[[str], float]) -> float:
    return width_of(" ".join(piece.text for piece in line))


def line_ending_at(lines: list[list[Piece]], piece: Piece) -> list[Piece] | None:
    """The line whose last piece is `piece`, or None when `piece` ends no line."""
    return next((line for line in lines if line[-1] is piece), None)
