"""Long evaluation documents for question-guided reading (issue 28): one asked fact in 100,000 tokens and more of
prose, among the distractors that fool a ranking, in three categories (`literal`, `paraphrased`, `notes`).

Built only from the evaluation generator (`eval_task`: its names, values, attributes and prose), never from the
training generator. It writes text and knows where the answer is; it loads no model and reads no file (the
hand-written notes are passed in by the caller).
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field
from typing import Callable

from evals import eval_task
from longqa.demo_model.fact import Fact

CATEGORIES = ("literal", "paraphrased", "notes")
DEFAULT_TOKENS = 100_000
CHARS_PER_TOKEN_GUESS = 4.0  # byte-level BPE on English prose; a counter, when given, corrects the guess
ENTITY_MENTIONS = (12, 17)  # places the asked entity is named without the fact: enough to tie many windows
SAME_ATTRIBUTE = (3, 6)  # other entities' values for the asked attribute
SAME_ENTITY = (3, 5)  # the asked entity's other attributes
FACTLIKE = (2, 4)  # eval_task's fact-shaped sentences about things that are not entities
ATTRIBUTE_MENTIONS = (1, 2)  # eval_task's sentences naming the entity and the attribute without a value
_CATEGORY_SEEDS = {"literal": 1, "paraphrased": 2, "notes": 3}  # fixed salts: str hashes change between runs

# Sentences that name the asked entity and nothing about any attribute: they make every window they sit in match
# the entity's words, which is what a ranking sees first. The entity is never first, so it keeps its own case.
_ENTITY_MENTIONS = [
    "We stopped at {entity} on the way back and stayed longer than we meant to.",
    "Nobody could agree on what ought to be done about {entity}.",
    "Talk at supper turned, as it always does, to {entity}.",
    "A letter about {entity} arrived on {weekday}, but it said very little.",
    "Somebody mentioned {entity} in passing and the room went quiet.",
    "There was a faded photograph of {entity} pinned above the stove.",
    "I read an old pamphlet on {entity} while waiting for the tram.",
    "The guide pointed towards {entity} and hurried on.",
    "Rumours about {entity} travel faster than the post.",
    "On {weekday} {who} spent the whole morning talking about {entity}.",
    "Half the town still has an opinion on {entity}.",
    "In {month} the talk was of little else but {entity}.",
]

# Questions whose words for the attribute are not the document's: no content word of a paraphrase shares a stem
# with the attribute's name (tests/test_long_eval.py checks it), so a ranking can only match the entity.
PARAPHRASES: dict[str, tuple[str, ...]] = {
    "motto": ("What words does {entity} live by?", "Which saying is written on the crest of {entity}?"),
    "mascot": ("What figure cheers on {entity} at matches?",),
    "nickname": ("What do people affectionately call {entity}?",),
    "birthplace": ("Where was {entity} born?",),
    "headquarters": ("Where is {entity} based?", "From which town is {entity} run?"),
    "callsign": ("How is {entity} identified over the radio?",),
    "founder": ("Who established {entity}?", "Who started {entity}?"),
    "curator": ("Who looks after the collection at {entity}?",),
    "postcode": ("Which postal district does {entity} belong to?",),
    "tonnage": ("How heavy is {entity}?",),
    "wingspan": ("How broad is {entity} from tip to tip?",),
    "homeland": ("Which country does {entity} come from originally?",),
    "patron": ("Who sponsors {entity}?",),
    "skipper": ("Who captains {entity}?",),
    "treasurer": ("Who keeps the accounts of {entity}?", "Who looks after the money of {entity}?"),
    "hometown": ("Where did {entity} grow up?",),
    "birthday": ("On what date was {entity} born?",),
    "surname": ("What family name does {entity} carry?",),
    "namesake": ("Who is {entity} called after?",),
    "landlord": ("To whom does {entity} pay rent?",),
    "warden": ("Who guards {entity}?",),
    "dialect": ("What local speech is heard in {entity}?",),
    "delicacy": ("What treat is {entity} known for?",),
    "alias": ("What other name does {entity} go by?",),
    "hallmark": ("What stamp identifies {entity}?",),
    "barcode": ("Which scannable number identifies {entity}?",),
    "serial": ("What manufacturing number does {entity} carry?",),
    "tagline": ("What slogan goes with {entity}?",),
    "berth": ("Where does {entity} moor?",),
    "draught": ("How deep does {entity} sit in the water?",),
    "payload": ("How much cargo can {entity} carry?",),
    "opening day": ("When did {entity} first welcome visitors?",),
    "closing day": ("When did {entity} shut for good?",),
    "feast day": ("On which holy date is {entity} honoured?",),
    "patron saint": ("Which holy protector watches over {entity}?",),
    "mother tongue": ("What language did {entity} first speak?",),
    "favourite dish": ("What meal does {entity} like best?",),
    "lead singer": ("Who stands at the microphone for {entity}?",),
    "eldest son": ("Who is the firstborn boy of {entity}?",),
    "call sign": ("What does {entity} answer to on the radio?",),
    "blood type": ("Which group is {entity} in for transfusions?",),
    "founding date": ("When was {entity} established?",),
    "launch date": ("When was {entity} first put to sea?",),
    "head count": ("How many people does {entity} employ?",),
    "footfall": ("How many visitors pass through {entity}?",),
    "cruising pace": ("How fast does {entity} usually travel?",),
    "toll": ("How much must you pay to cross {entity}?",),
}


@dataclass(frozen=True)
class LongItem:
    """One question over one long document: the gold answer at `answer_start`, inside the gold fact's sentence
    [`fact_start`, `fact_end`) (what a read window must hold for the model to see the fact)."""

    category: str
    name: str
    text: str = field(repr=False)
    question: str
    answer: str
    answer_start: int
    fact_start: int
    fact_end: int
    detail: dict = field(default_factory=dict)  # entity, attribute, mentions, note id: for reports, not scoring

    @property
    def answer_end(self) -> int:
        return self.answer_start + len(self.answer)

    def to_dict(self, with_text: bool = False) -> dict:
        out = asdict(self)
        if not with_text:
            del out["text"]
        return out


def paraphrase(rng: random.Random, fact: Fact) -> str:
    """A question about `fact` that does not use the attribute's words."""
    return rng.choice(PARAPHRASES[fact.attribute]).format(entity=fact.entity)


