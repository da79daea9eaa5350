import dataclasses
import io
import random
import tracemalloc

import pytest
from pypdf import PdfReader, PdfWriter
from pypdf.errors import DependencyError

from longqa.documents import (
    DEFAULT_MAX_FILE_BYTES,
    SUPPORTED_EXTENSIONS,
    Document,
    clean_text,
    decode_text,
    from_text,
    read_document,
)
from longqa.errors import DocumentError, InputError


def make_pdf(*page_texts: str) -> bytes:
    """A minimal valid PDF, one line of Helvetica text per page, built by hand (offsets computed)."""
    page_ids = [4 + 2 * i for i in range(len(page_texts))]
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % i for i in page_ids), len(page_ids)),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for page_id, text in zip(page_ids, page_texts):
        stream = b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % text.encode("latin-1")
        objects[page_id] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (page_id + 1)
        )
        objects[page_id + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
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


def encrypt_pdf(data: bytes, user_password: str, owner_password: str | None = None, algorithm=None) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm=algorithm)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def blank_page_pdf() -> bytes:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def read_error(*args, **kwargs) -> str:
    with pytest.raises(DocumentError) as info:
        read_document(*args, **kwargs)
    return str(info.value)


# Plain text and Markdown


def test_txt_from_path_keeps_exact_text_and_file_name(tmp_path):
    path = write(tmp_path, "contract.txt", "The fee is 42 €.\nSigned in Zürich.\n".encode())
    document = read_document(path)
    assert document == Document(name="contract.txt", text="The fee is 42 €.\nSigned in Zürich.\n")
    assert document.n_chars == 35


def test_path_given_as_str_works(tmp_path):
    path = write(tmp_path, "a.txt", b"hello")
    assert read_document(str(path)).text == "hello"


def test_markdown_and_html_inside_text_files_stay_literal(tmp_path):
    source = "# Title\n\n*stars* <script>alert(1)</script> &amp;\n"
    assert read_document(write(tmp_path, "notes.md", source.encode())).text == source
    assert read_document(write(tmp_path, "notes.txt", source.encode())).text == source


def test_bytes_input_uses_name_for_reader_and_display():
    document = read_document("Ünïcode text".encode(), name="upload.TXT")
    assert document == Document(name="upload.TXT", text="Ünïcode text")


def test_bytes_input_without_name_is_refused():
    with pytest.raises(DocumentError, match="file name"):
        read_document(b"some text")


def test_name_overrides_temporary_path_name(tmp_path):
    path = write(tmp_path, "tmp8f3k2", b"uploaded words")  # an upload's temporary file without extension
    assert read_document(path, name="notes.md") == Document(name="notes.md", text="uploaded words")


def test_document_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        from_text("abc").text = "x"


# Encodings


@pytest.mark.parametrize(
    "data, expected",
    [
        ("café naïve".encode("utf-8"), "café naïve"),
        (b"\xef\xbb\xbf" + "café naïve".encode("utf-8"), "café naïve"),
        ("café naïve".encode("latin-1"), "café naïve"),
        (b"\x93smart quotes\x94 cost \x80 5", "“smart quotes” cost € 5"),  # cp1252 where it decodes
        (b"caf\xe9 \x81", "café \x81"),  # 0x81 is undefined in cp1252: that byte alone falls back to latin-1
        (b"\xff\xfe" + "café naïve ✓".encode("utf-16-le"), "café naïve ✓"),
        (b"\xfe\xff" + "café naïve ✓".encode("utf-16-be"), "café naïve ✓"),
        ("café naïve, plain".encode("utf-16-le"), "café naïve, plain"),  # no BOM: NULs in odd positions
        ("café naïve, plain".encode("utf-16-be"), "café naïve, plain"),  # no BOM: NULs in even positions
        (b"\xff\xfe\x00\x00" + "Grüße".encode("utf-32-le"), "Grüße"),
        (b"", ""),
    ],
    ids=["utf8", "utf8-bom", "latin1", "cp1252", "cp1252-undefined", "utf16le-bom", "utf16be-bom",
         "utf16le-no-bom", "utf16be-no-bom", "utf32le-bom", "empty"],
)  # fmt: skip
def test_decode_text(data, expected):
    assert decode_text(data) == expected


def test_mixed_encoding_keeps_utf8_lines_right():
    data = "Straße in Zürich — 5 km\n".encode() + b"caf\xe9 na\xefve\n" + "naïve ✓\n".encode()
    assert decode_text(data) == "Straße in Zürich — 5 km\ncafé naïve\nnaïve ✓\n"


def test_mixed_encoding_within_one_line():
    assert decode_text("café ".encode() + b"na\xefve") == "café naïve"


def test_utf8_bom_file_with_stray_latin1_byte():
    assert decode_text(b"\xef\xbb\xbf" + "Zürich ".encode() + b"caf\xe9") == "Zürich café"


