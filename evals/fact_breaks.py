"""Where a laid-out document's lines break around its asked fact: the reading text as blocks, the fact's parts in
it, and each block's lines, the fact's broken as a layout asks (whole on a line, between the entity's words, before
its value, at a hyphen inside one of its words), with the other breaks a typesetter would make (lines evenly
filled, a few long words and a compound hyphenated).

It lays out no page and writes no file (`layouts`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from reportlab.pdfbase.pdfmetrics import stringWidth

from evals.line_breaking import (Piece, break_lines, compound_point, hyphen_point, line_ending_at, line_width,
                                 pieces_of, split_piece)
from evals.pages import Line
from evals import eval_task
from longqa.demo_model.fact import Fact

MIN_FILL = 0.7  # a line ended by a chosen break inside the fact is at least this full, as ragged lines are
HYPHEN_FILL = 0.85  # a line ended by a hyphenated word elsewhere is at least this full: hyphens fill lines
ORDINARY_HYPHENS = 4  # long words of other paragraphs hyphenated in the hyphenated layouts


@dataclass(frozen=True)
class Block:
    """A block of the reading text (a title, heading, paragraph or list item) and where it starts in it."""

    kind: str
    text: str
    start: int

    def pieces(self) -> list[Piece]:
        return pieces_of(self.text, self.start)


def place_blocks(parts: list[tuple[str, str]]) -> tuple[str, list[Block]]:
    """The reading text of (kind, text) blocks, a blank line between them, and each block where it stands."""
    blocks, start = [], 0
    for kind, text in parts:
        blocks.append(Block(kind, text, start))
        start += len(text) + 2
    return "\n\n".join(text for _, text in parts), blocks


@dataclass(frozen=True)
class FactPlace:
    """Where the fact sentence's parts start in the reading text."""

    start: int
    end: int
    entity_start: int
    value_start: int

    @classmethod
    def find(cls, text: str, fact: Fact) -> FactPlace:
        assert text.count(fact.sentence) == 1, fact.sentence
        start = text.index(fact.sentence)
        end = start + len(fact.sentence)
        return cls(start, end, start + len(f"The {fact.attribute} of "), end - 1 - len(fact.value))

    def part_of(self, piece: Piece) -> str:
        return "value" if piece.start >= self.value_start else "entity" if piece.start >= self.entity_start else \
            "attribute"

    def gap_kind(self, left: Piece, right: Piece) -> str:
        """What a line break between two of the fact's pieces falls between ("hyphen in entity": inside one of the
        entity's words)."""
        if left.end == right.start:
            return f"hyphen in {self.part_of(left)}"
        if right.start == self.value_start:
            return "is|value"
        if left.start >= self.value_start:
            return "value"
        if right.start == self.value_start - len("is "):
            return "entity|is"
        if right.start == self.entity_start:
            return "of|entity"
        return "entity" if left.start >= self.entity_start else "attribute"


GAP_TIERS = (("entity", "entity|is"), ("of|entity", "is|value"), ("attribute", "value"))  # most wanted first
GAP_KINDS = tuple(kind for tier in GAP_TIERS for kind in tier)


@dataclass(frozen=True)
class Measure:
    """How wide a text is (`width_of`, in points or characters) and how wide a line may be."""

    width_of: Callable[[str], float]
    max_width: float

    def lines(self, pieces: list[Piece], forced=()) -> list[list[Piece]]:
        return break_lines(pieces, self.width_of, self.max_width, forced)

    def fill(self, line: list[Piece] | None) -> float:
        return 0.0 if line is None else line_width(line, self.width_of) / self.max_width


def font_measure(font: str, size: float, max_width: float) -> Measure:
    return Measure(lambda text: stringWidth(text, font, size), max_width)


def characters(max_width: int) -> Measure:
    return Measure(len, max_width)


@dataclass(frozen=True)
class Variant:
    """A way to break a paragraph: its pieces (a word maybe split), the breaks it forces, and the piece whose line's
    fill decides whether it looks typeset."""

    pieces: list[Piece]
    forced: frozenset[int]
    decisive: Piece