# --- assembling prose ----------------------------------------------------------------------------------------------

def filler(writer: eval_task.EvalWriter, registers: list[str], chars: int) -> list[str]:
    """Prose sentences from `registers` until they hold about `chars` characters."""
    sentences: list[str] = []
    total = 0
    while total < chars or not sentences:
        sentences.append(writer.prose_sentence(registers))
        total += len(sentences[-1]) + 1
    return sentences


def spread_slots(rng: random.Random, n_slots: int, count: int) -> list[int]:
    """`count` slots out of `n_slots`, one in each of `count` equal stretches: far apart, so that the sentences put
    there land in different windows of a long document."""
    stretch = n_slots / count
    return [min(n_slots - 1, int(i * stretch + rng.random() * stretch)) for i in range(count)]


def join_paragraphs(rng: random.Random, pieces: list[str], alone: int | None = None) -> tuple[str, list[int]]:
    """The pieces as paragraphs of 3 to 9 sentences, and where each piece starts in the text. The piece at index
    `alone` (a hand-written note, perhaps of several lines) is a paragraph of its own: whole, and read as one text
    rather than run into the prose around it."""
    parts: list[str] = []
    starts: list[int] = []
    offset = in_paragraph = 0
    limit = rng.randint(3, 9)
    for index, piece in enumerate(pieces):
        is_alone = index == alone
        if parts:
            breaks = is_alone or in_paragraph >= limit
            if breaks:
                in_paragraph, limit = 0, rng.randint(3, 9)
            parts.append("\n\n" if breaks else " ")
            offset += len(parts[-1])
        starts.append(offset)
        parts.append(piece)
        offset += len(piece)
        in_paragraph = limit if is_alone else in_paragraph + 1  # after a note, the next piece starts a paragraph
    return "".join(parts), starts


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")


def sentence_around(text: str, start: int, end: int) -> tuple[int, int]:
    """The sentence holding text[start:end]: from after the last sentence end or line break before it to the next
    sentence end after it (an abbreviation before the answer only shortens the span; it never leaves the answer)."""
    found = [(text.rfind(mark, 0, start), mark) for mark in ("\n", ". ", "! ", "? ")]
    begin = max([0] + [at + len(mark) for at, mark in found if at >= 0])
    match = _SENTENCE_END.search(text, end)
    if match is None:
        return begin, len(text)
    return begin, match.start() if match.group() == "\n" else match.end()


# --- the categories ------------------------------------------------------------------------------------------------

def item_seed(category: str, seed: int, index: int) -> int:
    return seed * 1_000_000 + _CATEGORY_SEEDS[category] * 100_000 + index