def test_mostly_latin1_file_stays_latin1_despite_an_accidental_utf8_pair():
    # b"\xc3\xa9" reads as "é" in UTF-8, but the three other accents show the file is latin-1
    assert decode_text(b"\xc3\xa9t\xe9 \xe0 l'\xe9cole") == "Ã©té à l'école"


@pytest.mark.parametrize(
    "encoded",
    [
        "\ufeffcafé naïve\n".encode("utf-16-le"),  # Python's "utf-16" codec would add the BOM itself
        "café naïve\n".encode("utf-16"),
        "café naïve\n".encode("latin-1"),
        "café naïve\n".encode("utf-8-sig"),
    ],
    ids=["utf16le-bom", "utf16-native", "latin1", "utf8-sig"],
)
def test_read_document_decodes_files_without_bom_or_nul_left(tmp_path, encoded):
    assert read_document(write(tmp_path, "text.txt", encoded)).text == "café naïve\n"


# Bad text files


@pytest.mark.parametrize(
    "data",
    [
        bytes(range(256)) * 8,
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00" + bytes(500),
        random.Random(0).randbytes(4096).replace(b"\x00", b"\x01"),  # no NUL byte at all
    ],
    ids=["all-bytes", "png-header", "random-without-nul"],
)
def test_binary_file_renamed_txt_is_refused(tmp_path, data):
    message = read_error(write(tmp_path, "photo.txt", data))
    assert "'photo.txt' looks like a binary file" in message


def test_empty_file_is_refused(tmp_path):
    assert read_error(write(tmp_path, "empty.txt", b"")) == "'empty.txt' is empty."
    assert read_error(b"", name="empty.md") == "'empty.md' is empty."


@pytest.mark.parametrize("data", [b" \n\t\r\n  ", "\u200b\ufeff \u2060".encode(), b"\n\n\r\n"])
def test_whitespace_only_file_is_refused(tmp_path, data):
    assert "'blank.txt' contains only whitespace" in read_error(write(tmp_path, "blank.txt", data))


def test_missing_file_is_refused_with_its_path(tmp_path):
    path = tmp_path / "nowhere.txt"
    message = read_error(path)
    assert str(path) in message and "not found" in message


def test_missing_upload_is_refused_with_its_display_name(tmp_path):
    assert read_error(tmp_path / "tmp123", name="contract.pdf") == "'contract.pdf' was not found."


def test_directory_is_refused(tmp_path):
    assert "not a regular file" in read_error(tmp_path)


@pytest.mark.parametrize("name", ["report.docx", "archive.tar.gz", "README"])
def test_unsupported_extension_lists_supported_ones(tmp_path, name):
    message = read_error(write(tmp_path, name, b"text"))
    assert f"'{name}'" in message
    assert all(extension in message for extension in SUPPORTED_EXTENSIONS)


def test_unsupported_extension_from_bytes():
    assert "'.exe' files are not supported" in read_error(b"MZ", name="setup.exe")


# Size limit


def test_size_limit_refuses_bytes_and_names_size_and_limit():
    message = read_error(b"x" * 300_000, name="big.txt", max_bytes=200_000)
    assert "'big.txt'" in message and "0.3 MB" in message and "0.2 MB" in message and "300,000 bytes" in message


def test_size_limit_refuses_path(tmp_path):
    message = read_error(write(tmp_path, "big.md", b"y" * 101), max_bytes=100)
    assert "'big.md'" in message and "101 bytes" in message and "limit" in message


def test_file_exactly_at_limit_is_accepted(tmp_path):
    assert read_document(write(tmp_path, "ok.txt", b"y" * 100), max_bytes=100).n_chars == 100


def test_default_limit_is_checked_before_reading(tmp_path):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        f.truncate(60 * 1024 * 1024)  # sparse: 60 MB of NULs that take no disk space
    tracemalloc.start()
    try:
        message = read_error(path)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "60.0 MB" in message and f"{DEFAULT_MAX_FILE_BYTES / 2**20:.1f} MB" in message
    assert peak_bytes < 1024 * 1024  # reading the file would have allocated 60 MB


# PDF


def test_pdf_text_of_all_pages_joined_by_blank_line(tmp_path):
    path = write(tmp_path, "contract.pdf", make_pdf("The fee is 42 dollars.", "Signed in Paris."))
    assert read_document(path) == Document(name="contract.pdf", text="The fee is 42 dollars.\n\nSigned in Paris.")


def test_pdf_from_bytes_with_upper_case_extension():
    assert read_document(make_pdf("Hello PDF"), name="SCAN.PDF").text == "Hello PDF"


def test_pdf_encrypted_with_password_is_refused():
    message = read_error(encrypt_pdf(make_pdf("Top secret"), "secret"), name="locked.pdf")
    assert "'locked.pdf'" in message and "password-protected" in message


