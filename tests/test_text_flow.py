"""The flowing text every reader yields: wraps joined, hyphens decided, running lines left out, boundaries kept, and
each page and file line found again in it."""

import time

import pytest

from longqa_core.files import read_document
from longqa_core.documents import Document, from_text, locate, paged_text
from longqa_core.text_flow import Line, flow_lines, flow_text, is_page_number, running_lines


def flowed(text: str) -> str:
    return flow_text(*paged_text(text)).text


def test_a_sentence_wrapped_inside_a_name_reads_as_one_line():
    assert flowed("The altitude of Vesmira\nQuonthal is 2250.") == "The altitude of Vesmira Quonthal is 2250."


def test_a_hard_wrapped_paragraph_is_one_line_and_paragraphs_stay_apart():
    text = ("   Each gateway keeps a table of the\n   routes it knows, and the altitude of\n   Vesmira Quonthal is "
            "2250.\n\n   A second paragraph\n   starts here.")
    assert flowed(text) == ("   Each gateway keeps a table of the routes it knows, and the altitude of Vesmira "
                            "Quonthal is 2250.\n\n   A second paragraph starts here.")


@pytest.mark.parametrize("text, expected", [
    ("The altitude of Ves-\nmira is 2250.", "The altitude of Vesmira is 2250."),  # the typesetter's hyphen
    ("It is self-\ncontained, they said.", "It is self-contained, they said."),  # a prefix English hyphenates
    ("The Anglo-\nSaxon charter is old.", "The Anglo-Saxon charter is old."),  # a capital after it
    ("The COVID-\n19 rules were read.", "The COVID-19 rules were read."),
    # the document's own spelling decides: "cross-section" elsewhere keeps the hyphen, "crossroads" drops it
    ("A cross-section was cut. The cross-\nsection held.", "A cross-section was cut. The cross-section held."),
    ("We met at the crossroads. The cross-\nroads were busy.", "We met at the crossroads. The crossroads were busy."),
])
def test_a_hyphen_at_a_lines_end_is_joined_or_kept_as_the_words_need(text, expected):
    assert flowed(text) == expected


@pytest.mark.parametrize("text", [
    "The capital of Freedonia is Fredville.\nThe anthem of Freedonia is Hail Freedonia.",  # one fact a line
    "Vesmira altitude 2250\nQuonthal length 30\nBrindle cove depth 12",  # notes without full stops
    "The population is 48,213\nThe capital is Brisk.",  # a value's line before a capital
    "Shopping:\n- milk\n- bread rolls for the\n  party",  # a label and a list (its item's wrap is joined below)
    "Name      Height\nVesmira   2250",  # a table aligned with spaces
])
def test_breaks_a_writer_made_are_kept(text):
    flow = flow_text(*paged_text(text))
    kept = [line.split("\n") for line in flow.text.split("\n")]
    assert flow.text == text and len(kept) >= 2


def test_a_list_items_wrap_is_joined_but_items_stay_apart():
    assert flowed("Notes:\n- the altitude of Vesmira\n  Quonthal is 2250.\n- the length of it is 4.") == (
        "Notes:\n- the altitude of Vesmira Quonthal is 2250.\n- the length of it is 4.")


def test_markdown_headings_and_fenced_code_keep_their_lines():
    text = "# Results\nThe altitude of\nVesmira is 2250.\n\n```\nfor row in rows\n    print(row)\n```"
    assert flowed(text) == "# Results\nThe altitude of Vesmira is 2250.\n\n```\nfor row in rows\n    print(row)\n```"


def test_a_text_without_wraps_comes_back_unchanged_so_its_offsets_stay():
    text = "First fact is here.\nSecond fact is there.\n\n\nThird, after blank lines.\n"
    flow = flow_text(text)
    assert flow.text is text and flow.lines is None


def test_running_headers_footers_and_page_numbers_of_a_paged_text_are_left_out_and_a_sentence_runs_over():
    pages = [f"HARBOUR RECORDS {2024}\n\nBody of page {n} goes on and on.\nThe altitude of\n\n- {n} -"
             for n in range(1, 4)]
    pages[1] = "HARBOUR RECORDS 2024\n\nVesmira is 2250.\nMore text follows here and\n\n- 2 -"
    pages[2] = "HARBOUR RECORDS 2024\n\nends on this page.\n\n- 3 -"
    text, page_starts = paged_text("\f".join(pages))
    flow = flow_text(text, page_starts)
    assert "HARBOUR" not in flow.text and "- 2 -" not in flow.text
    assert "The altitude of Vesmira is 2250." in flow.text
    assert "More text follows here and ends on this page." in flow.text
    value = flow.text.index("2250")
    document = Document("records.txt", flow.text, flow.page_starts, lines=flow.lines)
    assert locate(document, value, value + 4).page == 2
    # "Vesmira is 2250." is line 8 of the file: page 2 starts on line 6, after "- 1 -" and its form feed
    assert locate(document, value, value + 4).line == 8


