"""A document's text as a person reads it: the lines of a paragraph joined with a space, a word hyphenated at a
line's end joined, running headers, footers and page numbers left out, a sentence that runs over a page break read
as one; paragraph, heading, list and page boundaries kept, and where each page and each of the file's lines starts
in the flowing text.

Every reader ends here (`flow_text` for text, Markdown and pasted text; `flow_lines` for a PDF's lines in reading
order), so the model, the ranker and the not-found rule read one text in which a line break is a boundary, never a
wrap. It reads no file and knows nothing of PDFs' geometry (`pdf_layout` puts a page's lines in reading order).
"""

from __future__ import annotations

import bisect
import math
import re
from array import array
from dataclasses import dataclass, field

# Where a line ends a sentence or a clause that a list or a label introduces: the break after it is kept.
_ENDS_SENTENCE = re.compile(r"[.!?:\u2026\u3002\uff01\uff1f][\"'\u201d\u2019)\]]*\s*$")
# A full stop after an initial or a title ("H. G.", "Dr.") ends no sentence: the line goes on.
_ENDS_ABBREVIATION = re.compile(r"(?:^|[\s(])(?:[A-Z]|St|Dr|Mr|Mrs|Ms|Mt|Prof|Rev|Capt|Col|Gen|Lt|Sgt|Fr|Jr|Sr|No|"
                                r"Nos|vs|approx|Inc|Ltd|Co|Fig|Figs|Eq|Vol|pp|cf|e\.g|i\.e)\.\s*$")
_HAS_SENTENCE_END = re.compile(r"[.!?\u2026\u3002\uff01\uff1f][\"'\u201d\u2019)\]]*(?:\s|$)")
# A line that starts something of its own: a list item, a Markdown heading, quote, table row or code fence, a
# setext underline or a rule.
# A capital letter and a full stop is an initial ("G. K. Whitlock"), and capitals that read as a Roman numeral are a
# name's too ("Blospif XL."): capitals mark items with ")" only.
_STARTS_ITEM = re.compile(r"\s*(?:[-*+\u2022\u25e6\u2023\u2043\u00b7\u2013\u2014](?:\s|$)|\(?(?:\d{1,3}|[a-z]|"
                          r"[ivxlcdm]{1,6})[.)](?:\s|$)|\(?[A-Z]\)(?:\s|$)|#{1,6}(?:\s|$)|>|\||```|~~~|"
                          r"[=\-_*]{3,}\s*$)")
_RULE = re.compile(r"\s*[=\-_*]{3,}\s*")  # a rule, or a Markdown heading's underline
_TABLE_GAP = re.compile(r"\S {3,}\S|\t")  # columns aligned with spaces or tabs: a table's row, not prose
# A word cut by a hyphen at the line's end, and the rest of it at the next line's start.
_HYPHEN_END = re.compile(r"(\w+)([-\u00ad\u2010])$")  # searched in a line's last HYPHEN_REACH characters only
HYPHEN_REACH = 64
_WORD_START = re.compile(r"\w+")
# Words English writes with a hyphen before another word: "self-\ncontained" keeps it where the document never
# writes the word either way on one line.
_HYPHENATED_PREFIXES = frozenset({"self", "non", "well", "half", "quasi", "cross", "one", "two", "three", "four",
                                  "five", "six", "seven", "eight", "nine", "ten", "first", "second", "third"})
_WORDS = re.compile(r"\w+(?:-\w+)*")
_COPULAS = frozenset({"is", "are", "was", "were"})
TITLE_MAX_WORDS = 8
# Words a sentence goes on after: a line ending with one is no title ("The alias of the Petrel is" / "Vauvgoat.").
_FUNCTION_WORDS = frozenset("a an the of to in on at by for with from and or but nor is are was were be been being "
                            "as that which who whom whose than into onto its their his her our your my this these "
                            "those has have had not".split())
_DIGITS = re.compile(r"\d+")
# A line that is only a page's number: "12", "- 12 -", "Page 12", "Page 12 of 16", "12 / 16", "p. 12", "[Page 3]".
_PAGE_NUMBER = re.compile(r"[\s\-\u2013\u2014\[(]*(?:(?:page|p\.|pg\.?|seite|página|pagina)\s*)?"
                          r"(?:\d+|(?=[ivxlcdm])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3}))"
                          r"(?:\s*(?:of|/|von|de)\s*\d+)?[\s\-\u2013\u2014\])]*", re.IGNORECASE)
