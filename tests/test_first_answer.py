"""The time-to-a-first-answer bench (bench.first_answer) and its table (bench.first_answer_report):
the PDF it reads, and the medians it reports."""

from __future__ import annotations

from bench import first_answer, first_answer_report
from longqa.session import read_documents


def test_the_pdf_has_the_pages_asked_for_and_holds_the_fact():
    pdf, item = first_answer.make_pdf(12)
    documents, _ = read_documents([("report.pdf", pdf)])
    text = documents[0].text
    assert len(documents[0].page_starts) == 12
    assert item.answer in text and item.question
    assert len(text) > 12 * first_answer.PAGE_WORDS * 4  # about 5 characters a word and its space


def row(mode: str, sized: int | None, first_s: float, total_s: float, round_index: int = 0) -> dict:
    return {"round": round_index, "mode": mode, "passage_window_tokens": sized, "windows_read": 2,
            "windows_total": 13, "window_passes": 2, "window_tokens": sized or 4096, "seconds_per_window": total_s / 2,
            "first_candidate_s": first_s, "total_s": total_s, "expected_s": 5.0, "forward_s": total_s - 0.5,
            "answer": "12 crowns", "answer_start": 100}


def test_the_table_gives_each_read_the_median_of_its_rounds_side_by_side():
    result = {"model": "arch:large", "profile": "cpu", "pages": 100, "threads": 2, "chars": 160_000,
              "extract_s": 0.4, "command": "python -m bench first-answer", "load_average_end": [3.0],
              "machine": {"cpu_model": "AMD EPYC", "load_average_start": [2.0]},
              "rows": [row("guided", None, 9.0, 20.0), row("guided", 1024, 2.0, 4.0),
                       row("guided", 1024, 4.0, 6.0, 1), row("guided", None, 11.0, 22.0, 1),
                       row("guided", 1024, 3.0, 5.0, 2), row("full", None, 9.5, 150.0)]}
    lines = {line["read"]: line for line in first_answer_report.summary(result)}
    sized = lines["guided, windows sized to the passage (1,024 tokens)"]
    assert sized["rounds"] == 3 and sized["first_candidate_s"] == 3.0 and sized["total_s"] == 5.0
    assert lines["guided, whole windows"]["first_candidate_s"] == 10.0 and lines["full read"]["total_s"] == 150.0
    table = first_answer_report.markdown(result)
    assert "| guided, windows sized to the passage (1,024 tokens) | 2 of 13 | 2 | 1,024 | 2.5 s | 3.0 s | 5.0 s |" \
        in table
    assert "load average 2.0 at the start and 3.0 at the end" in table
