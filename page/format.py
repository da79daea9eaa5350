"""Formatting for the web page: typed readouts (`longqa.readout.Readout` and its parts, `longqa.readout.LoadReadout`;
bytes and seconds) into the rows, labels and frames the UI shows.

Pure functions that read the readouts' fields. It imports nothing of ours, knows nothing of gradio, models or
sessions. Document text is never rendered as HTML: it goes into highlighted spans, and into the readout tables'
cells escaped (`table_html`), so that it shows as text.
"""

from __future__ import annotations

import html
import math
import numbers
import re

import pandas as pd

MISSING = "—"
EVIDENCE_CONTEXT_CHARS = 300
_WORDS = re.compile(r"\s*\S+\s*|\s+")  # a word with the white space around it
STAGES = ("extract", "tokenize", "rank", "forward", "decode", "mark", "total")

DOCUMENT_HEADERS = ["document", "characters", "tokens", "windows"]
ANSWER_HEADERS = ["rank", "answer", "score", "confidence", "document", "position (characters)"]
LATENCY_HEADERS = ["stage", "time"]
MEMORY_HEADERS = ["device", "peak (GPU allocated, host RSS)", "this request's own peak (above the model loaded)",
                  "now (GPU reserved, host RSS)", "NVML used", "NVML total"]
RUN_HEADERS = ["readout", "value"]
LOAD_HEADERS = ["model", "profile", "strategies", "weights dtype", "load time", "weights per device", "device map",
                "host RAM peak while loading", "fallback", "notes"]  # the keys of `load_rows`: the table is one row
HISTORY_HEADERS = ["run", "profile", "model", "question", "documents", "answer", "reading", "tokens", "windows",
                   "request's own peak", "peak GPU memory", "host peak RSS", "latency", "tokens/s"]
TRAINING_HEADERS = ["training step", "peak memory", "time"]
PLOT_MEMORY = "peak memory (MB)"
PLOT_LATENCY = "latency (s)"


