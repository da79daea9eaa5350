"""Real PDFs that nobody here wrote (issue 57, item 5): manuals and papers that Debian's documentation packages ship,
installed by .ci/run (a test skips, naming the package, where its file is absent). Each is read by the public reader
with its default limits: no error, within the limits, every page; and each known sentence that in print crosses a
line end, a hyphenation, a column or a page comes out whole, on one line, without the running header, footer or page
number that sits inside it in print, located at the page where it starts.

The PDFs: cvsclient.pdf (texinfo manual: a running header of chapter and page number, justified and hyphenated),
cvs-paper.pdf (a groff paper: page numbers such as "-8-" at the top), loudness-meter.pdf (a two-column paper of the
Linux Audio Conference), dtc-paper.pdf (a two-column paper set in bitmap fonts, page numbers at the foot) and the
bzip2 manual (DocBook: a running header over a rule, page numbers at the foot). The known sentences are written as a
reader reads them: words joined by single spaces, a hyphen at a line's end gone where it split a word, the file's own
characters otherwise (dtc-paper.pdf's bitmap fonts lose their "fi", "fl" and "ff" ligatures: no sentence here has one).
"""

from __future__ import annotations

import gzip
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from longqa_core.documents import (DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_PAGES, DEFAULT_MAX_READ_S, Document,
                                   locate)
from longqa_core.files import read_document
from longqa_core.limits import DEFAULT_MAX_TOTAL_TOKENS, max_chars_for


@dataclass(frozen=True)
class Known:
    """A sentence (or the stretch of one) as a reader reads it, the PDF page (1-based) where it starts, what it crosses
    in print, and the running header, footer or page number that sits inside it there."""

    text: str
    page: int
    crosses: str  # "line", "hyphen", "column" or "page" (and combinations)
    inside_in_print: tuple[str, ...] = ()


@dataclass(frozen=True)
class RealPdf:
    package: str
    path: str  # as installed; Debian may compress it (path + ".gz")
    pages: int
    chars: tuple[int, int]  # a plausible length of its text
    known: tuple[Known, ...]
    # running headers or footers (a pattern) and how often the text may still hold it (a title or the contents)
    running: tuple[tuple[str, int], ...] = ()


