"""The visitor's wait against the engine's time (`python -m bench page-wait`, issue 60 item 2): `python app.py`
serves one model on one profile as a visitor gets it (no flags but the model and profile), and Debian's chromium
(Playwright) uploads a PDF of `--pages` pages, asks its question and waits for the answer, `--rounds` times. Each
round times, in the browser's own clock, the click on Ask to the first best answer so far and to the final answer
(the readout landing with it), beside the engine's time for the same request (its readout's `latency_s.total`:
reading the upload, planning and answering). The difference is what the page adds: gradio's queue, the stream of
updates, the page's own steps before and after the answer.

A first ask over a short pasted text warms the server (the model's first call) and is not counted. It measures
(`measure`) and writes JSON and Markdown (`markdown`); docs/reading.md keeps the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from bench.crowd.load_check import start_server, stop_server
from bench.first_answer import PAGES, make_pdf
from bench.floor import kind_name
from bench.browser import CHROMIUM, launch_chromium
from bench.measured import write_measurement
from bench.peers import git_commit
from evals import eval_task
from longqa.bench.runner import machine_info
from strategies.hardware import detect_hardware

START_TIMEOUT_S = 600  # the server's start: loading arch:large and quantizing it takes a while on 2 cores
ASK_TIMEOUT_S = 900
WIDTH, HEIGHT = 1400, 900

# In the page, before the click: once Ask has cleared the answer area, when the answer box first shows a best answer
# so far, and when the readout (which lands with the final answer) holds the new answer's timings; all in the page's
# clock (performance.now()).
WATCH = """() => {
  const marks = {};
  const box = document.querySelector('#best-answer');
  const readout = document.querySelector('#readout');
  const look = () => {
    const now = performance.now();
    const done = readout.innerText.includes('tokens_per_s');
    if (marks.cleared === undefined && !done) marks.cleared = now;  // Ask clears the answer area first
    if (marks.cleared === undefined) return;
    if (marks.first === undefined && box && /best so far/.test(box.innerText)) marks.first = now;
    if (marks.final === undefined && done) marks.final = now;
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true,
                                                      attributes: true});
  window.__wait = marks;
  const ask = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Ask');
  marks.click = performance.now();
  ask.click();
}"""


@contextmanager
def served(model: str, profile: str):
    """`python app.py --model MODEL --profile PROFILE` until its page answers (`load_check.start_server`): yields its
    address; the server is ended after."""
    server, url = start_server(["--model", model, "--profile", profile], START_TIMEOUT_S)
    try:
        yield url
    finally:
        stop_server(server)


def wait_for(page, script: str, timeout_s: float = ASK_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = page.evaluate(script)
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"the page did not answer within {timeout_s:.0f} s")
        time.sleep(0.05)


def readout_of(page) -> dict:
    """The answer's readout, from the page's JSON panel."""
    return readout_from_text(page.locator("#readout").inner_text())


def readout_from_text(shown: str) -> dict:
    """The readout the JSON panel shows as `shown` (each token on a line of its own, after the panel's label; the
    deeper objects and lists folded: they read as empty)."""
    text = "".join(shown.splitlines())
    return json.loads(re.sub(r"\[Array\(\d+\)\]", "[]", re.sub(r"\{Object\(\d+\)\}", "{}", text[text.index("{"):])))


def asked(page, question: str) -> dict:
    """Ask `question` over what the page holds: the browser's times from the click, and the engine's readout."""
    page.get_by_label("Question", exact=True).fill(question)
    page.evaluate(WATCH)
    marks = wait_for(page, "() => window.__wait.final !== undefined && window.__wait")
    tracker = page.locator("#answer-status [data-testid=status-tracker]").first
    while "hide" not in (tracker.get_attribute("class") or ""):
        time.sleep(0.05)
    readout = readout_of(page)
    engine_s = readout["latency_s"]["total"]
    return {"first_s": None if marks.get("first") is None else (marks["first"] - marks["click"]) / 1000,
            "final_s": (marks["final"] - marks["click"]) / 1000, "engine_s": engine_s,
            "answer": page.locator("#best-answer textarea").input_value(),
            "reading": readout.get("reading")}


def measure(model: str, profile: str, pages: int, rounds: int, work: Path) -> dict:
    from playwright.sync_api import sync_playwright  # deferred: the test extras' (requirements-dev.txt)

    if not CHROMIUM.exists():
        raise SystemExit(f"needs Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
    pdf, item = make_pdf(pages)
    pdf_path = work / f"report-{pages}-pages.pdf"
    pdf_path.write_bytes(pdf)
    warm = eval_task.make_document(1, 400)
    machine = machine_info(detect_hardware())
    rows = []
    with served(model, profile) as url, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.set_default_timeout(ASK_TIMEOUT_S * 1000)
        page.goto(url)
        page.get_by_label("Question", exact=True).wait_for()
        page.get_by_label("Or paste text", exact=True).fill(warm.text)
        warm_row = asked(page, warm.question)  # the model's first call, not counted
        page.get_by_label("Or paste text", exact=True).fill("")
        page.locator("#documents input[type=file]").set_input_files(str(pdf_path))
        wait_for(page, f"() => document.querySelector('#documents').innerText.includes('{pdf_path.stem}') "
                       "&& !document.querySelector('#readout').innerText.includes('tokens_per_s')")  # uploaded
        for round_index in range(rounds):
            rows.append({"round": round_index, **asked(page, item.question)})
        browser.close()
    for row in rows:
        row["page_adds_s"] = row["final_s"] - row["engine_s"]
    return {"model": model, "profile": profile, "pages": pages, "rounds": rounds, "question": item.question,
            "width": WIDTH, "machine": machine, "kind": kind_name(detect_hardware()), "warm": warm_row, "rows": rows,
            "load_average_end": list(os.getloadavg())}


def markdown(result: dict) -> str:
    rows = result["rows"]
    machine = result["machine"]
    median = lambda key: statistics.median(row[key] for row in rows if row[key] is not None)  # noqa: E731
    lines = [f"# The visitor's wait against the engine's time: {result['model']} on `{result['profile']}`, "
             f"a {result['pages']}-page PDF",
             "",
             f"`{result['command']}` on {machine['cpu_model']} (kind {result['kind']}; {len(rows)} asks after one "
             f"warm-up; chromium, on the same cores, at {result['width']} px; load average at the end "
             f"{result['load_average_end'][0]:.1f}).",
             "",
             "| ask | click to first best so far | click to final answer | engine (readout total) | the page adds |",
             "|---|---|---|---|---|"]
    for row in rows:
        first = "—" if row["first_s"] is None else f"{row['first_s']:.2f} s"
        lines.append(f"| {row['round'] + 1} | {first} | {row['final_s']:.2f} s | {row['engine_s']:.2f} s | "
                     f"{row['page_adds_s']:+.2f} s |")
    lines += ["", f"Median: the visitor waits {median('final_s'):.2f} s, the engine works {median('engine_s'):.2f} s: "
              f"the page adds {median('page_adds_s'):+.2f} s (target: within 1 s)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench page-wait", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="arch:large")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--pages", type=int, default=PAGES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="docs/results/page-wait")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="page-wait-") as work:
        result = measure(args.model, args.profile, args.pages, args.rounds, Path(work))
    result["command"] = "python -m bench page-wait " + " ".join(argv)
    result["commit"] = git_commit()
    stem = f"page-wait-{result['kind']}-{args.model.replace(':', '-')}"
    write_measurement(args.out, stem, result, markdown(result))
    return 0