def choose_variant(tiers: list[list[Variant]], measure: Measure, rng: random.Random,
                   min_fill: float = MIN_FILL) -> tuple[list[list[Piece]], Variant]:
    """The lines of a variant of the first tier that has one whose decisive line is at least `min_fill` full (one
    picked at random among those), else of the fullest of all."""
    tried = []
    for tier in tiers:
        scored = []
        for variant in tier:
            lines = measure.lines(variant.pieces, variant.forced)
            scored.append((measure.fill(line_ending_at(lines, variant.decisive)), lines, variant))
        good = [entry for entry in scored if entry[0] >= min_fill]
        if good:
            _, lines, variant = rng.choice(good)
            return lines, variant
        tried += scored
    _, lines, variant = max(tried, key=lambda entry: entry[0])
    return lines, variant


def fact_indices(pieces: list[Piece], place: FactPlace) -> list[int]:
    return [index for index, piece in enumerate(pieces) if place.start <= piece.start < place.end]


def break_fact(pieces: list[Piece], place: FactPlace, measure: Measure, rng: random.Random,
               allowed: tuple[str, ...] = GAP_KINDS) -> list[list[Piece]]:
    """The fact's paragraph with a line break inside the fact, between the entity's words or before "is" where the
    lines allow, else in the next wanted place of the `allowed` kinds."""
    gaps = [(index, place.gap_kind(pieces[index], pieces[index + 1])) for index in fact_indices(pieces, place)[:-1]]
    tiers = [[Variant(pieces, frozenset({index}), pieces[index]) for index, kind in gaps
              if kind in tier and kind in allowed] for tier in GAP_TIERS]
    return choose_variant([tier for tier in tiers if tier], measure, rng)[0]


def fact_on_own_line(pieces: list[Piece], place: FactPlace, measure: Measure) -> list[list[Piece]]:
    """The fact's paragraph with the fact sentence on a line of its own (one piece, so that no break falls inside it
    even where it is wider than a line: such a line is drawn smaller)."""
    indices = fact_indices(pieces, place)
    first, last = indices[0], indices[-1]
    whole = Piece(" ".join(piece.text for piece in pieces[first:last + 1]), pieces[first].start, pieces[last].end)
    merged = pieces[:first] + [whole] + pieces[last + 1:]
    return measure.lines(merged, {first} | ({first - 1} if first else set()))


def hyphenate_fact(pieces: list[Piece], place: FactPlace, measure: Measure,
                   rng: random.Random) -> list[list[Piece]]:
    """The fact's paragraph with a word of the entity's name (else of the attribute, else of the value) hyphenated at
    a line's end; a plain break inside the fact where none of its words can be."""
    tiers: list[list[Variant]] = [[], [], []]
    for index in fact_indices(pieces, place):
        piece = pieces[index]
        at = hyphen_point(piece.text) if len(piece.text.rstrip(".")) >= 6 else None  # no "Li-ght"
        if at is None or piece.start < place.start + len("The "):
            continue
        first, second = split_piece(piece, at, add_hyphen=True)
        tier = 2 if piece.start >= place.value_start else 0 if piece.start >= place.entity_start else 1
        tiers[tier].append(Variant(pieces[:index] + [first, second] + pieces[index + 1:], frozenset({index}), first))
    if not any(tiers):
        return break_fact(pieces, place, measure, rng)
    return choose_variant([tier for tier in tiers if tier], measure, rng)[0]


def hyphenate_word(pieces: list[Piece], measure: Measure, rng: random.Random,
                   compound: bool) -> list[list[Piece]] | None:
    """A paragraph with one of its words broken at a line's end: a compound after its own hyphen, or a long word of
    letters hyphenated; None where no such word leaves its line well filled."""
    variants = []
    for index, piece in enumerate(pieces[6:], 6):  # far enough in for a full line before it
        at = compound_point(piece.text) if compound else \
            hyphen_point(piece.text) if len(piece.text) >= 8 and piece.text.islower() else None
        if at is not None:
            first, second = split_piece(piece, at, add_hyphen=not compound)
            variants.append(Variant(pieces[:index] + [first, second] + pieces[index + 1:], frozenset({index}), first))
    rng.shuffle(variants)
    if not variants:
        return None
    lines, variant = choose_variant([variants[:6]], measure, rng, HYPHEN_FILL)
    return lines if measure.fill(line_ending_at(lines, variant.decisive)) >= HYPHEN_FILL else None


