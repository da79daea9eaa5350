import codecs
import dataclasses
import io
import random
import re
import signal
import threading
import time
import tracemalloc
import zlib

import charset_normalizer
import pytest
from pypdf import PdfReader, PdfWriter
from pypdf.generic import DictionaryObject, NameObject, StreamObject

from longqa_core import html_files, pdf_files
from longqa_core.documents import (DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_PAGES, DEFAULT_MAX_READ_S, Document, Location,
                                   ReadLimits, clean_text, format_location, from_text, locate)
from longqa_core.errors import DocumentError, InputError
from longqa_core.reader_children import ReaderChildren
from longqa_core.files import SUPPORTED_EXTENSIONS, read_document
from longqa_core.text_files import UnknownEncodingError, decode_text
from tests.generated_pdfs import text_pdf as make_pdf
from tests.hostile import misnested_formatting_html


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


def test_missing_file_is_refused_with_its_name_but_not_the_folder_it_was_looked_for_in(tmp_path):
    message = read_error(tmp_path / "nowhere.txt")
    assert message == "'nowhere.txt' was not found."


def test_errors_about_a_path_never_show_the_servers_folders(tmp_path):
    folder = tmp_path / "srv" / "longqa-uploads"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_bytes(b"\x00binary\x01" * 50)
    for path in (folder, folder / "notes.txt", folder / "missing.md", folder / "report.docx"):
        message = read_error(path)
        assert str(tmp_path) not in message and "srv" not in message, message
        assert f"'{path.name}'" in message


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


@pytest.mark.slow
def test_pdf_encrypted_with_password_is_refused():
    message = read_error(encrypt_pdf(make_pdf("Top secret"), "secret"), name="locked.pdf")
    assert "'locked.pdf'" in message and "password-protected" in message


def test_pdf_encrypted_with_empty_user_password_opens():
    data = encrypt_pdf(make_pdf("Readable text"), user_password="", owner_password="owner")
    assert PdfReader(io.BytesIO(data)).is_encrypted
    assert read_document(data, name="protected.pdf").text == "Readable text"


@pytest.mark.slow
def test_pdf_aes_encrypted_with_empty_user_password_opens():
    pytest.importorskip("cryptography")  # pypdf needs it for AES, both to write and to read
    data = encrypt_pdf(make_pdf("AES text"), user_password="", owner_password="owner", algorithm="AES-256")
    assert read_document(data, name="aes.pdf").text == "AES text"


@pytest.mark.slow
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
        "Lease\n\nTerms\n\nThe rent is 900 euros & due <monthly>.\n\n  First\n  Second\nLine one\nLine two\n"
        "  keep   this\n  layout"
    )


def test_html_entities_and_nbsp(tmp_path):
    path = write(tmp_path, "page.htm", "<p>caf&eacute;&nbsp;au&#160;lait &#x263A;</p>".encode())
    assert read_document(path).text == "café\xa0au\xa0lait ☺"


def test_html_with_only_scripts_is_whitespace_only():
    assert "contains only whitespace" in read_error(b"<script>alert(1)</script><style>p{}</style>", name="x.html")


def test_html_in_latin1(tmp_path):
    assert read_document("<p>Gr\xfc\xdfe</p>".encode("latin-1"), name="old.html").text == "Grüße"


def test_html_block_elements_are_on_their_own_lines():
    page = ("<h2>Berths</h2><div>North</div><div>South <span>quay</span></div>"
            "<table><tr><th>Cargo</th><th>Crates</th></tr><tr><td>Tea</td><td>400</td></tr></table>"
            "<ul><li>Tea<ul><li>green</li></ul></li></ul><p>one<br>two</p><blockquote>Quoted</blockquote>")
    assert read_document(page.encode(), name="berths.html").text == (
        "Berths\n\nNorth\nSouth quay\nCargo\t\tCrates\nTea\t\t400\n  Tea\n    green\n\none\ntwo\n\nQuoted")


def test_html_form_controls_and_image_descriptions_are_not_text():
    page = '<p>Fee <img alt="a photo"> paid<select><option>Euro</option></select><button>Send</button></p>'
    assert read_document(page.encode(), name="form.html").text == "Fee paid"


