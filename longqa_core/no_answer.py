"""Whether the documents hold the answer: the "not found" rules, and an answer's confidence in words.

A rule is data (which test, which threshold, where the threshold was measured, whether the answer's sentence must
name what the question asks about, the one question form a model answers); the registry of models says which rule
each model has, and the engine applies it to the best answer, the windows' null scores and the documents' text
(`Evidence`). It does not decide how much to read, and it never formats numbers for people.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from longqa_core.errors import InputError
from longqa_core.ranker import content_words

NULL_SCORE = "null-score"  # SQuAD 2.0 checkpoints: the best span must beat the lowest "<s>" score of the windows read
THRESHOLD = "threshold"  # a best-span score measured on held-out data, under which nothing is found
UNCALIBRATED = "uncalibrated"  # no rule: `found` is None and nothing is claimed
KINDS = (NULL_SCORE, THRESHOLD, UNCALIBRATED)
HIGH_CONFIDENCE = 0.5  # a span at least this likely is "high"; between the rule's threshold and this, "medium"
CONFIDENCE_WORDS = ("low", "medium", "high")  # in order
FAR_UNDER = 0.1  # a best score under this share of the rule's bar makes "not found" "high" confidence
EVALUATION = "docs/no-answer.md"  # where the measured rules' numbers are written up


@dataclass(frozen=True)
class QuestionForm:
    """The one shape of question a model answers (the demo model's "What is the <attribute> of <name>?"): `form`
    with its slots in angle brackets, and the notice a question of another shape gets."""

    form: str
    notice: str

    def fits(self, question: str) -> bool:
        """Whether `question` has this form (case, white space and the question mark free)."""
        return _form_pattern(self.form).fullmatch(question.strip()) is not None


def _form_pattern(form: str) -> re.Pattern:
    """`form` as a pattern: each <slot> a group of one or more words, spaces any white space."""
    pieces = re.split(r"(<\w+>)", form.strip().rstrip("?"))
    body = "".join(r"(\S.*?)" if re.fullmatch(r"<\w+>", p) else r"\s+".join(map(re.escape, p.split(" ")))
                   for p in pieces)
    return re.compile(body + r"\s*\??", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class NoAnswerRule:
    """How a model's answers are judged. `threshold` is a best-span score (p_start × p_end, summed over identical
    answers) in (0, 1); `source` says where it was measured, or that the user gave it. With `needs_evidence`, an
    answer is found only where its neighbourhood names every word of the question that the document uses
    (`Evidence`): for a model whose score cannot tell the asked entity's fact from another entity's. With
    `question_form`, a question of another shape is never "Found" (the rule was measured on that form only)."""

    kind: str
    threshold: float | None = None
    source: str = ""
    needs_evidence: bool = False
    question_form: QuestionForm | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown no-answer rule {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.kind == THRESHOLD:
            check_threshold(self.threshold)


NO_RULE = NoAnswerRule(UNCALIBRATED, source="not calibrated for this model")  # what a model outside the registry has


def check_threshold(value) -> float:
    """`value` (a number or a numeric string) as a score threshold strictly between 0 and 1, or InputError saying
    so."""
    try:
        threshold = float(value)
    except (TypeError, ValueError):
        raise InputError(f"The no-answer threshold must be a number between 0 and 1 (exclusive), not {value!r}.")
    if not 0.0 < threshold < 1.0:
        raise InputError(f"The no-answer threshold must be between 0 and 1 (exclusive), not {value!r}.")
    return threshold


def user_rule(threshold) -> NoAnswerRule:
    """The rule a user opts in to with `--no-answer-below SCORE` (or the page's and the API's field)."""
    return NoAnswerRule(THRESHOLD, check_threshold(threshold), "given by the user")


def effective_rule(model_rule: NoAnswerRule, below: float | None) -> NoAnswerRule:
    """The rule a request is judged by: the user's threshold when given (`below`), else the model's. The model's
    question form stays: a threshold does not teach it other questions."""
    if below is None:
        return model_rule
    return replace(user_rule(below), question_form=model_rule.question_form)


# The answer's neighbourhood: its own sentence, and while the first sentence taken speaks of someone by a pronoun, the
# one before it too, up to PRONOUN_SENTENCES more ("The laptop is a Vantage 14. It was bought in March. Its serial
# number is VT14-88231."). Sentences end at . ! ? before white space, and at line breaks; not after an initial
# ("P. Albrecht") or a title ("St. Olave's"). docs/no-answer.md measures the choice: taking the sentence before as
# well kept one more right answer of 74 and let six more unanswerable questions of 242 through.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n")
_ABBREVIATION = re.compile(r"(?:\b[A-Za-z]|\b(?:St|Dr|Mr|Mrs|Ms|Mt|Prof|Rev|Capt|Col|Gen|Lt|Sgt|Fr|Jr|Sr|No|Nos|"
                           r"vs|etc|approx|Inc|Ltd|Co))\.$")
_PRONOUN = re.compile(r"\b(?:it|its|he|him|his|she|her|they|them|their)\b", re.IGNORECASE)
EVIDENCE_SENTENCES_BEFORE = 0
PRONOUN_SENTENCES = 3
_REACH_CHARS = 4_000  # no sentence is looked for further than this from the answer
_WORD = re.compile(r"(?u)\b\w\w+\b")  # the ranker's words: two or more letters or digits


def answer_neighbourhood(text: str, start: int, end: int, sentences_before: int | None = None) -> str:
    """The sentence holding text[start:end], the `sentences_before` sentences before it (default
    EVIDENCE_SENTENCES_BEFORE) and those its pronouns reach back to, the answer itself left out (a value that shares a
    word with the question is no evidence)."""
    sentences_before = EVIDENCE_SENTENCES_BEFORE if sentences_before is None else sentences_before
    reach = max(0, start - _REACH_CHARS)
    starts = [reach] + [m.end() for m in _SENTENCE_BREAK.finditer(text, reach, start) if _ends_sentence(text, m)]
    first = max(0, len(starts) - 1 - sentences_before)  # index in `starts` of the first sentence taken
    for _ in range(PRONOUN_SENTENCES):
        if first == 0 or not _PRONOUN.search(text, starts[first], starts[first + 1] if first + 1 < len(starts)
                                             else start):
            break
        first -= 1
    after = next((m for m in _SENTENCE_BREAK.finditer(text, end, end + _REACH_CHARS) if _ends_sentence(text, m)),
                 None)
    return text[starts[first]:start] + " " + text[end:after.start() if after else min(len(text), end + _REACH_CHARS)]


def _ends_sentence(text: str, brk: re.Match) -> bool:
    """Whether a break `_SENTENCE_BREAK` found ends a sentence: a line break does, a full stop after an initial or
    a title does not."""
    return "\n" in brk.group() or not _ABBREVIATION.search(text, max(0, brk.start() - 8), brk.start())


# "What is the <attribute> of <name>?" in any model's question: the attribute's last word names what is asked ("stock
# ticker": a ticker). Other questions name it by their words not written as names (capitalised past the first word,
# or with a digit): "How many Kestrel barometers were sold in 1978?" asks about barometers sold.
_ATTRIBUTE_OF = re.compile(r"\s*(?:what|which)\s+(?:is|was|are|were)\s+the\s+(.+?)\s+of\s+\S.*", re.IGNORECASE | re.DOTALL)
# Nouns that name only the kind of a value: texts give dates, names and numbers without the noun ("It opens on 14
# August"), so they ask for nothing ("opening date" asks for "opening", "name" for nothing).
VALUE_NOUNS = frozenset({"name", "date", "day", "year", "time", "number", "amount", "value", "figure", "total"})
# Words that give an attribute's value without its noun ("It is 1,034 metres high."): any of them will do.
ATTRIBUTE_KIN = {"height": ("high", "tall"), "length": ("long",), "width": ("wide",), "depth": ("deep",),
                 "weight": ("heavy", "weigh"), "age": ("old", "aged"), "birthplace": ("born", "birth"),
                 "birthday": ("born", "birth"), "birthdate": ("born", "birth"), "owner": ("own",)}


def names_attribute(question: str) -> bool:
    """Whether `question` reads "What is the <attribute> of <name>?" (any model's question: it names the attribute)."""
    return _ATTRIBUTE_OF.fullmatch(question.strip().rstrip("?")) is not None


def attribute_words(question: str) -> list[str]:
    """The question's words that name the asked attribute, as the question writes them: for "What is the
    <attribute> of <name>?" the attribute's last content word that is not a VALUE_NOUN (none when every word is
    one); else every content word not written as a name. The attribute counts as absent from the documents when
    none of them, nor their kin (ATTRIBUTE_KIN), starts a word there (`Evidence.absent`)."""
    form = _ATTRIBUTE_OF.fullmatch(question.strip().rstrip("?"))
    if form:
        words = [w for w in _WORD.findall(form.group(1)) if content_words(w) and w.lower() not in VALUE_NOUNS]
        return words[-1:]
    words = _WORD.findall(question)
    return [w for i, w in enumerate(words) if content_words(w) and not any(c.isdigit() for c in w)
            and not (i > 0 and w[0].isupper())]


@dataclass
class Evidence:
    """Whether the documents and an answer's neighbourhood name what the question asks about. Near the answer
    (`missing`): every content word (stemmed) of the question that its document uses must be in the answer's
    sentence (with the sentences its pronouns point back to, `answer_neighbourhood`); words the document never uses
    (a paraphrase's, general knowledge's) ask for nothing there. Anywhere (`absent`): the words that name the asked
    attribute (`attribute_words`) must occur in some document, or nothing can answer it. Built once per request;
    which words a document uses is looked up once, when first needed."""

    question: str
    texts: list[str]
    _asked: dict[str, str] | None = field(default=None, init=False, repr=False)  # stem -> the question's word
    _attribute: dict[str, str] | None = field(default=None, init=False, repr=False)  # the same, of the attribute
    _used: dict[int, set[str]] = field(default_factory=dict, init=False, repr=False)
    _lowered: dict[int, str] = field(default_factory=dict, init=False, repr=False)
    _missing: dict[tuple[int, int, int], list[str]] = field(default_factory=dict, init=False, repr=False)

    def asked(self) -> dict[str, str]:
        """The question's stems and the words it writes them as: found at the first answer checked (a request whose
        rule needs no evidence never splits its question)."""
        if self._asked is None:
            self._asked = {}
            for word in _WORD.findall(self.question):
                for stem in content_words(word):
                    self._asked.setdefault(stem, word)
        return self._asked

    def attribute(self) -> dict[str, str]:
        """The stems of the asked attribute's words (`attribute_words`) and the words the question writes them as,
        found at the first check that needs them."""
        if self._attribute is None:
            self._attribute = {}
            for word in attribute_words(self.question):
                for stem in content_words(word):
                    self._attribute.setdefault(stem, word)
        return self._attribute

    def absent(self) -> list[str]:
        """The attribute's words (as the question writes them) when no document uses any of them or their kin
        (ATTRIBUTE_KIN), else none. A document word counts when its stem starts with the word's ("owns" is used by
        "owner", "sings" by "singer"): a paraphrase names the attribute with another ending more often than not."""
        attribute = self.attribute()
        if not attribute:
            return []
        wanted = dict(attribute)  # stem -> a word that has it
        for word in attribute.values():
            wanted.update((stem, kin) for kin in ATTRIBUTE_KIN.get(word.lower(), ()) for stem in content_words(kin))
        if any(self._starts_word(i, stem, word) for i in range(len(self.texts)) for stem, word in wanted.items()):
            return []
        return sorted(set(attribute.values()))

    def _starts_word(self, index: int, stem: str, word: str) -> bool:
        """Whether some word of document `index` has a stem that starts with `stem` (`word`: a word with that stem,
        whose letters shared with it are looked for)."""
        if index not in self._lowered:
            self._lowered[index] = self.texts[index].lower()
        prefix = os.path.commonprefix([stem, word.lower()])
        tried = set()
        for match in re.finditer(r"\b" + re.escape(prefix) + r"\w*", self._lowered[index]):
            if match.group() not in tried:
                tried.add(match.group())
                if any(found.startswith(stem) for found in content_words(match.group())):
                    return True
        return False

    def _document_words(self, index: int) -> set[str]:
        """The question's stems that document `index` uses somewhere: each looked for by the letters it shares with
        the question's word, the first word found with that stem ends the search (no tokenizing the whole text)."""
        if index not in self._used:
            self._used[index] = {stem for stem, word in self.asked().items() if self._uses(index, stem, word)}
        return self._used[index]

    def _uses(self, index: int, stem: str, word: str) -> bool:
        if index not in self._lowered:
            self._lowered[index] = self.texts[index].lower()
        text = self._lowered[index]
        # the letters the stem shares with the question's word, less one: a stem may end in a letter its other
        # words do not have ("countri": "countries", "country")
        shared = len(os.path.commonprefix([stem, word.lower()]))
        prefix = word.lower()[:max(min(shared, 2), shared - 1)]
        tried = set()  # each distinct word is stemmed once
        at = text.find(prefix)
        while at >= 0:
            whole = _WORD.match(text, at) if at == 0 or not text[at - 1].isalnum() else None
            if whole and whole.group() not in tried:
                if stem in content_words(whole.group()):
                    return True
                tried.add(whole.group())
            at = text.find(prefix, at + 1)
        return False

    def missing(self, document_index: int, start: int, end: int) -> list[str]:
        """The question's words (as the question writes them) that the document uses but that are not near the
        answer at text[start:end]; every place the answer's text occurs is tried, and the best one counts. Asked
        once per span: a guided round's best answer is often the request's."""
        span = (document_index, start, end)
        if span not in self._missing:
            self._missing[span] = self._find_missing(document_index, start, end)
        return list(self._missing[span])

    def _find_missing(self, document_index: int, start: int, end: int) -> list[str]:
        wanted = self._document_words(document_index)
        if not wanted:
            return []
        text = self.texts[document_index]
        places = [(start, end)] + [(m.start(), m.end()) for m in
                                   re.finditer(re.escape(text[start:end]), text, re.IGNORECASE)][:50]
        best = None
        for at, to in places:
            lacking = wanted - content_words(answer_neighbourhood(text, at, to))
            if best is None or len(lacking) < len(best):
                best = lacking
            if not best:
                break
        return sorted(self.asked()[stem] for stem in best)


def is_found(rule: NoAnswerRule, best_score: float | None, min_null_score: float | None,
             missing: list[str] | None = None, absent: list[str] | None = None, fits_form: bool = True,
             names_attribute: bool = True) -> bool | None:
    """True when the best answer passes `rule`, False when it does not (or there is no answer), None when the rule
    claims nothing. `missing` is what `Evidence.missing` says of the best answer (a rule that needs evidence finds
    nothing while it names a word). `absent` is what `Evidence.absent` says: where the question names its attribute
    ("What is the <attribute> of <name>?", `names_attribute`) and no document uses it, nothing is found; where the
    words come from a question of another shape (a paraphrase's verbs, as often as not), what would be found is None.
    `fits_form`: whether the question has the rule's question form; where it does not, what would be found is None
    (the rule was measured on its form), and "not found" stays."""
    if rule.kind == UNCALIBRATED:
        return None
    if best_score is None or (absent and names_attribute):
        return False
    found = not (rule.needs_evidence and missing) and _passes_bar(rule, best_score, min_null_score)
    return None if found and (absent or not fits_form) else found


def _passes_bar(rule: NoAnswerRule, score: float, min_null_score: float | None) -> bool:
    """Whether `score` clears the rule's bar: its threshold, the lowest null score, or 0.01 without a rule."""
    if rule.kind == THRESHOLD:
        return score >= rule.threshold
    if rule.kind == NULL_SCORE:
        return min_null_score is None or score > min_null_score
    return score >= 0.01


def confidence(rule: NoAnswerRule, score: float, min_null_score: float | None = None,
               missing: list[str] | None = None) -> str:
    """"high", "medium" or "low" for one answer's score. Under the rule's bar (the threshold, or the lowest null
    score of the windows read) "low"; from the bar up to HIGH_CONFIDENCE "medium"; above both "high". Without a
    rule, the same words from the span's probability alone (bar 0.01), which the readout marks as not calibrated.
    Under a rule that needs evidence, an answer whose neighbourhood lacks a word of the question (`missing`) is
    "low"."""
    if rule.needs_evidence and missing:
        return "low"
    if not _passes_bar(rule, score, min_null_score):
        return "low"
    return "high" if score >= HIGH_CONFIDENCE else "medium"


EVIDENCE_POOL = 5  # under a rule that needs evidence, how many of the best answers are looked at for one that has it


def answer_pool(rule: NoAnswerRule, top_k: int) -> int:
    """How many of the best candidates a request decodes to give its `top_k` answers: under a rule that needs
    evidence, at least EVIDENCE_POOL (`evidenced_first` picks among them), else `top_k`."""
    return max(top_k, EVIDENCE_POOL) if rule.needs_evidence else top_k


def evidenced_first(rule: NoAnswerRule, answers: list, evidence: Evidence | None,
                    min_null_score: float | None = None) -> tuple[list, list[list[str]], int]:
    """`answers` (in score order, each with `score`, `document_index`, `start_char`, `end_char`), the question's words
    each one's neighbourhood lacks (`Evidence.missing`; none asked where the rule needs no evidence), and how many
    come first as answers that pass. Under a rule that needs evidence, an answer passes when its neighbourhood names
    every word of the question; a lower one of the best EVIDENCE_POOL also must clear the rule's bar and stay inside
    its sentence ("False. The default value of the timeout flag is 30 seconds" holds more than a value). Those that
    pass come first, each group in score order: the model's best span in a sentence about another attribute or
    entity ("The favourite dish of X is ..." for "What is the headquarters of X?") gives way to a lower one in the
    sentence that states what was asked, and where none passes the best span is judged as it stands. Among those
    that pass, one cut inside a written word ("90337" of "GGJ90337": the tokenizer splits letters from digits, so
    the model may start between them) gives way to one that passes, covers it and is whole (`cut_in_word`)."""
    if not rule.needs_evidence or evidence is None:
        return list(answers), [[] for _ in answers], len(answers)
    texts = evidence.texts
    lacking = [evidence.missing(a.document_index, a.start_char, a.end_char) for a in answers]
    passes = [not lacking[i] and (i == 0 or (i < EVIDENCE_POOL and _passes_bar(rule, a.score, min_null_score) and
                                             within_sentence(texts[a.document_index], a.start_char, a.end_char)))
              for i, a in enumerate(answers)]
    cut = [passes[i] and cut_in_word(texts[a.document_index], a.start_char, a.end_char)
           for i, a in enumerate(answers)]
    yields = [cut[i] and any(passes[j] and not cut[j] and _covers(answers[j], a) for j in range(len(answers)))
              for i, a in enumerate(answers)]
    # stable: score order within each group; passing and whole, passing but cut where a whole one covers it, the rest
    order = sorted(range(len(answers)), key=lambda i: 2 if not passes[i] else int(yields[i]))
    return [answers[i] for i in order], [lacking[i] for i in order], sum(passes)


def cut_in_word(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] starts or ends between two letters or digits of one written word."""
    return (0 < start < len(text) and text[start - 1].isalnum() and text[start].isalnum()) or \
        (0 < end < len(text) and text[end - 1].isalnum() and text[end].isalnum())


def _covers(outer, inner) -> bool:
    same_place = (outer.start_char, outer.end_char) == (inner.start_char, inner.end_char)
    return (outer.document_index == inner.document_index and not same_place and
            outer.start_char <= inner.start_char and inner.end_char <= outer.end_char)


def within_sentence(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] ends no sentence before its last character (a full stop after an initial does
    not)."""
    return not any(_ends_sentence(text, brk) for brk in _SENTENCE_BREAK.finditer(text, start, end)
                   if brk.end() < end)


def in_score_order(words: list[str], scores: list[float]) -> list[str]:
    """Confidence words made monotone in the score: no answer is more confident than one that scores higher
    (an answer whose sentence lacks a word of the question is "low", and so is every answer scoring under it;
    answers that score the same keep their own words)."""
    rank = [CONFIDENCE_WORDS.index(word) for word in words]
    return [CONFIDENCE_WORDS[min([rank[i]] + [rank[j] for j in range(len(words)) if scores[j] > scores[i]])]
            for i in range(len(words))]


# What the readouts say, written once.
NOT_FOUND = "Not found in the documents"
NOT_FOUND_IN_PART = "Not found in the part read"
NOT_CALIBRATED = "confidence not calibrated for this model"
OUTSIDE_FORM = "outside the question form this model answers"


def _quoted(words: list[str]) -> str:
    return ", ".join(f"'{word}'" for word in words)


@dataclass
class Verdict:
    """Whether the documents hold the answer, by which rule, and over what: `read_whole` is False when a time budget
    ended a guided read before every window was read, so "not found" covers only the part read. For people:
    `message` (the verdict alone, the JSON's "verdict"), `explanation` (one short sentence with a confidence word,
    for visitors) and `details` (the rule and its numbers, for a "how this is decided" disclosure linking to
    `evaluation`)."""

    found: bool | None
    rule: NoAnswerRule
    null_score: float | None  # the lowest "<s>" score of the windows read (SQuAD 2.0 checkpoints compare with it)
    read_whole: bool
    missing: list[str] = field(default_factory=list)  # the question's words the best answer's sentence lacks
    absent: list[str] = field(default_factory=list)  # the asked attribute's words, where no document uses them
    outside_form: bool = False  # the question does not have the rule's question form
    best_score: float | None = None

    @property
    def message(self) -> str:
        """The verdict in words: "Found", a not-found message, or that nothing is claimed."""
        if self.found is None:
            return f"No verdict: {OUTSIDE_FORM if self.outside_form else NOT_CALIBRATED}"
        if self.found:
            return "Found"
        return NOT_FOUND if self.read_whole or self.absent else NOT_FOUND_IN_PART  # absence is the whole text's

    @property
    def confidence(self) -> str | None:
        """How sure the verdict is, in a word: a found answer's own confidence; "not found" is "low" outside the
        question form, "high" where the model found no span, the asked attribute is absent from the documents or the
        best score is far under the bar (FAR_UNDER), "medium" where the best answer's sentence lacks a word or its
        score is near the bar; no verdict is "low" outside the form or with the attribute absent, else None.
        docs/no-answer.md measures how often each word is right."""
        if self.found is None:
            return "low" if self.outside_form or self.absent else None
        if self.found:
            return confidence(self.rule, self.best_score, self.null_score)
        if self.best_score is None:
            return "high"
        if self.outside_form:
            return "low"
        if self.absent:
            return "high"
        if self.rule.needs_evidence and self.missing:
            return "medium"
        bar = self.rule.threshold if self.rule.kind == THRESHOLD else self.null_score
        return "high" if bar and self.best_score < FAR_UNDER * bar else "medium"

    @property
    def explanation(self) -> str:
        """The verdict for visitors: one short sentence with its confidence word."""
        sure = f"{self.confidence} confidence"
        form = (f"this model answers questions of the form \u201c{self.rule.question_form.form}\u201d, and this one "
                "is not") if self.outside_form else ""
        if self.found is None:
            if form or self.absent:
                return f"A guess ({sure}): {form or f'no document mentions {_quoted(self.absent)}'}."
            return f"No verdict: this model's {NOT_CALIBRATED}."
        if self.found:
            return f"Found ({sure})."
        return f"{self.message} ({sure}): {self.reason}."

    @property
    def reason(self) -> str:
        """Why the documents do not hold the answer, in a few words (meant for a not-found verdict)."""
        if self.best_score is None:
            return "the model found no answer span"
        if self.outside_form:
            return (f"this model answers questions of the form \u201c{self.rule.question_form.form}\u201d, and this one "
                    "is not")
        if self.absent:
            return f"no document mentions {_quoted(self.absent)}"
        if self.rule.needs_evidence and self.missing:
            return f"no likely answer sits beside {_quoted(self.missing)}"
        return "no passage answers the question clearly enough"

    @property
    def details(self) -> str:
        """How this verdict was decided, with the rule's numbers (a developer's words)."""
        return f"{self.basis[0].upper()}{self.basis[1:]}."

    @property
    def evaluation(self) -> str | None:
        """Where the rule was measured (EVALUATION), for a rule measured in this project."""
        return EVALUATION if self.rule.source.startswith(EVALUATION) else None

    @property
    def basis(self) -> str:
        """The rule that gave the verdict, in words."""
        rule = self.rule
        if self.absent:
            return f"no document uses {_quoted(self.absent)}, the words naming what the question asks for"
        if rule.needs_evidence and self.missing:
            return (f"the best span's sentence does not name {_quoted(self.missing)}, which the question asks about "
                    f"({rule.source})")
        if self.outside_form and self.found is None:
            return (f"the question is not of the form '{rule.question_form.form}', the only one this model's rule "
                    f"was measured on ({rule.source})")
        if rule.kind == THRESHOLD:
            named = " and its sentence names what the question asks about" if rule.needs_evidence and self.found \
                else ""
            return f"best score {'at or above' if self.found else 'under'} {rule.threshold:g}{named} ({rule.source})"
        if rule.kind == NULL_SCORE:
            return "the best span against the lowest null score of the windows read (a SQuAD 2.0 checkpoint)"
        return "no rule for this model; a not-found threshold opts in"

    @property
    def notices(self) -> list[str]:
        """What the result's notices add: the question form, where the question does not have it."""
        return [self.rule.question_form.notice] if self.outside_form else []

    def to_json(self) -> dict:
        return {"verdict": self.message, "rule": self.rule.kind, "threshold": self.rule.threshold,
                "source": self.rule.source, "null_score": self.null_score, "read_whole": self.read_whole,
                "needs_evidence": self.rule.needs_evidence, "missing_words": list(self.missing),
                "absent_words": list(self.absent), "outside_form": self.outside_form,
                "question_form": self.rule.question_form.form if self.rule.question_form else None,
                "confidence": self.confidence, "explanation": self.explanation, "details": self.details,
                "evaluation": self.evaluation}


def judge(rule: NoAnswerRule, best_score: float | None, null_score: float | None, read_whole: bool,
          missing: list[str] | None = None, absent: list[str] | None = None, question: str | None = None) -> Verdict:
    """The verdict on a request's best answer under `rule` (`missing`, `absent`: what `Evidence` says of it and of
    the documents; `question`: checked against the rule's question form, where it has one)."""
    outside = rule.question_form is not None and question is not None and not rule.question_form.fits(question)
    named = question is None or names_attribute(question)
    return Verdict(is_found(rule, best_score, null_score, missing, absent, not outside, named), rule, null_score,
                   read_whole, list(missing or []), list(absent or []), outside, best_score)
