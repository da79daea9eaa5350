"""Write the bundled sample documents the app's offline examples use: facts in prose, from `training.demo_task`.

Usage: python scripts/make_samples.py [--out longqa/samples] [--verify]
Each sample is ordinary English prose with "The {attribute} of {entity} is {value}." facts at sentence
boundaries, some of them distractors (same attribute, other entity). `examples.json` lists a question per
asked-about fact; with `--verify` only the questions the bundled demo model answers correctly (in fp32 and with
the `auto` profile) are kept.
A one-off build script: the generated files are committed, the app only reads them.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from training.demo_task import Fact, FactWriter  # noqa: E402
from longqa.session import Session, read_documents  # noqa: E402

SENTENCES_PER_PARAGRAPH = 6


@dataclass(frozen=True)
class SampleSpec:
    file_name: str
    title: str
    seed: int
    n_chars: int
    n_asked: int  # facts a question is written for
    same_attribute: int  # distractors per asked fact: same attribute, another entity
    unrelated: int  # distractors about other attributes and entities


SAMPLES = (  # file, title, seed, characters, asked facts, distractors
    SampleSpec("harbour_records.txt", "Harbour records", 101, 9_000, 4, 1, 2),  # short: one or two windows
    SampleSpec("expedition_notes.md", "Expedition notes", 202, 48_000, 5, 1, 4),  # long: several windows
    SampleSpec("museum_catalogue.html", "Museum catalogue", 303, 22_000, 4, 1, 3),  # HTML: tags are dropped
)
VERIFY_PROFILES = ("baseline-fp32", "auto")  # the reference, and what the page starts with on this machine


def paragraphs_with_facts(writer: FactWriter, n_chars: int, facts: list[Fact]) -> list[str]:
    """About `n_chars` of filler prose grouped in paragraphs, the facts placed at random sentence boundaries."""
    sentences: list[str] = []
    size = 0
    while size < n_chars:
        sentences.append(writer.filler())
        size += len(sentences[-1]) + 1
    slots = sorted(writer.rng.randint(1, len(sentences) - 1) for _ in facts)  # never last: see below
    placed = list(facts)
    writer.rng.shuffle(placed)
    for offset, (slot, fact) in enumerate(zip(slots, placed)):
        sentences.insert(slot + offset, fact.sentence)
    # The demo model saw facts between spaces, never next to a line break: no paragraph starts or ends with one.
    fact_sentences = {fact.sentence for fact in facts}
    paragraphs, current = [], []
    for sentence, following in zip(sentences, [*sentences[1:], ""]):
        current.append(sentence)
        if (len(current) >= SENTENCES_PER_PARAGRAPH and sentence not in fact_sentences
                and following not in fact_sentences):
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def render(spec: SampleSpec, paragraphs: list[str]) -> str:
    """The file's text in its format (plain text, Markdown or HTML)."""
    if spec.file_name.endswith(".md"):
        return f"# {spec.title}\n\n" + "\n\n".join(paragraphs) + "\n"
    if spec.file_name.endswith(".html"):
        body = "\n".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
        return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(spec.title)}</title>"
                f"</head>\n<body>\n<h1>{html.escape(spec.title)}</h1>\n{body}\n</body></html>\n")
    return f"{spec.title}\n\n" + "\n\n".join(paragraphs) + "\n"


def make_sample(spec: SampleSpec) -> tuple[str, list[Fact]]:
    """The file text and the facts questions are asked about."""
    writer = FactWriter(spec.seed, split="test")
    asked: list[Fact] = []
    facts: list[Fact] = []
    while len(asked) < spec.n_asked:
        target = writer.target()
        if any(f.entity == target.entity or f.value == target.value for f in facts):
            continue
        asked.append(target)
        facts.append(target)
        facts.extend(writer.distractors(target, spec.same_attribute, 0, 0))
    facts.extend(writer.target() for _ in range(spec.unrelated))
    return render(spec, paragraphs_with_facts(writer, spec.n_chars, facts)), asked


def demo_model_answers(sessions, path: Path, question: str) -> list[str]:
    """The demo model's best answer under each verification profile."""
    documents, _ = read_documents([str(path)])
    answers = []
    for session in sessions:
        result = session.ask(session.plan(documents, question)).result
        answers.append(result.answers[0].text if result.answers else "")
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "longqa" / "samples")
    parser.add_argument("--verify", action="store_true",
                        help="keep only the questions the bundled demo model answers correctly")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    sessions = []
    if args.verify:
        for profile in VERIFY_PROFILES:
            sessions.append(Session())
            sessions[-1].load("demo", profile)

    examples = []
    for spec in SAMPLES:
        text, asked = make_sample(spec)
        path = args.out / spec.file_name
        path.write_text(text, encoding="utf-8")
        print(f"{path.name}: {len(text):,} characters, {len(asked)} questions", file=sys.stderr)
        for fact in asked:
            if sessions:
                got = demo_model_answers(sessions, path, fact.question)
                print(f"  {fact.question} -> {got} (expected {fact.value!r})", file=sys.stderr)
                if any(answer != fact.value for answer in got):
                    continue
            examples.append({"file": spec.file_name, "question": fact.question, "answer": fact.value})
    (args.out / "examples.json").write_text(json.dumps(examples, indent=2) + "\n", encoding="utf-8")
    print(f"{len(examples)} examples written to {args.out / 'examples.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