def test_html_blank_lines_are_kept_to_one_and_no_line_ends_in_spaces():
    page = "<p>one <br> two   <br><br><br><br>three</p><pre>keep   \n\n\n\nlayout</pre>"
    assert read_document(page.encode(), name="lines.html").text == "one\ntwo\n\nthree\n\nkeep\n\nlayout"


# HTML: pages built to make a parser slow (docs/html-readers.md: what each one costs each reader)

HOSTILE_PAGES = {  # id: a page whose only visible text is "Visible words."
    "unterminated-tags": "<p>Visible words.</p>" + "<a" * 150_000,  # html.parser: 77 s
    "unterminated-end-tags": "<p>Visible words.</p>" + "</" * 500_000,  # html.parser: 79 s
    "500k-nested-divs": "<div>" * 500_000 + "Visible words.",  # selectolax: over 60 s
    "deeper-than-lxml": "<span>" * 3_000 + "Visible words." + "</span>" * 3_000,  # html-text loses the text
}


@pytest.mark.slow
@pytest.mark.parametrize("page", HOSTILE_PAGES.values(), ids=HOSTILE_PAGES.keys())
def test_hostile_html_is_read_in_about_linear_time(page):
    began = time.perf_counter()
    text = read_document(page.encode(), name="hostile.html").text
    assert time.perf_counter() - began < 5  # a regression guard: these took a quadratic parser over a minute
    assert text == "Visible words."


def test_repeated_html_documents_all_come_through():
    page = "".join(f"<!DOCTYPE html><html><head><title>Part {i}</title></head><body><p>Text of part {i}.</p>"
                   f"</body></html>\n" for i in (1, 2, 3))
    assert read_document(page.encode(), name="parts.html").text == (
        "Part 1\n\nText of part 1.\n\nPart 2\n\nText of part 2.\n\nPart 3\n\nText of part 3.")


@pytest.mark.slow
def test_a_big_page_keeps_its_text_and_drops_every_script_and_style():
    section = ("<h2>Berth {i}</h2><p>Tea: 400 crates.</p><script>var tracker = 'SCRIPT';</script>"
               "<style>p {{ color: red }}</style>")
    page = "".join(section.format(i=i) for i in range(10_000))  # 1.2 MB
    text = read_document(page.encode(), name="ledger.html").text
    assert "SCRIPT" not in text and "color" not in text
    assert text.count("Tea: 400 crates.") == 10_000 and text.endswith("Berth 9999\n\nTea: 400 crates.")


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


# Legacy encodings (charset-normalizer after the BOM and UTF-8 checks) and an HTML page's declared charset

CHINESE = (
    "长文档问答系统可以帮助读者在很长的报告中找到答案。用户上传一份文件，然后提出一个问题，模型会把文件切成"
    "互相重叠的窗口，在每一个窗口中寻找最可能的答案片段，并把分数最高的几个结果连同它们在原文中的位置一起返回。"
    "这个演示使用的是本地训练的小模型，所以答案不一定准确，但是整个流程和真正的系统是一样的：读取文件、判断编码、"
    "清理文本、切分窗口、批量计算，最后合并各个窗口的候选答案。\n"
    "港口的记录显示，那艘名叫“海燕”的货船在三月十二日早上七点到达，船上装着四百箱茶叶和两百箱瓷器。"
)
JAPANESE = (
    "長い文書に対する質問応答のデモです。ユーザーがファイルをアップロードして質問すると、モデルは文書を重なり合う"
    "ウィンドウに分け、各ウィンドウの中で最も可能性の高い答えの範囲を探し、スコアの高い結果をいくつか、原文での位置と"
    "一緒に返します。このデモは手元で学習した小さなモデルを使っているので、答えが正確とは限りませんが、処理の流れは"
    "本物のシステムと同じです。\n港の記録によると、「かもめ丸」という貨物船は三月十二日の朝七時に到着し、茶葉を"
    "四百箱と陶磁器を二百箱積んでいました。"
)
RUSSIAN = (
    "Система ответов на вопросы по длинным документам помогает читателю найти ответ в очень длинном отчёте. "
    "Пользователь загружает файл и задаёт вопрос, а модель делит документ на перекрывающиеся окна, ищет в каждом "
    "окне наиболее вероятный фрагмент ответа и возвращает несколько результатов с наивысшей оценкой вместе с их "
    "положением в исходном тексте. Эта демонстрация использует маленькую модель, обученную на месте, поэтому "
    "ответы не всегда точны, но весь процесс такой же, как в настоящей системе.\n"
    "Согласно записям порта, грузовое судно \"Чайка\" прибыло двенадцатого марта в семь часов утра с четырьмястами "
    "ящиками чая и двумястами ящиками фарфора."
)