def test_a_form_feed_on_a_line_of_its_own_adds_no_line():
    document = from_text("First page.\n\f\nSecond page.", "paged.txt")
    start = document.text.index("Second")
    assert (locate(document, start, start + 6).line, locate(document, start, start + 6).page) == (3, 2)


def test_every_line_of_the_file_is_found_again_in_the_flowing_text():
    text = "Line one of a\nwrapped sentence.\n\nA list:\n- first item that\n  wraps\n- second"
    document = from_text(text, "notes.txt")
    for number, line in enumerate(text.split("\n"), start=1):
        word = line.strip().split(" ")[-1] if line.strip() else None
        if word:
            start = document.text.index(word, document.lines.starts[document.lines.numbers.index(number)])
            assert locate(document, start, start + len(word)).line == number, line


@pytest.mark.parametrize("line, is_number", [
    ("12", True), ("- 12 -", True), ("Page 12 of 16", True), ("[Page 3]", True), ("xii", True), ("12 / 16", True),
    ("12 apples", False), ("Page one", False), ("", False),
])
def test_page_numbers(line, is_number):
    assert is_page_number(line) is is_number


def test_running_lines_need_to_repeat_and_leave_one_page_alone():
    edges = [["Annual report 2024", "Chapter 1 starts", "Page 1 of 3"],
             ["Annual report 2024", "Something else", "Page 2 of 3"],
             ["Annual report 2024", "Other words", "Page 3 of 3"]]
    assert running_lines(edges) == [{0, 2}, {0, 2}, {0, 2}]
    assert running_lines([["Annual report 2024", "Page 1"]]) == [set()]


def test_pdf_lines_flow_over_pages_columns_and_headings():
    lines = [Line("Results", 0, False, True), Line("The altitude of Vesmira", 0, True),
             Line("Quonthal is 2250. A sentence that", 0), Line("runs over the page.", 1),
             Line("A new paragraph.", 1, True)]
    flow = flow_lines(lines, 2)
    assert flow.text == ("Results\n\nThe altitude of Vesmira Quonthal is 2250. A sentence that runs over the page."
                         "\n\nA new paragraph.")
    assert flow.page_starts == (0, flow.text.index("runs over"))
    assert flow.headings == ((0, 1, "Results"),)


def test_a_very_long_word_costs_linear_time():
    began = time.perf_counter()
    document = from_text("Intro sentence.\n" + "a" * 200_000 + "\nthe end.", "long.txt")
    assert time.perf_counter() - began < 3.0  # about 0.05 s; a search from every start of the word took minutes
    assert document.text.endswith("a the end.")


@pytest.mark.parametrize("text, expected", [
    ("It is state-\nof-the-art work.", "It is state-of-the-art work."),  # the rest goes on with a hyphen
    ("The altitude of Ves\u00ad\nmira is 2250.", "The altitude of Vesmira is 2250."),  # a soft hyphen
    ("An ex-\nample of it.", "An example of it."),  # "ex" is no prefix a typesetter's hyphen keeps
    ("A four-\nhour soak test.", "A four-hour soak test."),  # a number word is
])
def test_more_hyphens(text, expected):
    assert flowed(text) == expected


def test_a_setext_headings_underline_ends_its_line():
    text = "Results\n=======\nThe altitude of\nVesmira is 2250."
    document = read_document(text.encode(), name="notes.md")
    assert document.text == "Results\n=======\nThe altitude of Vesmira is 2250."
    assert [h.title for h in document.headings] == ["Results"]


def test_lines_that_differ_only_in_their_numbers_are_no_running_lines_where_their_place_is_known():
    # chapters open on pages 1, 5 and 10: "Chapter N" at one height, its number not counting with the pages
    words = "alder birch cedar damson elm fir gean hazel ilex juniper kauri larch".split()
    edges = [[f"Chapter {(0, 4, 9).index(page) + 1}" if page in (0, 4, 9) else f"{words[page]} starts",
              f"{words[page]} text", f"{words[page]} ends"] for page in range(12)]
    places = [[70, 40, 1]] * 12
    assert running_lines(edges, places) == [set()] * 12
    assert running_lines([["Top", "2250", "body", "end"], ["Top", "17", "more", "stop"]], [[70, 60, 40, 1]] * 2) == [
        {0}, {0}]  # a value on an inner edge line is no page number; the header repeats in its place