def fact_document(seed: int, chars: int, paraphrased: bool) -> LongItem:
    """One `literal` or `paraphrased` item of about `chars` characters: the fact once at a random place; the same
    attribute of other entities, the entity's other attributes, fact-shaped sentences and mentions of the entity
    with the attribute at random places; and the entity named alone in 12 to 17 places spread over the document."""
    writer = eval_task.EvalWriter(seed)
    rng = writer.rng
    target = writer.target()
    counts = (rng.randint(*SAME_ATTRIBUTE), rng.randint(*SAME_ENTITY), rng.randint(*FACTLIKE),
              rng.randint(*ATTRIBUTE_MENTIONS))
    # A drawn "other" entity can be the asked one, and a value can recur: either would be a second gold fact.
    conflicting = f"The {target.attribute} of {target.entity} is "
    distractors = [s for s in writer.distractors(target, *counts) if target.value not in s
                   and not s.startswith(conflicting)]
    mentions = [writer.fill(rng.choice(_ENTITY_MENTIONS), entity=target.entity)
                for _ in range(rng.randint(*ENTITY_MENTIONS))]
    registers = rng.sample(sorted(eval_task.REGISTERS), rng.choice([1, 2, 3]))
    pieces = filler(writer, registers, max(0, chars - sum(len(s) + 1 for s in distractors + mentions)))
    # Mentions first, each in its own stretch; then the rest anywhere. Inserting from the back keeps the earlier
    # slots where they were drawn.
    slots = spread_slots(rng, len(pieces), len(mentions))
    for slot, mention in sorted(zip(slots, mentions), reverse=True):
        pieces.insert(slot, mention)
    for sentence in distractors:
        pieces.insert(rng.randint(0, len(pieces)), sentence)
    fact_index = rng.randint(0, len(pieces))
    pieces.insert(fact_index, target.sentence)
    text, starts = join_paragraphs(rng, pieces)
    fact_start = starts[fact_index]
    fact_end = fact_start + len(target.sentence)
    answer_start = fact_end - 1 - len(target.value)  # the value ends the sentence, before its full stop
    category = "paraphrased" if paraphrased else "literal"
    question = paraphrase(rng, target) if paraphrased else target.question
    detail = {"entity": target.entity, "attribute": target.attribute, "entity_mentions": len(mentions),
              "same_attribute": counts[0], "same_entity": counts[1], "registers": registers}
    return LongItem(category, f"{category} seed {seed}", text, question, target.value, answer_start, fact_start,
                    fact_end, detail)


def note_document(seed: int, chars: int, note: dict) -> LongItem:
    """One `notes` item: a hand-written note (`id`, `text`, `question`, `answer`, `answer_start`) placed whole, as
    its own paragraph, at a random place in about `chars` characters of unrelated prose."""
    writer = eval_task.EvalWriter(seed)
    rng = writer.rng
    registers = rng.sample(sorted(eval_task.REGISTERS), rng.choice([1, 2, 3]))
    pieces = filler(writer, registers, max(0, chars - len(note["text"])))
    note_index = rng.randint(0, len(pieces))
    pieces.insert(note_index, note["text"])
    text, starts = join_paragraphs(rng, pieces, alone=note_index)
    answer_start = starts[note_index] + note["answer_start"]
    fact_start, fact_end = sentence_around(text, answer_start, answer_start + len(note["answer"]))
    return LongItem("notes", f"notes seed {seed} ({note['id']})", text, note["question"], note["answer"],
                    answer_start, fact_start, fact_end, {"note": note["id"], "registers": registers})


def check_category(category: str, has_notes: bool) -> None:
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
    if category == "notes" and not has_notes:
        raise ValueError("the notes category needs the hand-written notes to place")


def make_item(category: str, seed: int, chars: int, note: dict | None = None) -> LongItem:
    check_category(category, note is not None)
    if category == "notes":
        return note_document(seed, chars, note)
    return fact_document(seed, chars, paraphrased=category == "paraphrased")


def item_of_tokens(category: str, seed: int, tokens: int, count_tokens: Callable[[str], int] | None = None,
                   note: dict | None = None, tolerance: float = 0.05) -> LongItem:
    """An item of about `tokens` tokens: 4 characters a token without `count_tokens`; with it, written at the
    guess, counted, and rewritten at a corrected length (same seed, so still deterministic) until within
    `tolerance`."""
    chars = int(tokens * CHARS_PER_TOKEN_GUESS)
    item = make_item(category, seed, chars, note)
    if count_tokens is None:
        return item
    for _ in range(4):
        counted = count_tokens(item.text)
        if abs(counted - tokens) <= tolerance * tokens:
            break
        chars = int(chars * tokens / max(counted, 1))
        item = make_item(category, seed, chars, note)
    return item


def make_items(category: str, n: int, seed: int, tokens: int = DEFAULT_TOKENS,
               count_tokens: Callable[[str], int] | None = None, notes: list[dict] | None = None) -> list[LongItem]:
    """`n` items of one category. Notes are drawn without repeats until all were used (`notes` is required for
    that category: the hand-written set, tests/data/handwritten_qa.json)."""
    check_category(category, bool(notes))
    chosen: list[dict | None] = [None] * n
    if category == "notes":
        order = random.Random(f"notes order {seed}").sample(notes, len(notes))  # the same for any n
        chosen = [order[i % len(order)] for i in range(n)]
    return [item_of_tokens(category, item_seed(category, seed, i), tokens, count_tokens, chosen[i])
            for i in range(n)]