@pytest.mark.parametrize("text, encoding", [(CHINESE, "gbk"), (JAPANESE, "shift_jis"), (RUSSIAN, "cp1251"),
                                            (RUSSIAN, "koi8-r")], ids=["gbk", "shift_jis", "cp1251", "koi8-r"])
def test_a_legacy_encoded_file_reads_exactly_like_its_utf8_twin(tmp_path, text, encoding):
    legacy = text.encode(encoding)
    assert legacy != text.encode("utf-8")
    twin = read_document(write(tmp_path, "utf8.txt", text.encode("utf-8")))
    assert read_document(write(tmp_path, "legacy.txt", legacy)).text == twin.text == text
    assert decode_text(legacy) == text


def html_page(body: str, charset: str | None, http_equiv: bool = False) -> str:
    if charset is None:
        meta = ""
    elif http_equiv:
        meta = f'<meta http-equiv="Content-Type" content="text/html; charset={charset}">'
    else:
        meta = f'<meta charset="{charset}">'
    return f"<!DOCTYPE html>\n<html><head>{meta}<title>Harbour</title></head><body>{body}</body></html>"


@pytest.mark.parametrize("text, charset, http_equiv", [
    (CHINESE, "GBK", False),
    (RUSSIAN, "windows-1251", False),
    (RUSSIAN, "koi8-r", True),
    (JAPANESE, "Shift_JIS", True),
], ids=["meta-gbk", "meta-windows-1251", "http-equiv-koi8-r", "http-equiv-shift_jis"])
def test_an_html_page_in_its_declared_charset_reads_exactly_like_its_utf8_twin(text, charset, http_equiv):
    body = "".join(f"<p>{paragraph}</p>" for paragraph in text.split("\n"))
    twin = read_document(html_page(body, "utf-8", http_equiv).encode(), name="utf8.html")
    legacy = read_document(html_page(body, charset, http_equiv).encode(charset), name="legacy.html")
    assert legacy.text == twin.text == "Harbour\n\n" + text.replace("\n", "\n\n")  # a blank line after each <p>


def test_a_declared_charset_is_used_without_guessing(monkeypatch):
    sentence = "Мы встретимся завтра утром у вокзала."  # too short to guess: charset-normalizer says cp932
    page = html_page(f"<p>{sentence}</p>", "koi8-r", http_equiv=True)

    def no_guessing(data, *args, **kwargs):
        raise AssertionError("the declared charset should have decided")

    monkeypatch.setattr(charset_normalizer, "from_bytes", no_guessing)
    assert read_document(page.encode("koi8-r"), name="short.html").text == "Harbour\n\n" + sentence


def test_a_utf8_page_with_a_stale_legacy_declaration_reads_as_utf8():
    page = html_page(f"<pre>{RUSSIAN}</pre>", "windows-1251")
    assert read_document(page.encode("utf-8"), name="saved.html").text == "Harbour\n\n" + RUSSIAN


def test_an_unknown_declared_charset_falls_back_to_detection():
    page = html_page(f"<pre>{RUSSIAN}</pre>", "x-no-such-charset")
    assert read_document(page.encode("cp1251"), name="odd.html").text == "Harbour\n\n" + RUSSIAN