RUNNING_LINES_PER_EDGE = 2  # a page's first and last lines that can be a running header or footer
RUNNING_SHARE = 0.2  # of the pages a line must stand on (top or foot, digits aside) to be a running one
# A wrap leaves the next word on the following line because it did not fit: a title at a paragraph's start with
# room for it (counted in characters, with this slack for proportional fonts, whose lines of one width hold more or
# fewer characters) is no wrap.
WRAP_SLACK = 0.85
WRAP_COLUMNS = (60, 80)  # the widths plain text is wrapped to (RFCs 72, mail 72-78, editors 80)
LONG_WORD = 12  # a wrapped line ends at most this far from its width
FULL_SHARE = 0.75  # of a wrapped paragraph's lines, all but its last, that fill its width


@dataclass(frozen=True)
class Line:
    """One line of a document as its reader found it, in reading order: its text (without the break), the page it
    stands on (0-based), whether a paragraph boundary comes before it (a blank line, a gap, a heading), whether it is
    a heading, its line in the file (1-based; None for a PDF), and whether it is kept as it is."""

    text: str
    page: int = 0
    paragraph_before: bool = False
    is_heading: bool = False
    source_line: int | None = None
    verbatim: bool = False  # a line of fenced code: never joined to its neighbours


@dataclass(frozen=True)
class LineMap:
    """Where each of a file's lines starts in the flowing text: `starts[i]` is the offset of line `numbers[i]`
    (lines left out, blank or running, have no entry: an offset belongs to the line before it)."""

    starts: array = field(default_factory=lambda: array("q"))
    numbers: array = field(default_factory=lambda: array("q"))

    def line_at(self, offset: int) -> int | None:
        index = bisect.bisect_right(self.starts, offset) - 1
        return self.numbers[index] if index >= 0 else (self.numbers[0] if self.numbers else None)


@dataclass(frozen=True)
class Flow:
    """A document's flowing text, where each page starts in it (empty for a text without pages), where each file line
    starts (None where the reader has no lines of the file: a PDF) and where its headings stand (offset, level,
    title: the Markdown's are found in the flowing text by its reader)."""

    text: str
    page_starts: tuple[int, ...] = ()
    lines: LineMap | None = None
    headings: tuple[tuple[int, int, str], ...] = ()


def is_page_number(text: str) -> bool:
    """Whether a line holds nothing but a page's number ("12", "- 12 -", "Page 12 of 16", "xii")."""
    return bool(text.strip()) and _PAGE_NUMBER.fullmatch(text) is not None


def running_form(text: str) -> str:
    """A line as running headers and footers repeat it: digits and white space aside, in lower case."""
    return " ".join(_DIGITS.sub("#", text.lower()).split())


def running_lines(edges: list[list[str]], places: list[list[object]] | None = None) -> list[set[int]]:
    """For each page, which of its edge lines (`edges[page]`: its first and last few lines, in order) are running
    headers, footers or page numbers: its first or last line where that is only a page number; lines whose form
    (`running_form`, digits aside) stands on RUNNING_SHARE of the pages and on at least two (all of them, in a
    document of two pages); and where `places` gives each line's place (a PDF's height on the page), the same line
    in one place on two pages, and lines that carry their page's printed number in the place where RUNNING_SHARE of
    the pages carry theirs ("Chapter 6: Notes 33", the number counting with the pages). A document of one page has
    none."""
    n_pages = len(edges)
    if n_pages < 2:
        return [set() for _ in edges]
    has_places = places is not None
    places = places or [[None] * len(lines) for lines in edges]
    same: dict[tuple, set[int]] = {}  # (the line as written or its form, place): the pages that have it
    numbered: dict[tuple, set[int]] = {}  # (place, printed number less the page's index): the pages that have it
    for page, (lines, where) in enumerate(zip(edges, places)):
        for text, place in zip(lines, where):
            same.setdefault((_same_key(text, has_places), place), set()).add(page)
            for number in _numbers(text) if has_places else ():
                numbered.setdefault((place, number - page), set()).add(page)
    needed = n_pages if n_pages == 2 else max(2, math.ceil(RUNNING_SHARE * n_pages))
    repeated = 2 if has_places else needed
    counting = {key for key, pages in numbered.items() if len(pages) >= needed}

    def is_running(page: int, index: int, n_edge: int, text: str, place: object) -> bool:
        if not text.strip():
            return False
        if index in (0, n_edge - 1) and is_page_number(text):
            return True
        if len(same[_same_key(text, has_places), place]) >= repeated:
            return True
        return any((place, number - page) in counting for number in _numbers(text))

    return [{i for i, (text, place) in enumerate(zip(lines, where)) if is_running(page, i, len(lines), text, place)}
            for page, (lines, where) in enumerate(zip(edges, places))]


