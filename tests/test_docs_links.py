"""The README's and the guides' links: every relative markdown link points at a file that exists, and raw results
(JSON, npz, logs) live in docs/results/, not beside the guides. Reads files only; no model, no network."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
RAW_SUFFIXES = {".json", ".jsonl", ".npz", ".log", ".txt"}

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted(RESULTS.glob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The link targets of a markdown text that name a file of this tree (no scheme, not an anchor alone)."""
    prose = CODE_SPAN.sub("", FENCE.sub("", text))
    targets = (target.split("#", 1)[0] for target in LINK.findall(prose))
    return [target for target in targets if target and "://" not in target and not target.startswith("mailto:")]


def test_relative_links_finds_files_and_skips_urls_anchors_and_code():
    text = ("[a](docs/a.md#part) [b](https://example.org/x.md) [c](#top) ![d](d.png \"title\")\n"
            "`[e](e.md)`\n```\n[f](f.md)\n```\n[g](<g.md>)")
    assert relative_links(text) == ["docs/a.md", "d.png", "g.md"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    missing = [target for target in relative_links(path.read_text(encoding="utf-8"))
               if not (path.parent / target).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_raw_results_live_in_docs_results():
    strays = sorted(str(path.relative_to(ROOT)) for path in DOCS.rglob("*")
                    if path.is_file() and path.suffix in RAW_SUFFIXES and RESULTS not in path.parents)
    assert not strays, f"raw results outside docs/results/: {strays}"


def test_every_result_is_listed_in_the_results_readme():
    listed = (RESULTS / "README.md").read_text(encoding="utf-8")
    entries = sorted(path.name for path in RESULTS.iterdir() if path.name != "README.md")
    unlisted = [name for name in entries if f"({name}" not in listed]
    assert not unlisted, f"docs/results/README.md has no line for: {unlisted}"


def test_ci_runs_the_readmes_test_command_unchanged():
    """The README's "Test it" block is the command CI's last line runs, word for word (a drift between them is a
    suite nobody runs as the README says)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^## Test it\n+```bash\n(.+?)\n```", readme, re.M | re.S)
    assert block is not None, "the README has no Test it block"
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert ci_lines[-1].strip() == block.group(1).strip()