def compound_sentence() -> str:
    """The evaluation generator's own prose sentence with a compound word ("a four-hour soak test")."""
    return next(template for templates in eval_task.REGISTERS.values() for template in templates
                if "{" not in template and any(compound_point(word) for word in template.split()))


def with_compound(paragraphs: list[str], fact: Fact, measure: Measure, rng: random.Random) -> list[str]:
    """The paragraphs, with the generator's compound sentence added to one without the fact when no such paragraph
    has a compound word that breaks well at a line's end."""
    others = [i for i, paragraph in enumerate(paragraphs) if fact.sentence not in paragraph]
    if any(hyphenate_word(pieces_of(paragraphs[i]), measure, random.Random(0), compound=True) for i in others):
        return paragraphs
    for i in rng.sample(others, len(others)):
        extended = f"{paragraphs[i]} {compound_sentence()}"
        if hyphenate_word(pieces_of(extended), measure, random.Random(0), compound=True):
            return paragraphs[:i] + [extended] + paragraphs[i + 1:]
    raise ValueError("no paragraph where a compound word breaks well at a line's end")


def break_blocks(blocks: list[Block], place: FactPlace, measure: Measure, rng: random.Random,
                 fact_style: str) -> list[list[list[Piece]]]:
    """Every block's lines, evenly filled, the fact's block by `fact_style`: "plain", as any other; "whole", the fact
    on a line of its own; "wrapped", a break inside it; "before-value", a break inside it before its value;
    "hyphenated", a word of it hyphenated at a line's end, and a compound word and four long words of other
    paragraphs too."""
    broken = [measure.lines(block.pieces()) for block in blocks]
    fact_block = next(i for i, block in enumerate(blocks) if block.start <= place.start < block.start + len(block.text))
    pieces = blocks[fact_block].pieces()
    if fact_style == "plain":
        pass
    elif fact_style == "whole":
        broken[fact_block] = fact_on_own_line(pieces, place, measure)
    elif fact_style == "wrapped":
        broken[fact_block] = break_fact(pieces, place, measure, rng)
    elif fact_style == "before-value":
        broken[fact_block] = break_fact(pieces, place, measure, rng, tuple(k for k in GAP_KINDS if k != "value"))
    elif fact_style == "hyphenated":
        broken[fact_block] = hyphenate_fact(pieces, place, measure, rng)
        others = [i for i, block in enumerate(blocks) if i != fact_block and block.kind == "paragraph"]
        rng.shuffle(others)
        for i in others:
            lines = hyphenate_word(blocks[i].pieces(), measure, rng, compound=True)
            if lines:
                broken[i] = lines
                others.remove(i)
                break
        else:
            raise ValueError("no compound word breaks well at a line's end")
        hyphenated = 0
        for i in others:
            lines = hyphenate_word(blocks[i].pieces(), measure, rng, compound=False)
            if lines:
                broken[i], hyphenated = lines, hyphenated + 1
            if hyphenated == ORDINARY_HYPHENS:
                break
    else:
        raise ValueError(f"unknown fact style {fact_style!r}")
    return broken


def fact_breaks(lines: list[Line], place: FactPlace) -> str:
    """Where the fact sentence's lines break ("entity|is", "hyphen in entity", ...; "none": on one line)."""
    kinds = [place.gap_kind(line.pieces[-1], after.pieces[0]) for line, after in zip(lines, lines[1:])
             if place.start <= line.pieces[-1].start and after.pieces[0].start < place.end]
    return ", ".join(kinds) or "none"


def fact_parts(lines: list[Line], place: FactPlace) -> tuple[str, ...]:
    """The fact sentence's parts as drawn, one per line that holds some of it."""
    parts = [" ".join(p.text for p in line.pieces if place.start <= p.start < place.end) for line in lines]
    return tuple(part for part in parts if part)