PDFS = {
    "cvsclient": RealPdf(
        "cvs", "/usr/share/doc/cvs/cvsclient.pdf", 34, (70_000, 100_000),
        known=(
            Known("Typically the server will provide a series of ‘E’ responses followed by ‘error’.", 5,
                  "hyphen"),
            Known("The current CVS implementation on unix does a little bit more than just maintain these two "
                  "settings, but it doesn’t really have a nice general facility to store or version control the "
                  "mode, even on unix, much less across operating systems with diverse protection features.", 7, "page",
                  ("Chapter 5: The CVS client/server protocol",)),
            Known("Note that this is not the primary mechanism for achieving case-insensitivity; for the most part the "
                  "client keeps track of the case which the server wants to use and takes care to always use that "
                  "case regardless of what the user specifies.", 15, "page",
                  ("Chapter 5: The CVS client/server protocol",)),
            # the only page that has chapter 6's header: the header's place and look, not its repetition, tell it
            Known("This may cause problems with certain multibyte character sets, in which octets 10 and 0 will "
                  "appear in the middle of other characters.", 33, "page",
                  ("Chapter 6: Notes on the Protocol",)),
        ),
        running=((re.escape("Chapter 5: The CVS client/server protocol"), 1),),  # on 25 pages in print
    ),
    "cvs-paper": RealPdf(
        "cvs", "/usr/share/doc/cvs/cvs-paper.pdf", 12, (22_000, 33_000),
        known=(
            # groff places some words without a space between them ("RCS,along", "anyarbitrary"): these stop short
            Known("This paper discusses the approach that Prisma took in adapting a standard revision control system",
                  2, "hyphen"),
            Known("With equal ease, one can also extract an exact copy of the source files", 7, "page", ("-8-",)),
            Known("The -f option causes only files that match the specified tag to be extracted, while the -p option "
                  "automatically prunes empty directories.", 8, "hyphen"),
        ),
        running=((r"(?<![\w.-])-\d{1,2}-(?![\w-])", 0),),  # "-2-" ... "-12-" over even pages
    ),
    "loudness-meter": RealPdf(
        "ebumeter-doc", "/usr/share/doc/ebumeter-doc/loudness-meter.pdf", 6, (17_000, 25_000),
        known=(
            Known("Two more are in preparation but not yet available at the time of writing.", 3, "page"),
            Known("In a second step all points more than 8 dB below the first computed value are removed and the "
                  "average power is recomputed.", 4, "column"),
            Known("There is no specified limit on the lenght of the integration period for the I and LRA measurements.",
                  5, "column+hyphen"),
            Known("The M (momentary) response is the mean squared level averaged over a rectangular window of 400 ms.",
                  4, "hyphen"),
        ),
    ),
    "dtc-paper": RealPdf(
        "device-tree-compiler", "/usr/share/doc/device-tree-compiler/dtc-paper.pdf", 7, (19_000, 28_000),
        known=(
            Known("In May 2005 Ben Herrenschmidt implemented a new approach to handling the device tree that "
                  "addresses all these problems.", 2, "hyphen"),
            Known("in the blob that need recalculation if a section is inserted or removed with memmove().", 2,
                  "column"),
            Known("After writing a bootloader, BootX, for it in 1998, he started contributing to the PowerPC Linux "
                  "port in various areas, mostly around the support for Apple machines.", 6, "page+hyphen", ("6",)),
        ),
    ),
    "bzip2-manual": RealPdf(
        "bzip2-doc", "/usr/share/doc/bzip2/manual.pdf", 38, (75_000, 105_000),
        known=(
            Known("Files of less than about one hundred bytes tend to get larger, since the compression mechanism has "
                  "a constant overhead in the region of 50 bytes.", 6, "page", ("3", "How to use bzip2")),
            Known("This really performs a trial decompression and throws away the result.", 7, "hyphen"),
            Known("The chances of data corruption going undetected is microscopic, about one chance in four billion "
                  "for each file processed.", 7, "line"),
        ),
        # the header over pages 6 to 10; the contents and the chapter's title have it too (cross references add " [2]")
        running=((r"How to use bzip2(?! \[2\])", 2),),
    ),
}


def skip_reason(pdf: RealPdf) -> str:
    """Why a test of `pdf` cannot run here: the Debian package that ships it is not installed."""
    return (f"{pdf.path} is absent: it comes with Debian's {pdf.package} package "
            f"(apt-get install {pdf.package}, as .ci/run does)")


def installed_file(pdf: RealPdf) -> Path:
    for candidate in (Path(pdf.path), Path(pdf.path + ".gz")):
        if candidate.is_file():
            return candidate
    pytest.skip(skip_reason(pdf))


_READ: dict[str, tuple[Document, float]] = {}


def read(key: str) -> tuple[Document, float]:
    """The document the public reader makes of the PDF, with its default limits, and the seconds it took (once)."""
    if key not in _READ:
        pdf = PDFS[key]
        path = installed_file(pdf)
        began = time.perf_counter()
        if path.suffix == ".gz":
            document = read_document(gzip.decompress(path.read_bytes()), name=path.stem)
        else:
            document = read_document(path)
        _READ[key] = document, time.perf_counter() - began
    return _READ[key]


def spaced(text: str) -> str:
    """The text with each run of spaces and tabs as one space: its line breaks stay."""
    return re.sub(r"[ \t]+", " ", text)


def unspaced_offset(text: str, spaced_offset: int) -> int:
    """The offset in `text` of the character at `spaced_offset` in `spaced(text)`."""
    seen = 0
    for match in re.finditer(r"[ \t]+|[^ \t]+", text):
        piece = match.group()
        width = 1 if piece[0] in " \t" else len(piece)
        if seen + width > spaced_offset:
            return match.start() + (0 if piece[0] in " \t" else spaced_offset - seen)
        seen += width
    return len(text)


