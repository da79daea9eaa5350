"""Hostile uploads, generated: small files that cost a naive reader minutes of CPU or gigabytes of memory."""

from __future__ import annotations

import zlib


def shared_stream_pdf(pages: int = 40, stream_bytes: int = 2_000_000) -> bytes:
    """`pages` pages that all draw one Flate-compressed content stream of `stream_bytes` of text operators: a few
    KB on disk, `pages` x `stream_bytes` of text to extract."""
    line = b"(all work and no play makes a dull reader ) Tj T* "
    content = b"BT /F1 12 Tf 14 TL 72 720 Td " + line * (stream_bytes // len(line)) + b"ET"
    compressed = zlib.compress(content, 9)
    page_ids = [5 + i for i in range(pages)]
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % i for i in page_ids), pages),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        4: b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(compressed), compressed),
    }
    for page_id in page_ids:
        objects[page_id] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                            b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>")
    return write_pdf(objects)


def write_pdf(objects: dict[int, bytes]) -> bytes:
    """A PDF file of numbered objects (1 is the catalog), its cross-reference table's offsets computed."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref_at = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[number] for number in range(1, size))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref_at)
    return bytes(out)


def combining_marks_text(n_bytes: int) -> bytes:
    """UTF-8 text that is almost all combining marks: about one token per character, so a characters-per-token
    guess lets it through to a tokenizer that builds offsets for millions of tokens."""
    unit = "a" + "\u0301\u0302\u0303\u0304\u0306\u0307\u0308" * 8 + " "
    data = unit.encode("utf-8")
    return data * (n_bytes // len(data))


def misnested_formatting_html(n_bytes: int) -> bytes:
    """'<b><i>x</b>' repeated: every `</b>` runs the HTML standard's adoption agency algorithm over all the open
    `<i>`s, so an HTML5 tree builder (lexbor, html5lib) takes time quadratic in the size: 2 MB take lexbor 13 s."""
    unit = b"<b><i>x</b>"
    return unit * (n_bytes // len(unit))