@pytest.mark.parametrize("bom, encoding", [(codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                                           (codecs.BOM_UTF16_BE, "utf-16-be")], ids=["utf8", "utf16le", "utf16be"])
def test_an_html_page_with_a_bom_is_read_by_its_bom_whatever_it_declares(bom, encoding):
    page = html_page("<p>Grüße aus Zürich</p>", "windows-1252")
    assert read_document(bom + page.encode(encoding), name="bom.html").text == "Harbour\n\nGrüße aus Zürich"


@pytest.mark.parametrize("n_bytes", [300, 4096, 100_000])
def test_random_high_bytes_are_an_encoding_error_not_mojibake(n_bytes):
    data = bytes(random.Random(n_bytes).choices(range(0x80, 0x100), k=n_bytes))
    with pytest.raises(UnknownEncodingError):
        decode_text(data)
    message = read_error(data, name="noise.txt")
    assert message.startswith("'noise.txt' could not be read: its text encoding is not UTF-8")
    assert "Save it as UTF-8" in message


# Bounded reading: characters, pages, time; pypdf's own safety limits


def pdf_with_pages_sharing_one_stream(n_pages: int, stream_bytes: int) -> bytes:
    """A small PDF whose pages all show one large, highly compressible content stream (about 1.7 million
    characters of text per 2 MB of stream): the file is kilobytes, extracting it all takes minutes."""
    writer = PdfWriter()
    font = writer._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica")}))
    line = b"(The colour of Zorbin is teal and the sky is wide.) Tj T*\n"
    body = b"BT /F1 12 Tf 14 TL 72 720 Td\n" + line * (stream_bytes // len(line)) + b"ET"
    stream = StreamObject()
    stream.set_data(zlib.compress(body, 9))
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    contents = writer._add_object(stream)
    for _ in range(n_pages):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
        page[NameObject("/Contents")] = contents
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def shared_stream_pdf():
    return pdf_with_pages_sharing_one_stream(40, 2_000_000)


def timed_read_error(*args, **kwargs) -> tuple[str, float]:
    began = time.perf_counter()
    message = read_error(*args, **kwargs)
    return message, time.perf_counter() - began


def test_the_hostile_pdf_is_small_and_its_pages_really_hold_that_much_text(shared_stream_pdf):
    assert len(shared_stream_pdf) < 20_000
    reader = PdfReader(io.BytesIO(shared_stream_pdf))
    assert len(reader.pages) == 40
    assert reader.pages[0].get_contents().get_data().count(b"Tj") > 30_000


@pytest.fixture
def roomy_pdf_child(monkeypatch):
    """PDF children with 1 GB of memory: room to parse the hostile page, so that a character or time limit stops it
    (with the default cap, PDFium runs out of memory on it first: the test below with default limits)."""
    monkeypatch.setattr(pdf_files, "READERS", ReaderChildren(memory_bytes=1024 * 2**20))
    monkeypatch.setattr(pdf_files, "PDF_BASE_MEMORY_BYTES", 1024 * 2**20)


@pytest.mark.slow
def test_pdf_extraction_stops_in_the_middle_of_a_page_once_past_the_character_limit(shared_stream_pdf,
                                                                                   roomy_pdf_child):
    # Before: all 40 pages (about 70 million characters) were extracted first, 5.5 s a page here; now the first
    # page's count of characters refuses it.
    message, seconds = timed_read_error(shared_stream_pdf, name="bomb.pdf", max_chars=1_000_000)
    assert seconds < 15  # about 2 s (its child's start and one page), 3x that on a busy machine; all pages: minutes
    match = re.fullmatch(r"'bomb\.pdf': read ([\d,]+) characters from 1 of 40 pages, over the limit of "
                         r"1,000,000 characters\.", message)
    assert match, message
    assert 1_000_000 < int(match.group(1).replace(",", "")) < 2_000_000  # the first page's characters, counted whole


@pytest.mark.slow
def test_pdf_extraction_stops_at_the_time_limit(shared_stream_pdf, roomy_pdf_child):
    # 3 s: room for the child to start and open page 1 on a busy machine (with 1 s it was sometimes stopped while
    # still starting, "extracting its text"), and still far inside page 1 (5.5 s a page here)
    message, seconds = timed_read_error(shared_stream_pdf, name="bomb.pdf", max_read_s=3.0)
    assert seconds < 12  # the limit, then the page in progress (slower on a loaded machine)
    assert re.fullmatch(r"'bomb\.pdf': reading stopped after [3-9]\.\d s \(on page 1 of 40 pages, [\d,]+ characters "
                        r"read\), over the time limit of 3 s for reading documents\.", message), message


@pytest.mark.slow
def test_pdf_over_the_page_limit_is_refused_before_extracting(shared_stream_pdf):
    message, seconds = timed_read_error(shared_stream_pdf, name="bomb.pdf", max_pages=39)
    assert message == "'bomb.pdf' has 40 pages, over the limit of 39 pages."
    assert seconds < 1


@pytest.mark.slow
def test_pdf_character_limit_counts_the_pages_before(tmp_path):
    data = make_pdf("a" * 60, "b" * 60, "c" * 60)
    assert read_document(data, name="ok.pdf", max_chars=60 * 3 + 4).n_chars == 184
    assert read_error(data, name="three.pdf", max_chars=183) == (
        "'three.pdf' has 184 characters, over the limit of 183 characters.")


@pytest.mark.slow
def test_hostile_pdf_with_default_limits_is_refused_at_the_default_time_limit_or_memory_cap(shared_stream_pdf):
    # 40 pages of 1.7 million characters each: the 16-million-character cap that the default token limit implies
    # would take 10 pages; the child's memory cap (PDFium parses a whole page at once) or the time limit comes first.
    message, seconds = timed_read_error(shared_stream_pdf, name="bomb.pdf", max_chars=16_000_000)
    assert seconds < DEFAULT_MAX_READ_S + 8
    assert f"over the time limit of {DEFAULT_MAX_READ_S:g} s" in message or re.fullmatch(
        r"'bomb\.pdf' could not be read: its PDF needs more than the [\d.]+ GB of memory that reading a file of "
        r"0\.0 MB may use\.", message), message


@pytest.mark.slow
def test_a_stream_that_inflates_to_80_mb_of_white_space_reads_as_its_text_within_the_childs_cap():
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
                             NameObject("/BaseFont"): NameObject("/Helvetica")})
    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    page[NameObject("/Resources")] = DictionaryObject(
        {NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})})
    stream = StreamObject()
    stream.set_data(zlib.compress(b"BT /F1 12 Tf (x) Tj ET\n" + b" " * 80_000_000, 9))  # 78 kB that inflate to 80 MB
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    page[NameObject("/Contents")] = writer._add_object(stream)
    buffer = io.BytesIO()
    writer.write(buffer)
    # PDFium inflates it within the child's memory cap (a page past the cap: the test in test_pdf_files.py)
    assert read_document(buffer.getvalue(), name="inflate.pdf").text == "x"