def first_words(document: Document, known: Known, n_words: int = 5) -> int | None:
    """Where the sentence's first words begin in the reader's text, whatever spaces or line breaks are between them,
    on the page where the sentence begins in print (None: not there)."""
    head = r"\s+".join(map(re.escape, known.text.split()[:n_words]))
    for match in re.finditer(head, document.text):
        if locate(document, match.start(), match.end()).page == known.page:
            return match.start()
    return None


def near(document: Document, known: Known) -> str:
    """What the reader's text holds where the sentence should be, for a failure's message."""
    start = first_words(document, known)
    start = first_words(document, known, 3) if start is None else start
    if start is None:
        return f"its first words ({' '.join(known.text.split()[:3])!r}) are not on page {known.page}"
    return f"the text from its first words: {spaced(document.text[start:start + len(known.text) + 80])!r}"


@pytest.mark.slow
@pytest.mark.parametrize("key", PDFS)
def test_a_real_pdf_reads_within_the_default_limits(key):
    pdf = PDFS[key]
    size = installed_file(pdf).stat().st_size
    document, seconds = read(key)
    assert len(document.page_starts) == pdf.pages <= DEFAULT_MAX_PAGES
    assert document.page_starts[0] == 0
    assert list(document.page_starts) == sorted(set(document.page_starts))
    assert document.page_starts[-1] < document.n_chars
    low, high = pdf.chars
    assert low <= document.n_chars <= high, document.n_chars
    assert document.n_chars <= max_chars_for(DEFAULT_MAX_TOTAL_TOKENS)
    assert size <= DEFAULT_MAX_FILE_BYTES
    assert seconds < DEFAULT_MAX_READ_S


KNOWN = [pytest.param(key, known, id=f"{key}-p{known.page}-{known.crosses}-{number}")
         for key, pdf in PDFS.items() for number, known in enumerate(pdf.known, 1)]


@pytest.mark.parametrize(("key", "known"), KNOWN)
def test_a_sentence_that_crosses_a_line_a_column_or_a_page_comes_out_whole(key, known):
    document, _ = read(key)
    text = spaced(document.text)
    start = text.find(known.text)
    assert start >= 0, f"not whole in {key}: {near(document, known)}"
    start = unspaced_offset(document.text, start)  # the same character in the reader's own text
    assert locate(document, start, start + len(known.text)).page == known.page


PAGE_CROSSING = [pytest.param(key, known, id=f"{key}-p{known.page}-{number}")
                 for key, pdf in PDFS.items() for number, known in enumerate(pdf.known, 1) if known.inside_in_print]


@pytest.mark.parametrize(("key", "known"), PAGE_CROSSING)
def test_no_running_header_or_footer_inside_a_sentence_that_crosses_a_page(key, known):
    document, _ = read(key)
    start = first_words(document, known)
    assert start is not None, f"{key}: {near(document, known)}"
    # from its first words to its last, or as far as the sentence and what sits inside it in print reach
    reach = len(known.text) + sum(len(furniture) + 1 for furniture in known.inside_in_print)
    flat = " ".join(document.text[start:start + 2 * reach].split())
    tail = " ".join(known.text.split()[-2:])
    end = flat.find(tail, 0, reach + len(tail))
    stretch = f" {flat[:end + len(tail) if end >= 0 else reach]} "
    for furniture in known.inside_in_print:
        assert f" {furniture} " not in stretch, f"{key}: {furniture!r} sits inside {known.text[:40]!r}...: {stretch!r}"


@pytest.mark.parametrize("key", [key for key, pdf in PDFS.items() if pdf.running])
def test_running_headers_and_page_numbers_are_left_out(key):
    document, _ = read(key)
    for pattern, most in PDFS[key].running:
        found = re.findall(pattern, document.text)
        assert len(found) <= most, f"{key}: {len(found)} of {pattern!r} (at most {most}): {found[:5]}"

