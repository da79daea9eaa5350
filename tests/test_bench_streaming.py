"""`python -m bench stream`'s inputs and table: the generated PDF reads back page by page, the fact lies in
the first tenth, the table shows the ratios measured."""

from __future__ import annotations

from bench import streaming
from longqa.session import read_documents


def test_the_generated_pdf_reads_back_with_its_pages_and_the_fact_early():
    text, question, answer, start = streaming.document_with_early_fact(51, 100 * 2_000)  # the PDF of the bench
    assert question.startswith("What is the") and text[start: start + len(answer)] == answer
    assert 0.08 * len(text) < start < 0.1 * len(text)  # late in the first tenth
    pages = [text[i: i + 2_000] for i in range(0, len(text), 2_000)]
    (document,), _ = read_documents([("hundred.pdf", streaming.pdf_bytes(pages))])
    assert answer in document.text and document.n_chars >= 0.95 * len(text)


def test_the_table_gives_the_overhead_and_when_the_right_answer_showed():
    case = {"case": "pasted 1.5 MB", "windows": 95, "with_s": [30.3, 30.9], "without_s": [30.0, 30.4],
            "overhead_ratio": 30.6 / 30.2, "cpu_ratio": 1.004, "decode_share": 0.012, "first_right_s": [2.1, 2.3], "first_right_window": [6, 6],
            "first_right_share": [0.07, 0.075]}
    lines = streaming.report_lines({"cases": [case], "load": (3.0, 2.0, 1.0), "cpus": 2})
    assert lines[2] == "| pasted 1.5 MB | 95 | 30.6 / 30.2 | 1.013, 1.004 | 1.2% | 2.1 s, 6, 7%, 2.3 s, 6, 8% |"
    assert lines[-1] == "load average 3.0 on 2 CPUs"