def test_plain_text_is_capped_by_characters(tmp_path):
    text = "Ünïcode words " * 1000  # 14,000 characters, 18,000 bytes
    assert read_document(write(tmp_path, "ok.txt", text.encode()), max_chars=14_000).n_chars == 14_000
    message = read_error(write(tmp_path, "big.txt", text.encode()), max_chars=13_999)
    assert message == "'big.txt' has 14,000 characters, over the limit of 13,999 characters."


@pytest.mark.slow
def test_html_is_capped_by_characters_and_time():
    page = ("<p>" + "The colour of Zorbin is teal. " * 40 + "</p>\n") * 2000  # 2.4 million characters of text
    message, seconds = timed_read_error(page.encode(), name="page.html", max_chars=100_000)
    assert re.fullmatch(r"'page\.html' has [\d,]+ characters, over the limit of 100,000 characters\.", message)
    assert seconds < 3


@pytest.mark.slow
def test_html_reading_stops_at_the_time_limit_in_the_middle_of_a_page():
    page = misnested_formatting_html(2_200_000)  # about 13 s to parse here
    message, seconds = timed_read_error(page, name="tags.html", max_read_s=0.5)
    assert seconds < 3
    assert re.fullmatch(r"'tags\.html': reading stopped after \d+\.\d s \(parsing 2,200,000 characters of HTML\), "
                        r"over the time limit of 0\.5 s for reading documents\.", message), message


@pytest.mark.slow
def test_html_reading_gets_only_the_time_the_documents_before_it_left():
    began = time.perf_counter() - 9.5  # as if the documents before it took 9.5 s of the 10
    message, seconds = timed_read_error(misnested_formatting_html(2_200_000), name="tags.html", max_read_s=10.0,
                                        read_began=began)
    assert seconds < 3
    assert re.fullmatch(r"'tags\.html': reading stopped after 1\d\.\d s \(parsing 2,200,000 characters of HTML\), "
                        r"over the time limit of 10 s for reading documents\.", message), message