def test_pdf_encrypted_with_empty_user_password_opens():
    data = encrypt_pdf(make_pdf("Readable text"), user_password="", owner_password="owner")
    assert PdfReader(io.BytesIO(data)).is_encrypted
    assert read_document(data, name="protected.pdf").text == "Readable text"


def test_pdf_aes_encrypted_with_empty_user_password_opens():
    pytest.importorskip("cryptography")  # pypdf needs it for AES, both to write and to read
    data = encrypt_pdf(make_pdf("AES text"), user_password="", owner_password="owner", algorithm="AES-256")
    assert read_document(data, name="aes.pdf").text == "AES text"


def test_pdf_aes_without_crypto_package_says_what_is_missing(monkeypatch):
    def decrypt_needing_cryptography(self, password):
        raise DependencyError("cryptography is required for AES algorithm")

    monkeypatch.setattr(PdfReader, "decrypt", decrypt_needing_cryptography)
    message = read_error(encrypt_pdf(make_pdf("AES text"), "secret"), name="aes.pdf")
    assert "'aes.pdf'" in message and "'cryptography' package" in message


def test_pdf_without_text_layer_says_no_text_found():
    message = read_error(blank_page_pdf(), name="scan.pdf")
    assert "'scan.pdf': no text found (scanned PDF?" in message


@pytest.mark.parametrize(
    "data",
    [b"%PDF-1.4\nthis is not really a pdf", make_pdf("cut short")[:120], bytes(range(256)) * 4],
    ids=["garbage", "truncated", "binary"],
)
def test_corrupt_pdf_is_refused(data):
    message = read_error(data, name="broken.pdf")
    assert "'broken.pdf' could not be read as a PDF" in message


# HTML


def test_html_keeps_visible_text_only():
    html = b"""<!DOCTYPE html><html><head><title>Lease</title>
    <style>body { color: red }</style><script>var secret = "hidden script";</script></head>
    <body><!-- a hidden comment --><h1>Terms</h1>
    <p>The   rent is <b>900</b>
       euros &amp; due &lt;monthly&gt;.</p>
    <noscript>Enable JavaScript</noscript><template><p>template text</p></template>
    <ul><li>First</li><li>Second</li></ul>Line one<br>Line two
    <pre>  keep   this
  layout</pre><script>document.write("more hidden")</script>
    </body></html>"""
    text = read_document(html, name="lease.html").text
    assert text == (
        "Lease\nTerms\nThe rent is 900 euros & due <monthly>.\nFirst\nSecond\nLine one\nLine two\n"
        "  keep   this\n  layout"
    )


def test_html_entities_and_nbsp(tmp_path):
    path = write(tmp_path, "page.htm", "<p>caf&eacute;&nbsp;au&#160;lait &#x263A;</p>".encode())
    assert read_document(path).text == "café\xa0au\xa0lait ☺"


def test_html_with_only_scripts_is_whitespace_only():
    assert "contains only whitespace" in read_error(b"<script>alert(1)</script><style>p{}</style>", name="x.html")


def test_html_in_latin1(tmp_path):
    assert read_document("<p>Gr\xfc\xdfe</p>".encode("latin-1"), name="old.html").text == "Grüße"


# Cleaning


def test_clean_text_normalises_line_breaks():
    assert clean_text("a\r\nb\rc\nd") == "a\nb\nc\nd"


def test_clean_text_removes_control_characters_but_keeps_tab():
    assert clean_text("a\x00b\x01c\x1bd\x7fe\x9ff\tg") == "abcdef\tg"


def test_clean_text_turns_page_and_vertical_breaks_into_newlines():
    assert clean_text("end of page\fnext\vline\x85last") == "end of page\nnext\nline\nlast"


def test_clean_text_removes_zero_width_characters():
    assert clean_text("\ufeffze\u200bro\u200cwi\u200ddth\u2060") == "zerowidth"


def test_clean_text_keeps_ordinary_unicode():
    text = "naïve — “quoted” 東京 😀 \xa0"
    assert clean_text(text) == text


def test_read_document_cleans_text(tmp_path):
    path = write(tmp_path, "dirty.txt", "line\u200b one\r\nline\x07 two\r".encode())
    assert read_document(path).text == "line one\nline two\n"


# Pasted text


def test_from_text_cleans_and_names():
    assert from_text("pasted\r\ntext\u200b") == Document(name="pasted text", text="pasted\ntext")
    assert from_text("x", name="question context").name == "question context"


@pytest.mark.parametrize("text", ["", "  \n\t ", "\u200b\ufeff"])
def test_from_text_refuses_empty(text):
    with pytest.raises(DocumentError, match="'pasted text' is empty"):
        from_text(text)


def test_document_errors_are_input_errors():
    with pytest.raises(InputError):
        from_text("")