def table_html(title: str, headers: list, rows: list[list]) -> str:
    """A readout table as HTML: its title, then the table, every header and cell escaped (text shows as text). Each
    cell carries its column's header (`data-label`), so that at a phone's width the stylesheet shows a table of
    more than two columns as one card per row, each value under its header (a two-column table is already one
    key and its value per row, and stays a table)."""
    anchor = "readout-" + re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    kind = "pairs" if len(headers) <= 2 else "cards"
    head = "".join(f'<th scope="col">{html.escape(str(header))}</th>' for header in headers)
    body = "".join("<tr>" + "".join(f'<td data-label="{html.escape(str(header))}">{cell_html(cell)}</td>'
                                    for header, cell in zip(headers, row)) + "</tr>" for row in rows)
    return (f'<div class="readout-table {kind}"><div class="readout-title" id="{anchor}">{html.escape(title)}</div>'
            f'<div class="readout-scroll"><table aria-labelledby="{anchor}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div></div>")


def cell_html(value) -> str:
    """A table cell's text, escaped, a line allowed to end after each underscore (`<wbr>`), as after a hyphen: an
    identifier such as `supports_gradient_checkpointing` is one word wider than a phone's card."""
    return html.escape(cell_text(value)).replace("_", "_<wbr>")


def cell_text(value) -> str:
    """A table cell's text: MISSING for nothing (None, or a frame's NaN), a whole number with thousands separators
    (as the rows' own texts write counts: "2,617"; API clients get the number itself)."""
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def escape_markdown(text: str) -> str:
    """Text shown literally inside Markdown: HTML escaped, Markdown punctuation backslash-escaped."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|~>])", r"\\\1", html.escape(str(text), quote=False))


def format_bytes(n_bytes: int | float | None) -> str:
    """Decimal units, as GPU boxes and `Hardware.describe` use them: 15.6 GB, 812.3 MB, 4.1 kB, 12 B."""
    if n_bytes is None:
        return MISSING
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} B"


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


def format_rate(tokens_per_s: float | None) -> str:
    return MISSING if tokens_per_s is None else f"{tokens_per_s:,.0f} tokens/s"


def document_rows(documents: list) -> list[list]:
    """One row per document (`DocumentStats`): its counted characters, tokens and windows (the whole document's:
    the run table says how many of them were read)."""
    return [[d.name, d.chars, d.tokens, d.windows] for d in documents]


def answer_rows(answers: list) -> list[list]:
    rows = []
    for rank, answer in enumerate(answers, 1):
        if answer.document is None:
            where, document = MISSING, "(no answer)"
        else:
            where, document = f"{answer.start_char:,}–{answer.end_char:,}", str(answer.location or answer.document)
        rows.append([rank, answer.text, f"{answer.score:.4g}", answer.confidence or MISSING, document, where])
    return rows


def best_answer(result) -> str:
    """What the answer box shows: the best answer, or, where the documents do not hold one, the verdict alone (no
    span in large type: the top answers table keeps them, marked low confidence)."""
    verdict = result.verdict
    best = result.answers[0] if result.answers and result.answers[0].document is not None else None
    if best is None:
        return "(no answer found in the documents)"
    if verdict is not None and verdict.found is False:
        return ""  # the line over it says so (`answer_status`); the spans stay in the top answers, marked low
    return best.text  # without a rule, the run table and the JSON say the confidence is not calibrated


def ran_on(model: str | None, profile: str | None) -> str:
    """The model and profile an answer ran on, as the answer area names them."""
    return f"Ran on {escape_markdown(str(model))} with profile {escape_markdown(str(profile))}."


def answer_status(result, evaluation_url: str | None = None, ran: str = "") -> str:
    """Markdown over the answer box: whether the documents hold the answer (by the model's rule or the request's
    threshold), and where the best answer stands; without a rule, its confidence from the score alone. Not found:
    the verdict's confidence, and its rule's numbers behind a closed disclosure (`how_decided`) linking to
    `evaluation_url`, where the rule was measured. `ran`: what it ran on (`ran_on`), said last on the line."""
    verdict = result.verdict
    best = result.answers[0] if result.answers and result.answers[0].document is not None else None
    ran = f" {ran}" if ran else ""
    if best is None:
        return f"### Not found in the documents\nThe model found no answer span in the text it read.{ran}"
    where = (f"In {escape_markdown(str(best.location or best.document))}, characters "
             f"{best.start_char:,}–{best.end_char:,}; score {best.score:.3g}.{ran}")
    if verdict is not None and verdict.found is False:  # said once, here: the answer box stays empty
        return (f"### {escape_markdown(verdict.message)} ({verdict.confidence} confidence)\n"
                f"{escape_markdown(verdict.reason[:1].upper() + verdict.reason[1:])}.{ran}\n\n"
                f"{how_decided(verdict, evaluation_url)}")
    if verdict is not None and verdict.found:
        return f"### Found ({best.confidence or MISSING} confidence)\n{where}"
    if verdict is not None and verdict.confidence == "low":  # outside the model's question form, or a word absent
        return f"### {escape_markdown(verdict.explanation)}\n{where}"
    if best.confidence == "low":
        return (f"### Low confidence\n{where} This model has no not-found rule: the span is unlikely, and may not "
                "answer the question.")
    return f"### Answer ({best.confidence or MISSING} confidence, not calibrated for this model)\n{where}"


ANSWER_LABEL = "Answer"
PROVISIONAL = "pending"  # the confidence column of an answer not judged yet (a word that fits it at 400 px)
UNJUDGED = "not judged"  # the confidence column of the partial answer a Stop kept: it never will be
UNDER_THE_BAR = "under the bar"  # the confidence column of a best so far under the model's not-found threshold


def answer_label(state: str | None = None) -> str:
    """The answer box's label: "Answer", or while a read goes on or after a Stop, what the answer shown is."""
    return ANSWER_LABEL if state is None else f"{ANSWER_LABEL} ({state})"


def provisional_label(best) -> str:
    """What an answer shown while a read goes on is (`answering.Provisional`)."""
    return f"best so far, {best.windows_read:,} of {best.windows_total:,} windows read"


def implausible_label(windows_read: int, windows_total: int, stopped: bool = False) -> str:
    """The answer box's label while (or, `stopped`, after) a read whose best so far is under the model's not-found
    threshold: nothing shown as an answer."""
    return (f"{ANSWER_LABEL}: nothing plausible {'read' if stopped else 'yet'} "
            f"({windows_read:,} of {windows_total:,} windows read)")


def partial_label(windows_done: int, windows_total: int) -> str:
    """What the answer shown after a Stop is."""
    return f"partial: stopped after {windows_done:,} of {windows_total:,} windows"


def provisional_rows(best, confidence: str = PROVISIONAL) -> list[list]:
    """The top answers while a read goes on: the best so far alone, marked provisional (never found or not); after
    a Stop, marked `UNJUDGED`."""
    answer = best.answer
    return [["so far", answer.text, f"{answer.score:.4g}", confidence, str(answer.location or answer.document),
             f"{answer.start_char:,}–{answer.end_char:,}"]]


def how_decided(verdict, evaluation_url: str | None = None) -> str:
    """A closed disclosure, "How this is decided": the verdict's rule with its numbers, where nothing is found what
    the passages below and the top answers are, and a link to where the rule was measured (`evaluation_url`, for a
    rule measured in this project)."""
    measured = (f" [How often this rule is right]({evaluation_url}) ({escape_markdown(verdict.evaluation)})."
                if evaluation_url and verdict.evaluation else "")
    shown = (" The closest passages are below, nothing in them marked as the answer; the spans the model liked best "
             "are in Top answers, marked low confidence." if verdict.found is False else "")
    return (f'<details class="how-decided"><summary>How this is decided</summary>\n\n'
            f"{escape_markdown(verdict.details)}{measured}{shown}\n\n</details>")


EVIDENCE_LABEL = "Evidence: the answer in its passage"
CLOSEST_LABEL = "Closest passages: none answers the question, nothing is marked"
CLOSEST_PASSAGES = 2  # where nothing is found, the passages around this many of the best spans


def evidence_label(result, place: str | None = None) -> str:
    """The passage box's label: the answer in its passage, and where the passage stands (`place`: its lines, pages
    or headings), or, where the documents hold no answer, the closest passages (`closest_passages`)."""
    verdict = result.verdict if result is not None else None
    if verdict is not None and verdict.found is False:
        return CLOSEST_LABEL
    return f"{EVIDENCE_LABEL} ({place})" if place else EVIDENCE_LABEL


def closest_passages(texts: list[str], answers, limit: int = CLOSEST_PASSAGES) -> list[tuple]:
    """Where the documents hold no answer: the passages around the best spans (at most `limit`; a span inside a
    passage already shown adds none), numbered, as plain words with nothing labelled, so that no span reads as the
    answer."""
    spans, shown, near = [], [], EVIDENCE_CONTEXT_CHARS  # shown: (document, first, last character) of each passage
    for answer in answers:
        if answer.document_index < 0 or any(document == answer.document_index and left <= answer.start_char
                                            and answer.end_char <= right for document, left, right in shown):
            continue
        shown.append((answer.document_index, answer.start_char - near, answer.end_char + near))
        passage = evidence(texts[answer.document_index], answer.start_char, answer.end_char)
        spans += [(f"{' ' if spans else ''}({len(shown)}) ", None), *((text, None) for text, _ in passage)]
        if len(shown) == limit:
            break
    return spans


def wait_line(waited_s: float | None, latency_s: dict | None, queue: dict | None) -> str:
    """The visitor's wait, from the click to the answer on the screen as timed in the browser (`waited_s`), beside
    the engine's stages (`latency_s`, its "total") and the model's queue before the read began (`queue`, the
    readout's): the rest is gradio's queue, the network (pasted text included; files upload when chosen, before the
    click) and the page's own steps. Nothing without a browser's time; the wait alone where no stages were measured
    (a Stop, an error)."""
    if waited_s is None:
        return ""
    if not latency_s:  # stopped, or failed: no stages were measured to set beside it
        return f"**You waited {format_seconds(waited_s)}** from click to the end (timed in your browser)."
    engine_s = latency_s.get("total") or 0.0
    queued_s = (queue or {}).get("waited_to_start_s") or 0.0
    rest_s = max(0.0, waited_s - engine_s - queued_s)
    return (f"**You waited {format_seconds(waited_s)}** from click to answer (timed in your browser): "
            f"{format_seconds(queued_s)} queued for the model, {format_seconds(engine_s)} in the engine (the stages' "
            f"total above), {format_seconds(rest_s)} in gradio's queue, the network and the page's own steps.")


def stopped_status(windows_done: int, windows_total: int, best=None) -> str:
    """Markdown over the answer box after Stop: how far the read got, and where a best answer was read before it
    (`answering.Provisional`), that it is the one shown, not judged found or not found."""
    heading = f"### Stopped after {windows_done:,} of {windows_total:,} windows\n"
    if best is not None and not best.plausible:
        return (f"{heading}Nothing plausible was read: the best span so far scores {best.answer.score:.3g}, under "
                "the model's not-found threshold; it is in Top answers, not shown as the answer.")
    if best is not None:
        answer = best.answer
        where = escape_markdown(str(answer.location or answer.document))
        return (f"{heading}The answer shown is the best of the windows read, not judged found or not found: in "
                f"{where}, characters {answer.start_char:,}–{answer.end_char:,}; score {answer.score:.3g}.")
    if not windows_total:
        return "### Stopped before any window was read\nNo answer is shown."
    return f"{heading}No answer is shown: the windows read so far were not compared for the best span."


def answered_before_status(model: str, profile: str, loaded: str) -> str:
    """Markdown over an answer of the model loaded before a reload: whose answer it is, and how to get the new one's."""
    return (f"### Answered by {escape_markdown(model)} with profile {escape_markdown(profile)}\nThe model loaded "
            f"since is {escape_markdown(loaded)}: press Ask to answer with it.")


def failed_status(message: str) -> str:
    """Markdown over the answer box after an error: the error's message, and no answer."""
    return f"### The request failed\n{escape_markdown(message)}"


NO_ANSWER_YET = "Ask a question: the answer shows here, highlighted in its passage."
ASKING_STATUS = ("### Asking…\nThe previous answer is cleared; progress shows here, and the best answer so far below "
                 "as the windows are read (the final answer replaces it).")
NEW_DOCUMENTS_STATUS = "### New documents\nPress Ask to answer from them."
NO_QUESTION_STATUS = "### No question yet\nType one in the Question box."
NO_QUESTION_NOTE = "Type a question first."  # next to the Question box
LEFT_OUT = "left out"  # the Documents read table's characters cell for a file that cannot be read


def left_out_notice(name: str, why: str) -> str:
    """The notice beside an answer read without a file that cannot be read."""
    return f"Answered without '{name}': {why}"


def left_out_status(left_out) -> str:
    """The line over the answer when some of the documents cannot be read: which will be left out and why."""
    return ("### New documents\nPress Ask to answer from the others; left out: "
            + " ".join(escape_markdown(why) for _, why in left_out))


def unreadable_status(message: str) -> str:
    """The line over the answer when none of the documents can be read."""
    return f"### No readable documents\n{escape_markdown(message)}"
NO_DOCUMENTS_STATUS = "### No documents\nUpload a file or paste some text, then ask a question about it."


def verdict_text(result) -> str:
    """The verdict in one sentence with its confidence word, for the run table (the rule and its numbers stand
    behind "How this is decided" over the answer, and in the JSON)."""
    verdict = result.verdict
    return MISSING if verdict is None else verdict.explanation


def passage_bounds(text: str, start: int, end: int, context_chars: int = EVIDENCE_CONTEXT_CHARS) -> tuple[int, int]:
    """Where the passage around text[start:end] that `evidence` shows starts and ends: `context_chars` each side,
    cut at white space."""
    left = max(0, start - context_chars)
    if left > 0:
        space = text.find(" ", left, start)
        left = space + 1 if space != -1 else left
    right = min(len(text), end + context_chars)
    if right < len(text):
        space = text.rfind(" ", end, right)
        right = space if space != -1 else right
    return left, right


def evidence(text: str, start: int, end: int, context_chars: int = EVIDENCE_CONTEXT_CHARS) -> list[tuple]:
    """The passage around text[start:end] as highlighted spans: the answer labelled "answer", the rest one span per
    word (so the passage wraps like text around the highlight), cut at white space with an ellipsis where cut."""
    left, right = passage_bounds(text, start, end, context_chars)
    before = ("…" if left > 0 else "") + text[left:start]
    after = text[end:right] + ("…" if right < len(text) else "")
    return [*((word, None) for word in _WORDS.findall(before)), (text[start:end], "answer"),
            *((word, None) for word in _WORDS.findall(after))]


def latency_rows(latency_s: dict, tokens_per_s: float | None) -> list[list]:
    rows = [[stage, format_seconds(latency_s.get(stage))] for stage in STAGES]
    rows.append(["throughput", format_rate(tokens_per_s)])
    return rows


def memory_rows(memory) -> list[list]:
    """One row per GPU (peak allocated, the request's own peak above what was allocated before it, reserved, NVML
    used/total), then the host (peak RSS, the request's own peak above the RSS before it, RSS now)."""
    rows = [[f"cuda:{d.index} {d.name}", format_bytes(d.peak_allocated_bytes), format_bytes(d.request_peak_bytes),
             format_bytes(d.reserved_bytes), format_bytes(d.nvml_used_bytes), format_bytes(d.nvml_total_bytes)]
            for d in memory.devices]
    if not rows:
        rows.append(["GPU", "no GPU used", MISSING, MISSING, MISSING, MISSING])
    rows.append(["host", format_bytes(memory.host_peak_rss_bytes), format_bytes(memory.host_request_peak_bytes),
                 format_bytes(memory.host_rss_bytes), MISSING, MISSING])
    return rows


def run_rows(readout) -> list[list]:
    result = readout.result
    return [
        ["model", readout.model or MISSING],
        ["profile", readout.profile or MISSING],
        ["tokens read", f"{result.tokens:,}"],
        ["windows read", result.windows],
        ["reading", reading_summary(readout)],
        ["why", result.reading.reason if result.reading else MISSING],
        ["found", verdict_text(result)],
        ["batch size used", result.batch_size],
        ["out-of-memory back-offs", result.backoffs],
        ["memory: predicted vs measured", prediction_text(readout.memory_prediction)],
        ["notices", " ".join(result.notices) or "none"],
        *([["queue", queue_text(readout.queue)]] if readout.queue else []),  # a shared deployment
        *([["replica", readout.replica]] if readout.replica else []),  # served by Ray Serve replicas
    ]


def queue_text(queue) -> str:
    """How long a request waited for the model, and behind how many: "waited 1.2 s, 3 ahead when it arrived"."""
    ahead = queue.ahead_at_start
    return (f"waited {format_seconds(queue.waited_s)}, {ahead} request{'s' if ahead != 1 else ''} ahead "
            "when it arrived")


def reading_summary(readout) -> str:
    """E.g. "read 6 of 51 windows (guided, 6 sized to their passage) in 21 s; a full read would take about 3 min"."""
    result = readout.result
    reading = result.reading
    if reading is None:
        return MISSING
    sized = [f"{reading.narrowed:,} sized to their passage"] if reading.narrowed else []
    sized += [f"{reading.widened:,} read again whole"] if reading.widened else []
    text = (f"read {reading.windows_read:,} of {reading.windows_total:,} windows "
            f"({', '.join([reading.mode, *sized])}) in {format_seconds(result.latency_s.get('total'))}")
    if reading.expected_s is not None and reading.forward_s is not None:
        text += (f" (the model's passes {format_seconds(reading.forward_s)}, expected "
                 f"{format_about(reading.expected_s)})")
    if readout.full_read_s is not None:
        text += f"; a full read would take about {format_seconds(readout.full_read_s)}"
    return text


def format_about(seconds: float) -> str:
    """A prediction's seconds, as roughly as it is known: "under a second", "about 6 s", "about 2 min 5 s"."""
    if seconds < 1:
        return "under a second"
    minutes, rest = divmod(round(seconds), 60)
    return f"about {minutes} min {rest} s" if minutes else f"about {rest} s"


def read_expectation(plan) -> str:
    """What a planned read is expected to take before it starts, from the model's measured throughput (the plan's
    `full_read_s`, `guided_read_s`): "Reading windows: about 40 s for the whole document, a guided read about
    6 s"; "Reading windows" before any was measured."""
    if plan.full_read_s is None:
        return "Reading windows"
    text = f"Reading windows: {format_about(plan.full_read_s)} for the whole document"
    if plan.guided_read_s is not None:
        text += f", a guided read {format_about(plan.guided_read_s)}"
    return text


def prediction_text(prediction) -> str:
    """'predicted 1.2 GB, measured 1.3 GB (-8 %), peak RSS on cpu': the planner's forecast against the run."""
    if prediction is None:
        return MISSING
    error_part = f" ({prediction.error_pct:+.0f} %)" if prediction.error_pct is not None else ""
    return (f"predicted {format_bytes(prediction.predicted_peak_bytes)}, measured "
            f"{format_bytes(prediction.measured_peak_bytes)}{error_part}, {prediction.measured_as} on "
            f"{prediction.device}")


def load_rows(readout) -> list[list]:
    """The load readout (`longqa.readout.LoadReadout`) as one row of LOAD_HEADERS."""
    device_map = readout.device_map
    if device_map:
        by_device: dict[str, int] = {}
        for device in device_map.values():
            by_device[device] = by_device.get(device, 0) + 1
        placement = ", ".join(f"{device}: {n} module(s)" for device, n in by_device.items())
    else:
        placement = "whole model on one device"
    per_device = readout.weight_bytes_per_device
    return [
        ["model", readout.model_ref or MISSING],
        ["profile", readout.profile or MISSING],
        ["strategies", ", ".join(readout.strategies) or "none"],
        ["weights dtype", readout.dtype or MISSING],
        ["load time", format_seconds(readout.load_time_s)],
        ["weights per device", ", ".join(f"{d}: {format_bytes(b)}" for d, b in per_device.items()) or MISSING],
        ["device map", placement],
        ["host RAM peak while loading", format_bytes(readout.host_peak_rss_bytes)],
        ["fallback", readout.fallback_reason or "none"],
        ["notes", "; ".join(readout.notes) or "none"],
    ]


def history_entry(readout, run: int, documents: list[str] | None = None, finished_at: str | None = None) -> dict:
    """What the run history (the page's state) keeps of one answer's readout (bytes and seconds): the request (the
    question, the documents' names), the answer with its score, confidence and verdict (`found`: None without a
    not-found rule), when it finished (ISO 8601), the profile (`custom`: with the strategies ticked) and the
    figures."""
    result = readout.result
    best = result.answers[0] if result.answers and result.answers[0].document is not None else None
    verdict = result.verdict
    return {"run": run, "finished_at": finished_at, "profile": readout.profile, "model": readout.model,
            "score": best.score if best is not None else None,
            "confidence": verdict.confidence if verdict is not None and verdict.found is False
            else (best.confidence if best is not None else None),
            "found": verdict.found if verdict is not None else None,
            "strategies": list(readout.strategies or []) if readout.profile == "custom" else [],
            "question": result.question,
            "documents": list(documents) if documents is not None else [d.name for d in result.documents],
            "answer": best_answer(result),
            "reading": result.reading.mode if result.reading else None,
            "tokens": result.tokens, "windows": result.windows,
            "request_peak_bytes": readout.request_memory.request_peak_bytes,
            "peak_allocated_bytes": result.memory.peak_allocated_bytes,
            "host_peak_rss_bytes": result.memory.host_peak_rss_bytes,
            "latency_s": result.latency_s["total"], "tokens_per_s": result.tokens_per_s}


def profile_label(entry: dict) -> str:
    """A history entry's profile: "cpu", or "custom (int8_dynamic, fast_attention)"."""
    strategies = entry.get("strategies") or []
    return f"{entry['profile']} ({', '.join(strategies) or 'none'})" if entry["profile"] == "custom" else \
        str(entry["profile"])


def history_rows(history: list[dict]) -> list[list]:
    return [[h["run"], profile_label(h), h["model"], h.get("question", MISSING), ", ".join(h.get("documents") or [])
             or MISSING, h.get("answer", MISSING), h.get("reading") or MISSING, h["tokens"], h["windows"],
             format_bytes(h.get("request_peak_bytes")), format_bytes(h["peak_allocated_bytes"]),
             format_bytes(h["host_peak_rss_bytes"]), format_seconds(h["latency_s"]), format_rate(h["tokens_per_s"])]
            for h in history]


# The history as data (the CSV download): one row per run, numbers in base units named in the header, empty where a
# value is not known; the page's table shows the same runs formatted (`history_rows`).
HISTORY_DATA = {"run": "run", "finished_at": "finished_at (ISO 8601, UTC)", "profile": "profile", "model": "model",
                "strategies": "strategies", "question": "question", "documents": "documents", "answer": "answer",
                "found": "found", "score": "score", "confidence": "confidence", "reading": "reading",
                "tokens": "tokens", "windows": "windows", "latency_s": "latency (seconds)",
                "tokens_per_s": "throughput (tokens per second)", "request_peak_bytes": "request's own peak (bytes)",
                "peak_allocated_bytes": "peak GPU allocated (bytes)", "host_peak_rss_bytes": "host peak RSS (bytes)"}


def history_data(history: list[dict]) -> pd.DataFrame:
    """The run history as data (`HISTORY_DATA`): lists joined with "; ", nothing made into words."""
    rows = [[("; ".join(h.get(key) or []) if key in ("documents", "strategies") else h.get(key))
             for key in HISTORY_DATA] for h in history]
    return pd.DataFrame(rows, columns=list(HISTORY_DATA.values()))


PLOT_COLUMNS = ["run", "profile", PLOT_MEMORY, PLOT_LATENCY, "strategies", "reading"]


def history_frame(history: list[dict]) -> pd.DataFrame:
    """Data for the bar plots: one row per run, labelled by its number and coloured by its profile; peak memory is
    the GPU peak where a GPU ran, else host RSS."""
    rows = []
    for h in history:
        peak = h["peak_allocated_bytes"] if h["peak_allocated_bytes"] is not None else h["host_peak_rss_bytes"]
        rows.append({"run": f"{h['run']:02d}", "profile": h["profile"], PLOT_MEMORY: (peak or 0) / 1e6,
                     PLOT_LATENCY: h["latency_s"], "strategies": ", ".join(h.get("strategies") or []) or MISSING,
                     "reading": h.get("reading") or MISSING})
    return pd.DataFrame(rows, columns=PLOT_COLUMNS)


PLOT_HEADROOM = 1.05  # the tallest bar stops at least this far under the plot's top: its value is read, not cut
PLOT_TOPS = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def plot_top(values: list[float]) -> float | None:
    """The top of a bar plot's y axis over `values`: the first round number (`PLOT_TOPS` times a power of ten) at
    least `PLOT_HEADROOM` times the largest, as a chart's "nice" axis ends; None without a positive value (the
    plot's own scale then)."""
    largest = max((value for value in values if value is not None and math.isfinite(value)), default=0.0)
    if largest <= 0:
        return None
    wanted = largest * PLOT_HEADROOM
    power = 10.0 ** math.floor(math.log10(wanted))
    return next(float(f"{step * power:.12g}") for step in PLOT_TOPS if step * power >= wanted * (1 - 1e-9))


def plot_limits(frame: pd.DataFrame) -> dict[str, list[float | None]]:
    """Each bar plot's y range over its data (`history_frame`): from zero to `plot_top`."""
    return {column: [0, plot_top([float(value) for value in frame[column]])] for column in (PLOT_MEMORY, PLOT_LATENCY)}


PROFILE_COLOURS = ["#2563eb", "#f97316", "#16a34a", "#dc2626", "#9333ea", "#0891b2", "#ca8a04", "#db2777",
                   "#4b5563", "#65a30d"]


def profile_colours(profiles: list[str], history: list[dict]) -> dict[str, str]:
    """A colour for each profile in the history, fixed by its place in the registry's `profiles` (so a profile keeps
    its colour from run to run); profiles outside it follow."""
    seen = list(dict.fromkeys(h["profile"] for h in history))
    order = [*profiles, *(name for name in seen if name not in profiles)]
    return {name: PROFILE_COLOURS[order.index(name) % len(PROFILE_COLOURS)] for name in seen}


def gpu_gauge(snapshot: list[dict]) -> dict[str, float]:
    """{"GPU 0 name: used / total": fraction used} for a gauge of bars; GPUs NVML cannot measure are left out."""
    gauge = {}
    for gpu in snapshot:
        used, total = gpu.get("nvml_used_bytes"), gpu.get("nvml_total_bytes")
        if used is None or not total:
            continue
        gauge[f"GPU {gpu['index']} {gpu['name']}: {format_bytes(used)} / {format_bytes(total)}"] = used / total
    return gauge


def training_rows(readout) -> list[list]:
    return [["without checkpointing", format_bytes(readout.peak_bytes_without), format_seconds(readout.time_s_without)],
            ["with checkpointing", format_bytes(readout.peak_bytes_with), format_seconds(readout.time_s_with)]]


def training_summary(readout, window_tokens: int) -> str:
    saved = readout.saved_bytes
    verb = "saves" if saved > 0 else "changes"
    return (f"One forward+backward step on a {window_tokens:,}-token window (measured by {readout.measured_by}): "
            f"checkpointing {verb} {format_bytes(abs(saved))} ({readout.saved_fraction:.0%} of the step's peak) "
            f"and takes {readout.time_ratio:.2f}× the time. It saves nothing at inference: activations are only "
            "kept, and so only recomputed, when a backward pass follows.")