def _same_key(text: str, exact: bool) -> str:
    """What two running lines share: the line itself where its place is known (a page's place is evidence enough),
    else its form, digits aside (a text file's "RFC 791 ... September 1981" headers, "[Page 3]" footers)."""
    return " ".join(text.split()) if exact else running_form(text)


def _numbers(text: str) -> set[int]:
    return {int(n) for n in _DIGITS.findall(text) if len(n) <= 5}


def edge_indices(n_lines: int) -> list[int]:
    """Which of a page's `n_lines` lines may be running ones: its first and last RUNNING_LINES_PER_EDGE, fewer on a
    short page, so that at least one line in the middle is the page's own (a page of two lines has none)."""
    per_edge = min(RUNNING_LINES_PER_EDGE, (n_lines - 1) // 2)
    return list(range(per_edge)) + list(range(n_lines - per_edge, n_lines)) if per_edge > 0 else []


def is_prose(lines: list[str]) -> bool:
    """Whether a block of lines is prose: some sentence in it ends (a list of notes without full stops is not)."""
    return any(_HAS_SENTENCE_END.search(line) for line in lines)


def ends_sentence(line: str) -> bool:
    """Whether `line` ends with a sentence's end (not an initial's or a title's full stop) or a colon."""
    stripped = line.rstrip()
    return bool(_ENDS_SENTENCE.search(stripped)) and not _ENDS_ABBREVIATION.search(stripped)


def ends_line_for_good(line: str) -> bool:
    """Whether the break after `line` is one a writer made: after an empty line, a table's row, a heading, a rule or
    a heading's underline, or a fence."""
    stripped = line.rstrip()
    return not stripped or bool(_TABLE_GAP.search(stripped.strip())) or bool(_RULE.fullmatch(stripped)) or \
        stripped.lstrip().startswith(("#", "|", "```", "~~~"))


def starts_line_for_good(line: str) -> bool:
    """Whether `line` starts something of its own (a list item, heading, quote, table row, rule or fence), or is a
    row of a table aligned with spaces."""
    return bool(_STARTS_ITEM.match(line)) or bool(_TABLE_GAP.search(line.strip()))


class Vocabulary:
    """The words a document writes on one line, built once when a hyphen at a line's end needs it."""

    def __init__(self, text: str):
        self._text = text
        self._words: set[str] | None = None

    def __contains__(self, word: str) -> bool:
        if self._words is None:
            self._words = {w.lower() for w in _WORDS.findall(self._text)}
        return word.lower() in self._words


def joined_break(line: str, following: str, prose: bool, vocabulary: Vocabulary, opens: bool = False,
                 wraps: bool = False) -> str | None:
    """What the break between `line` and the `following` line of one paragraph becomes: " " where a sentence wraps,
    "" where a word was hyphenated at the line's end ("Ves-" "mira"), "-" where a real hyphen stands there
    ("self-" "contained"), None where the break is the writer's own.

    A break inside a paragraph of prose is a wrap unless the following line starts an item of its own, or the line
    ends a sentence in a paragraph whose lines its writer ended (`wraps` False, as notes of one sentence a line;
    `wraps` True: the paragraph was wrapped to a width, at a sentence's end as anywhere else, `is_wrapped`); a
    value's line before a capital stays apart ("... is 48,213" / "The capital ...": notes), and so
    does a line that `opens` its paragraph when the following line starts with a capital and its first word would
    have fitted on the line, since a wrap happens only where the next word does not fit, and the line reads as a title
    (`_is_title`: "Grandpa's lentil soup" / "It feeds six and keeps for three days.").
    """
    following_width = len(following.rstrip())
    line, following = line.rstrip(), following.lstrip()
    if not line or not following or starts_line_for_good(following) or ends_line_for_good(line):
        return None
    hyphen = _HYPHEN_END.search(line, max(0, len(line) - HYPHEN_REACH)) if line.endswith(("-", "\u00ad", "\u2010")) \
        else None
    if hyphen and not line.endswith("--") and following[0].isalnum():
        if hyphen.group(2) == "\u00ad":
            return ""  # a soft hyphen is the typesetter's by definition
        rest = _WORD_START.match(following)
        after = rest.group(0) if rest else ""
        goes_on = following[len(after):len(after) + 1] == "-"  # "state-" / "of-the-art": a compound's own hyphen
        return "-" if goes_on or _keeps_hyphen(hyphen.group(1), after, vocabulary) else ""
    if not prose:
        return None
    if ends_sentence(line):
        return " " if wraps else None
    if line[-1].isdigit() and following[0].isupper():
        return None
    if opens and not following[0].islower() and _is_title(line) and \
            len(line) + 1 + len(following.split(None, 1)[0]) <= WRAP_SLACK * following_width:
        return None  # the following line's first word would have fitted: a title, not a wrap
    return " "


def _is_title(line: str) -> bool:
    """Whether a line could be a title: a few words, no verb that states a fact ("is", "was"), not ending with a
    word a sentence goes on after."""
    words = line.lower().split()
    return len(words) <= TITLE_MAX_WORDS and words[-1] not in _FUNCTION_WORDS and not _COPULAS.intersection(words)


def _keeps_hyphen(before: str, after: str, vocabulary: Vocabulary) -> bool:
    """Whether a hyphen at a line's end belongs to the words ("self-contained", "Anglo-Saxon", "COVID-19") rather
    than to the typesetter: kept before a capital or a digit, where the document writes the hyphenated form and not
    the joined one, or after a prefix English hyphenates."""
    if not after or not after[0].islower() or before.isupper() or any(c.isdigit() for c in before):
        return True
    if f"{before}-{after}" in vocabulary:
        return True
    if f"{before}{after}" in vocabulary:
        return False
    return before.lower() in _HYPHENATED_PREFIXES


def flow_lines(lines: list[Line], n_pages: int | None = None, joints: list[list[str | None]] | None = None) -> Flow:
    """The flowing text of lines in reading order (running lines already left out): each line as it is (a file's
    indentation too), each break inside a paragraph what `joined_break` makes of it (`joints`, each paragraph's as
    `paragraph_joints` gives them, where the caller has them), "\\n\\n" at a paragraph boundary, around a heading
    and at a page break that no sentence runs over, "\\n" at any other kept break; where each page starts (its
    first line's offset, inside a sentence that runs over from the page before), where each file line starts, and the
    headings."""
    blocks = _paragraphs(lines)
    joints = joints if joints is not None else paragraph_joints(blocks)
    n_pages = n_pages if n_pages is not None else (lines[-1].page + 1 if lines else 0)
    page_starts: list[int | None] = [None] * n_pages
    starts, numbers = array("q"), array("q")
    headings: list[tuple[int, int, str]] = []
    pieces: list[str] = []
    length = 0
    previous: Line | None = None
    for block, block_joints in zip(blocks, joints):
        for i, line in enumerate(block):
            text = line.text.rstrip()
            joint = block_joints[i - 1] if i else None
            if joint is not None:
                last = pieces[-1].rstrip()
                if joint == "":
                    last = last[:-1]  # the typesetter's hyphen goes with the break
                length += len(last) - len(pieces[-1])
                pieces[-1] = last
                text = text.lstrip()
                if joint == " ":
                    pieces.append(" ")
                    length += 1
            elif pieces:
                apart = line.page != previous.page or i == 0 and (line.paragraph_before or line.is_heading or
                                                                   previous.is_heading)
                pieces.append("\n\n" if apart else "\n")
                length += len(pieces[-1])
            if page_starts[line.page] is None:
                page_starts[line.page] = length
            if line.source_line is not None:
                starts.append(length)
                numbers.append(line.source_line)
            if line.is_heading:
                headings.append((length, 1, " ".join(text.split())))
            pieces.append(text)
            length += len(text)
            previous = line
    return Flow("".join(pieces), _filled_page_starts(page_starts, length),
                LineMap(starts, numbers) if numbers else None, tuple(headings))


def is_wrapped(block: list[Line]) -> bool:
    """Whether a paragraph's lines were wrapped to a width rather than ended by their writer: fewer than half of them
    end a sentence (notes of a sentence a line end them all; wrapped prose about one line in five), or, in three
    lines or more, nearly all but the last fill a plain-text width (WRAP_COLUMNS) to within a long word."""
    if len(block) < 2:
        return False
    ended = sum(ends_sentence(line.text) for line in block[:-1])
    if ended < 0.5 * (len(block) - 1):
        return True
    lengths = [len(line.text.rstrip()) for line in block]
    width = max(lengths)
    return len(block) >= 3 and WRAP_COLUMNS[0] <= width <= WRAP_COLUMNS[1] and \
        sum(n >= width - LONG_WORD for n in lengths[:-1]) >= FULL_SHARE * (len(block) - 1)


def _paragraphs(lines: list[Line]) -> list[list[Line]]:
    """Lines cut into paragraphs: at a paragraph boundary, and around a heading."""
    blocks: list[list[Line]] = []
    for line in lines:
        if not blocks or line.paragraph_before or line.is_heading or blocks[-1][-1].is_heading:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return blocks


def _filled_page_starts(page_starts: list[int | None], length: int) -> tuple[int, ...]:
    """Each page's start; a page without text starts where the next text does (at the end for the last pages).
    A text of one page has none."""
    filled: list[int] = []
    following = length
    for start in reversed(page_starts):
        following = start if start is not None else following
        filled.append(following)
    filled.reverse()
    return tuple(filled) if len(filled) > 1 else ()


def flow_text(text: str, page_starts: tuple[int, ...] = ()) -> Flow:
    """The flowing text of a text file or pasted text (already cleaned, its pages where form feeds ended them):
    `flow_lines` of its lines, blank lines marking paragraphs, fenced code kept line by line, and where it has pages,
    its running headers, footers and page numbers left out. A text with neither wraps nor running lines comes back
    unchanged, so that every offset into it stays."""
    raw_lines = text.split("\n")
    page_of = _pages_of_lines(raw_lines, page_starts)
    n_pages = len(page_starts) if page_starts else 1
    running = _running_text_lines(raw_lines, page_of, n_pages) if page_starts else set()
    lines: list[Line] = []
    blank_before, fenced = False, False
    for number, raw in enumerate(raw_lines):
        if number in running:
            continue
        if not raw.strip():
            blank_before = True
            continue
        fence = raw.lstrip().startswith(("```", "~~~"))
        # a page's first line is no new paragraph for its margin's blank lines: a sentence may run on over the break
        new_page = bool(lines) and page_of[number] != lines[-1].page
        # the file's line: each form feed that ended a page became one more line break here (`paged_text`)
        lines.append(Line(raw, page_of[number], blank_before and not new_page, False, number + 1 - page_of[number],
                          fenced or fence))
        fenced = fenced != fence
        blank_before = False
    joints = paragraph_joints(_paragraphs(lines))
    if not running and all(joint is None for block_joints in joints for joint in block_joints):
        return Flow(text, page_starts, None, ())  # no wrap to join (most notes, one fact a line): as it was
    return flow_lines(lines, n_pages, joints)


def paragraph_joints(blocks: list[list[Line]]) -> list[list[str | None]]:
    """What each break of each paragraph becomes (`_joints`), the document's own spelling deciding hyphens."""
    vocabulary = Vocabulary("\n".join(line.text for block in blocks for line in block))
    return [list(_joints(block, vocabulary)) for block in blocks]


def _joints(block: list[Line], vocabulary: Vocabulary):
    """What each break of a paragraph becomes (`joined_break`), from the break after its first line on."""
    prose, wrapped = is_prose([line.text for line in block]), is_wrapped(block)
    for i in range(1, len(block)):
        before, line = block[i - 1], block[i]
        yield None if line.verbatim or before.verbatim else \
            joined_break(before.text, line.text, prose, vocabulary, opens=i == 1, wraps=wrapped)


def _pages_of_lines(raw_lines: list[str], page_starts: tuple[int, ...]) -> list[int]:
    """The page (0-based) of each line of a text whose pages start at `page_starts` (all 0 without pages)."""
    if not page_starts:
        return [0] * len(raw_lines)
    pages, offset = [], 0
    for raw in raw_lines:
        pages.append(bisect.bisect_right(page_starts, offset) - 1)
        offset += len(raw) + 1
    return pages


def _running_text_lines(raw_lines: list[str], page_of: list[int], n_pages: int) -> set[int]:
    """The numbers (0-based) of a paged text's lines that are running headers, footers or page numbers: among each
    page's first and last RUNNING_LINES_PER_EDGE lines that are not blank."""
    by_page: list[list[int]] = [[] for _ in range(n_pages)]
    for number, raw in enumerate(raw_lines):
        if raw.strip():
            by_page[page_of[number]].append(number)
    edges = [[numbers[i] for i in edge_indices(len(numbers))] for numbers in by_page]
    found = running_lines([[raw_lines[n] for n in edge] for edge in edges])
    return {edge[i] for edge, indices in zip(edges, found) for i in indices}