@pytest.mark.slow
def test_other_threads_run_while_a_page_is_parsed():
    # Parsed in this process, the page would hold the interpreter lock: the other thread would tick once or twice.
    ticks = 0
    stop = threading.Event()

    def tick():
        nonlocal ticks
        while not stop.wait(0.01):
            ticks += 1

    thread = threading.Thread(target=tick)
    thread.start()
    try:
        _, seconds = timed_read_error(misnested_formatting_html(2_200_000), name="tags.html", max_read_s=1.0)
    finally:
        stop.set()
        thread.join()
    assert ticks > 30 * seconds  # about 90 a second when nothing holds the lock


@pytest.mark.slow
def test_html_that_needs_more_than_its_memory_cap_is_refused(monkeypatch):
    monkeypatch.setattr(html_files, "READERS", ReaderChildren(memory_bytes=256 * 2**20))
    page = b"<p><b><i><u><s>x</p>" * 250_000  # 5 MB that lexbor needs about 0.9 GB for
    message, seconds = timed_read_error(page, name="dense.html")
    assert message == ("'dense.html' could not be read: its HTML needs more than the 0.25 GB of memory that reading "
                       "a page of 4.8 MB may use.")
    assert seconds < 5


def test_an_html_reader_that_crashes_is_a_document_error_and_one_that_cannot_start_is_ours(monkeypatch):
    monkeypatch.setattr(html_files, "_HTML_WORKER", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert read_error(b"<p>x</p>", name="crash.html") == (
        f"'crash.html' could not be read: the HTML reader stopped on it (signal {signal.SIGSEGV.value}).")
    monkeypatch.setattr(html_files, "_HTML_WORKER", "import no_such_html_library")
    with pytest.raises(RuntimeError, match="(?s)the HTML reader failed: .*No module named 'no_such_html_library'"):
        read_document(b"<p>x</p>", name="broken.html")


@pytest.mark.slow
def test_hostile_html_with_default_limits_is_refused_at_the_default_time_limit():
    # 10 MB (a fifth of the file size limit): lexbor's time grows with the square of it, 5 MB took 40 s on a busy
    # 2-core machine and under 30 s on a quiet one; 10 MB takes about four times as long, well past the limit on
    # either. No time limit is given: the default applies, and the read began (as one request's documents share
    # one budget) 3 s short of it, so the default's last seconds are what this page gets, not all 30 of them (3 s:
    # room to decode the 10 MB first on a busy machine, then parse until the limit).
    page = misnested_formatting_html(10_000_000)
    began = time.perf_counter() - (DEFAULT_MAX_READ_S - 3)
    message, seconds = timed_read_error(page, name="tags.html", read_began=began)
    assert seconds < 3 + 8
    assert f"over the time limit of {DEFAULT_MAX_READ_S:g} s" in message
    stopped = re.fullmatch(r"'tags\.html': reading stopped after (\d+\.\d) s \(parsing [\d,]+ characters of HTML\), "
                           r"over the time limit of \d+ s for reading documents\.", message)
    assert stopped, message
    assert DEFAULT_MAX_READ_S <= float(stopped.group(1)) < DEFAULT_MAX_READ_S + 9  # stopped at the default, no earlier


def test_pasted_text_has_a_size_limit_in_utf8_bytes_like_a_file():
    assert from_text("é" * 500, max_bytes=1000).n_chars == 500
    message = str(pytest.raises(DocumentError, from_text, "é" * 501, max_bytes=1000).value)
    assert message == "'pasted text' is 0.0010 MB (1,002 bytes), over the 0.0010 MB size limit."


def test_pasted_text_of_60_mb_is_refused_by_the_default_limit_without_copies():
    text = "x" * (60 * 1024 * 1024)
    tracemalloc.start()
    try:
        message = str(pytest.raises(DocumentError, from_text, text).value)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "'pasted text' is 60.0 MB" in message and "over the 50.0 MB size limit" in message
    assert peak_bytes < 1024 * 1024  # neither encoded nor cleaned


def test_pasted_text_has_a_character_limit():
    assert from_text("word " * 20, max_chars=100).n_chars == 100
    message = str(pytest.raises(DocumentError, from_text, "word " * 21, max_chars=100).value)
    assert message == "'pasted text' has 105 characters, over the limit of 100 characters."


# Bidirectional controls

BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_clean_text_drops_bidirectional_overrides_and_isolates():
    assert clean_text("pay \u202eten\u202c 100 \u2067dollars\u2069") == "pay ten 100 dollars"
    assert clean_text(f"a{BIDI_CONTROLS}b") == "ab"
    assert clean_text("שלום עולם \u200f, مرحبا") == "שלום עולם \u200f, مرحبا"  # right-to-left text itself stays


def test_documents_and_pasted_text_lose_bidirectional_controls(tmp_path):
    text = f"The fee is \u202e0001\u202c dollars.{BIDI_CONTROLS}"
    assert read_document(write(tmp_path, "fee.txt", text.encode())).text == "The fee is 0001 dollars."
    assert read_document(f"<p>{text}</p>".encode(), name="fee.html").text == "The fee is 0001 dollars."
    assert from_text(text).text == "The fee is 0001 dollars."


# A request's documents together (session.read_documents): one character cap, one time budget


def test_documents_together_obey_one_character_cap():
    from longqa.session import read_documents

    files = [("a.txt", b"word " * 20), ("b.txt", b"more " * 20)]  # 100 characters each
    assert len(read_documents(files, max_chars=200)[0]) == 2
    with pytest.raises(DocumentError) as info:
        read_documents(files, "and pasted", max_chars=205)
    assert str(info.value) == "The 3 documents have 210 characters together, over the limit of 205 characters."


def test_pasted_text_obeys_the_file_size_limit_in_read_documents():
    from longqa.session import read_documents

    with pytest.raises(DocumentError, match="'pasted text' is 0.0019 MB .2,000 bytes., over the 0.0010 MB size"):
        read_documents([], "x" * 2000, max_bytes=1000)


def test_documents_share_one_time_budget():
    began = time.perf_counter() - 10.0  # as if the documents before it took 10 s
    message = read_error(b"late words", name="late.txt", max_read_s=5.0, read_began=began)
    assert re.fullmatch(r"'late\.txt': reading stopped after 10\.\d s \(before reading it\), over the time limit of "
                        r"5 s for reading documents\.", message), message


# Where a stretch of text stands: a PDF's page, the nearest heading of a page or Markdown file, a text's line


def test_every_page_of_a_generated_pdf_is_named_right_where_its_words_are():
    pages = [f"Page {n} begins here.\nThe code on this page is K{n:03d}X." for n in range(1, 8)]
    pages[3] = ""  # a page without text still counts, as a PDF viewer counts it
    document = read_document(make_pdf(*pages), name="report.pdf")
    assert len(document.page_starts) == 7
    for number, text in enumerate(pages, 1):
        if not text:
            continue
        start = document.text.index(f"K{number:03d}X")
        location = locate(document, start, start + 5)
        assert location == Location("report.pdf", start, start + 5, page=number)
        assert format_location(location) == f"report.pdf, page {number}"
        first = document.text.index(f"Page {number} begins")
        assert locate(document, first, first + 4).page == number  # a page's first character is on it


@pytest.mark.parametrize("read", ["file", "pasted"])
def test_a_text_whose_form_feeds_end_pages_names_each_page_and_keeps_its_text(read):
    """pdftotext ends every page of a PDF with a form feed; so do license texts and manual pages. The text is the
    same as without pages (each form feed a line break), and an answer names its page and its line in the file."""
    pages = [f"Page {n} begins here.\r\nThe code on this page is K{n:03d}X.\n" for n in range(1, 6)]
    pages[2] = ""  # an empty page still counts
    raw = "\f".join(pages) + "\f"  # as pdftotext writes it: the last page ends with one too
    document = read_document(raw.encode(), name="export.txt") if read == "file" else from_text(raw)
    assert document.text == clean_text(raw) and len(document.page_starts) == 5
    for number, text in enumerate(pages, 1):
        if not text:
            continue
        start = document.text.index(f"K{number:03d}X")
        location = locate(document, start, start + 5)
        in_file = raw.replace("\r\n", "\n")  # the file's lines: its form feeds end pages, not lines
        assert location.page == number and location.line == in_file.count("\n", 0, in_file.index(f"K{number:03d}X")) + 1
        assert format_location(location) == f"{document.name}, page {number}, line {location.line:,}"
        first = document.text.index(f"Page {number} begins")
        assert locate(document, first, first + 4).page == number
    plain = read_document(b"No form feed here.\nNone at all.", name="plain.txt")
    assert plain.page_starts == () and locate(plain, 20, 24).page is None


def test_a_text_names_pages_only_between_two_and_a_pdfs_most():
    """One form feed at the end ends the only page: no page is named. Past the pages a PDF may have, a text of form
    feeds is cleaned in one pass as any text, with no list of millions of pages."""
    one = from_text("All of it on one page.\n\f")
    assert one.page_starts == () and one.text == "All of it on one page.\n\n"
    many = "x\f" * (DEFAULT_MAX_PAGES + 1)
    assert from_text(many).page_starts == () and from_text(many).text == clean_text(many)
    most = "x\f" * DEFAULT_MAX_PAGES
    assert len(from_text(most).page_starts) == DEFAULT_MAX_PAGES


def test_html_answers_name_their_nearest_heading_however_nested():
    page = ("<html><head><title>Results</title></head><body><p>Before any heading.</p>"
            "<h1>Results</h1><p>Alpha fact.</p><section><h2>3.2 Methods <b>used</b></h2><div><p>Beta fact.</p>"
            "<h3>Deep   detail</h3><p>Gamma fact.</p></div></section><h2>Back out</h2><p>Delta fact.</p></body></html>")
    document = read_document(page.encode(), name="page.html")
    assert [(h.level, h.title) for h in document.headings] == [
        (1, "Results"), (2, "3.2 Methods used"), (3, "Deep detail"), (2, "Back out")]
    assert all(document.text[h.start_char:].startswith(h.title) for h in document.headings)
    where = {word: locate(document, document.text.index(word), document.text.index(word) + 5)
             for word in ("Before", "Alpha", "Beta", "Gamma", "Delta")}
    assert {word: w.heading for word, w in where.items()} == {
        "Before": None, "Alpha": "Results", "Beta": "3.2 Methods used", "Gamma": "Deep detail", "Delta": "Back out"}
    assert where["Alpha"].start_char > document.text.index("Results\n\n") + 8  # the h1, not the title above it
    assert where["Gamma"].line is None and where["Gamma"].page is None  # an HTML page's lines are not the file's
    assert format_location(where["Beta"]) == "page.html, § 3.2 Methods used"


@pytest.mark.slow
def test_a_page_of_hidden_headings_is_located_in_linear_time():
    page = "<p>visible</p>" + "<h2><span style=x></span></h2><template><h1>gone</h1></template>" * 20_000
    began = time.perf_counter()
    document = read_document(page.encode(), name="hidden.html")
    assert document.headings == () and time.perf_counter() - began < 15


def test_markdown_answers_name_their_heading_and_line():
    text = ("# Guide\n\nIntro words.\n\n## 3.2 Results ##\n\nThe tide is 4.\n\n```\n# not a heading\nCode line.\n```\n"
            "Setext title\n------------\n\nLast words.\n")
    document = read_document(text.encode(), name="notes.md")
    assert [(h.level, h.title) for h in document.headings] == [(1, "Guide"), (2, "3.2 Results"), (2, "Setext title")]

    def where(word: str) -> Location:
        start = document.text.index(word)
        return locate(document, start, start + len(word))

    assert (where("Intro").heading, where("Intro").line) == ("Guide", 3)
    assert (where("tide").heading, where("tide").line) == ("3.2 Results", 7)
    assert where("Code line").heading == "3.2 Results"  # the fenced "# not a heading" is code
    assert (where("Last").heading, where("Last").line) == ("Setext title", 16)
    assert format_location(where("tide")) == "notes.md, line 7, § 3.2 Results"


def test_plain_text_answers_name_their_line_counted_from_one():
    lines = [f"Line {n} says {n * 7}." for n in range(1, 201)]
    document = read_document("\r\n".join(lines).encode(), name="notes.txt")
    for n in (1, 2, 120, 200):
        start = document.text.index(f"Line {n} says")
        location = locate(document, start, start + 4)
        assert (location.line, location.page, location.heading) == (n, None, None)
    start = document.text.index("Line 120 says")
    assert format_location(locate(document, start, start + 4)) == "notes.txt, line 120"
    assert locate(from_text("one\ntwo\nthree"), 8, 13).line == 3  # pasted text too
