"""A request's limits and the engine's settings, checked before any model work: the settings resolved for a
tokenizer, the question cleaned, written as the documents write its words, and cut, the characters and the time a
request may take.

It runs no model and tokenizes nothing but the question; `longqa_core.plan` applies these checks to a request.
"""

from __future__ import annotations

import numbers
import re
import threading
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Union

from longqa_core.documents import Document, clean_text
from longqa_core.errors import InputError, RequestTooLongError
from longqa_core.no_answer import NO_RULE, NoAnswerRule, check_threshold, effective_rule

DEFAULT_MAX_TOTAL_TOKENS = 2_000_000
# A guided read's windows sized to the ranked passage, by default (issue 60): every loaded model's, where its windows
# are longer. docs/reading.md measures it: the same top answer as whole windows on the long-document evaluations, the
# not-found rule's verdicts the same, and the first candidate about 4x sooner with the default model on a CPU.
PASSAGE_WINDOW_TOKENS = 1024
# How many characters a request may have per token of its limit. Byte-level BPE averages about four characters a
# token on English prose and one or fewer on CJK text or combining marks; more than eight a token takes degenerate
# text (long runs of one character). So text over 8 x the token limit is refused without tokenizing it, and the
# readers stop extracting there (`max_chars_for`).
CHARS_PER_TOKEN_BOUND = 8
FIT_PROFILES_HINT = ("consumer-gpu (bitsandbytes quantization + CPU offload) or cpu; "
                     "or lower --max-seq-len")
EMPTY_QUESTION = "The question is empty: type a question about the documents."
# A question is a sentence or a few, read with every window: a longer one is refused before it is cleaned (cleaning
# and splitting take many times the text's size in memory: docs/serving.md), and text to read belongs in the
# documents.
MAX_QUESTION_CHARS = 4_000
NO_DOCUMENT = "No document given: upload a file or paste some text."

StopCheck = Union[Callable[[], bool], threading.Event]


def max_chars_for(max_total_tokens: int) -> int:
    """The characters a request may have under a token limit: where readers stop extracting, and what the engine
    refuses before tokenizing (16,000,000 for the default 2,000,000 tokens)."""
    return CHARS_PER_TOKEN_BOUND * max_total_tokens


def stop_check(should_stop: StopCheck | None) -> Callable[[], bool]:
    """`should_stop` as a plain callable (an Event's `is_set`; never stops when None)."""
    if should_stop is None:
        return lambda: False
    if isinstance(should_stop, threading.Event):
        return should_stop.is_set
    return should_stop


@dataclass(frozen=True)
class EngineSettings:
    max_seq_len: int | None = None  # None: the tokenizer's limit (4,096 for the real checkpoints)
    doc_stride: int | None = None  # overlap of consecutive windows in tokens; None: min(max_seq_len // 2, 128)
    max_question_len: int = 64
    max_answer_len: int = 15
    top_k: int = 1
    batch_size: int = 1
    adaptive_batching: bool = False  # halve the batch on out-of-memory (the dynamic batching strategy)
    no_answer: NoAnswerRule = NO_RULE  # the model's "not found" rule (the model registry's)
    no_answer_below: float | None = None  # a request's own threshold, which replaces the model's rule
    max_total_tokens: int = DEFAULT_MAX_TOTAL_TOKENS
    max_request_s: float | None = None  # refuse a request predicted to take longer (None: no limit)
    # A guided read reads each ranked window first as a window of this many tokens (question included) around its
    # best passage, and widens it to the full window only while the answer is weak (None or 0: full windows at once;
    # as many as the window or more: the window, so whole too). Loaded models default to PASSAGE_WINDOW_TOKENS.
    passage_window_tokens: int | None = None

    def resolved(self, tokenizer) -> "EngineSettings":
        """Fill in the window length and stride for this tokenizer, and check they make sense.

        Counts must be whole numbers: 3.0 (what a UI slider sends) is taken as 3, but 2.7 is an InputError rather
        than silently cut to 2.
        """
        whole = {name: whole_number(name, value) for name in _WHOLE_NUMBER_FIELDS
                 if (value := getattr(self, name)) is not None}
        if any(type(getattr(self, name)) is not int for name in whole):
            return replace(self, **whole).resolved(tokenizer)
        if self.no_answer_below is not None:
            below = check_threshold(self.no_answer_below)
            if below != self.no_answer_below:  # "0.001" from a form or an API: its number
                return replace(self, no_answer_below=below).resolved(tokenizer)
        if self.max_request_s is not None and not self.max_request_s > 0:
            raise InputError(f"max_request_s must be a positive number of seconds, got {self.max_request_s!r}.")
        limit = int(getattr(tokenizer, "model_max_length", 4096) or 4096)
        limit = min(limit, 4096) if limit > 10**8 else limit  # tokenizers without a limit report a huge number
        max_seq_len = self.max_seq_len or limit
        if max_seq_len > limit:
            raise InputError(f"max_seq_len {max_seq_len} is over this model's limit of {limit} tokens.")
        doc_stride = self.doc_stride if self.doc_stride is not None else min(max_seq_len // 2, 128)
        if self.batch_size < 1 or self.top_k < 1 or self.max_answer_len < 1:
            raise InputError("batch_size, top_k and max_answer_len must each be at least 1.")
        if self.max_question_len < 1:
            raise InputError("max_question_len must be at least 1.")
        if max_seq_len < self.max_question_len + 8:
            raise InputError(f"max_seq_len {max_seq_len} leaves no room for the document after the question.")
        if not 0 <= doc_stride < max_seq_len - self.max_question_len - 3:
            raise InputError(f"doc_stride {doc_stride} must be smaller than the room for the document in a "
                             f"{max_seq_len}-token window.")
        passage = self.passage_window_tokens
        if passage is not None and passage < 0:
            raise InputError(f"passage_window_tokens must be 0 (windows read whole) or more, got {passage}.")
        if passage == 0 or (passage is not None and passage >= max_seq_len):
            passage = None  # off, or a window sized to the whole window: the whole window
        if passage is not None and passage < self.max_question_len + 8:
            raise InputError(f"passage_window_tokens {passage} leaves no room for the document after the question "
                             f"(at least {self.max_question_len + 8}; 0 reads whole windows).")
        return replace(self, max_seq_len=max_seq_len, doc_stride=doc_stride, passage_window_tokens=passage)


_WHOLE_NUMBER_FIELDS = ("max_seq_len", "doc_stride", "max_question_len", "max_answer_len", "top_k", "batch_size",
                        "max_total_tokens", "passage_window_tokens")


def no_answer_rule(settings: EngineSettings) -> NoAnswerRule:
    """The rule a request with these settings is judged by."""
    return effective_rule(settings.no_answer, settings.no_answer_below)


def whole_number(name: str, value) -> int:
    """A count given as a number (3 or 3.0): InputError for anything else (2.7, "3", True), never truncated."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value).is_integer():
        raise InputError(f"{name} must be a whole number, got {value!r}.")
    return int(value)


class Question(str):
    """A question as `validate_request` cleaned and checked it: planning takes it as it is, without checking again."""


def validate_request(documents: list[Document], question: str) -> Question:
    """The question cleaned like document text (no control or zero-width characters, white space collapsed);
    InputError when nothing is left of it or there is no document. Once per request: a `Question` is not checked
    again."""
    if isinstance(question, Question) and documents:
        return question
    check_question_length(question)
    question = " ".join(clean_text(question or "").split())
    if not question:
        raise InputError(EMPTY_QUESTION)
    if not documents:
        raise InputError(NO_DOCUMENT)
    return Question(question)


def check_question_length(question: str | None) -> None:
    """InputError, in words, for a question longer than MAX_QUESTION_CHARS: checked before anything else reads it."""
    if question is not None and len(question) > MAX_QUESTION_CHARS:
        raise InputError(f"The question is {len(question):,} characters long; a question may have at most "
                         f"{MAX_QUESTION_CHARS:,}. Ask in a sentence or a few, and paste or upload the text to read "
                         "as a document.")


_CASED_WORD = re.compile(r"[^\W\d_]+")  # a run of letters: a word whose case a question may miss
_NAME_JOINS = (" ", "-", " & ", "'", "\u2019")  # between two words of one name: "Delacroix & Sons", "O'Gerglez"
_ABBREVIATION = re.compile(r"(?:^|\W)[A-Z][a-z]{0,2}\.$")  # "St.", "Dr.", "P.": no sentence ends there
_NOT_A_SENTENCE_START = " \t\"'\u201c\u2018(["  # skipped when looking back for the end of the sentence before
_SENTENCE_END = ".!?:;\n\r\u2026"
_SEEN_FORMS = 64  # occurrences of a word, after which its other occurrences cannot change the most frequent form


def written_as_documents(question: str, texts: list[str]) -> tuple[str, str | None]:
    """The question with the words it writes in lower case or in capitals, where the documents never write them so
    as a word, written as the documents write them inside a sentence (where a capital says "a name", not "a
    sentence starts": "kelmoor" becomes "Kelmoor", "BRIDGE" "bridge"), and the words after a name as the documents
    write them after it; a question all in capitals is read in lower case first (then starts with a capital).
    Returns the question and a notice saying how it was read, when that changed it.

    A cased model reads "kelmoor" as other tokens than the "Kelmoor" of the documents: the demo model found the
    right answer for 26 % of lower-case questions, and 88 % once they were read so (92 % as written;
    docs/demo-model.md). Words the documents do not have, words written with a first capital, and words whose case
    changes their length (Turkish "İ") stay as the question writes them.
    """
    shouted = (not any(c.islower() for c in question)
               and sum(any(c.isupper() for c in word) for word in _CASED_WORD.findall(question)) > 1)
    asked = _CASED_WORD.sub(_lowered, question) if shouted else question  # read in lower case, then as below
    cased = [m for m in _CASED_WORD.finditer(asked) if _may_be_cased(m)]
    as_written = _words_in(texts, {m.group(0) for m in cased})
    wanted = {m.group(0) for m in cased if m.group(0) not in as_written and _written_otherwise(m, texts)}
    inside, starting = _forms_in(texts, wanted)

    def form(match: re.Match) -> str:
        word = match.group(0)
        if word not in wanted or not _may_be_cased(match):
            return word
        seen = inside[word.lower()] or (starting[word.lower()] if word.isupper() else None)
        return seen.most_common(1)[0][0] if seen else word

    read = _named_on(_CASED_WORD.sub(form, asked), texts)
    first = _CASED_WORD.search(read)
    if shouted and first and first.group(0).islower():  # a sentence starts with a capital
        read = read[:first.start()] + read[first.start()].upper() + read[first.start() + 1:]
    return _told(question, read)


def _lowered(match: re.Match) -> str:
    """A word in lower case, where that keeps its length (not Turkish "İ")."""
    word = match.group(0)
    return word.lower() if len(word.lower()) == len(word) else word


def _forms_in(texts: list[str], wanted: set[str]) -> tuple[dict[str, Counter], dict[str, Counter]]:
    """How the documents write each of `wanted` (as a word, in any case): inside sentences and at their starts, by
    form; a word is no longer looked for once _SEEN_FORMS of it were seen inside sentences (one pass over each
    text, whatever the words)."""
    inside: dict[str, Counter] = {w.lower(): Counter() for w in wanted}
    starting: dict[str, Counter] = {w.lower(): Counter() for w in wanted}
    for text in texts:
        left, position = {key for key, forms in inside.items() if sum(forms.values()) < _SEEN_FORMS}, 0
        while left:
            for match in _any_word(left, re.IGNORECASE).finditer(text, position):
                word = match.group(0)
                if word.lower() not in inside:  # a form that case-folds otherwise ("ﬁ")
                    continue
                (starting if _starts_sentence(text, match.start()) else inside)[word.lower()][word] += 1
                if sum(inside[word.lower()].values()) >= _SEEN_FORMS:  # enough: on without it
                    left.discard(word.lower())
                    position = match.end()
                    break
            else:
                break
    return inside, starting


def _named_on(question: str, texts: list[str]) -> str:
    """The words after a name written as the documents write them right after it, where the question writes
    them in lower case or in capitals: "Hollingsworth cooperative" becomes "Hollingsworth Cooperative", and
    "Delacroix & sons" "Delacroix & Sons", although the documents write "cooperative" and "sons" alone too. The
    question's first word is no name by its capital."""
    words = list(_CASED_WORD.finditer(question))
    read = [w.group(0) for w in words]
    for i in range(2, len(words)):
        between = question[words[i - 1].end():words[i].start()]
        if not read[i - 1][0].isupper() or not _may_be_cased(words[i]) or between not in _NAME_JOINS:
            continue
        read[i] = next((form for form in (read[i].capitalize(), read[i].upper()) if form != read[i]
                        and any(read[i - 1] + between + form in text for text in texts)), read[i])
    forms = iter(read)
    return _CASED_WORD.sub(lambda _: next(forms), question)


def _told(question: str, read: str) -> tuple[str, str | None]:
    return (question, None) if read == question else (read, read_as_notice(read))


def read_as_notice(read: str) -> str:
    """The notice of a question `written_as_documents` changed: how the model read it."""
    return f"The question was read as “{read}”: its words written as the documents write them."


def _may_be_cased(match: re.Match) -> bool:
    """Whether a question's word may be written otherwise: all in lower case or in capitals (and so in either
    case, of one length), and of two letters or more, or an initial ("p. hollingsworth", "compound k-7",
    "o'brien"; not "a" or "I")."""
    word, after = match.group(0), match.string[match.end():match.end() + 1]
    return ((word.islower() or word.isupper()) and len(word.lower()) == len(word) == len(word.upper())
            and (len(word) > 1 or after in (".", "-", "'", "\u2019")))


def _written_otherwise(match: re.Match, texts: list[str]) -> bool:
    """Whether the documents hold a question's word in another form (lower case, a first capital, capitals), an
    initial with what follows it ("P."): one fast scan a form."""
    word = match.group(0)
    tail = match.string[match.end():match.end() + 1] if len(word) == 1 else ""
    forms = {word.lower(), word.capitalize(), word.upper()} - {word}
    return any(form + tail in text for form in forms for text in texts)


def _words_in(texts: list[str], words: set[str]) -> set[str]:
    """Those of `words` that stand in `texts` as words of their own, written exactly so: one pass over each text
    (each search finds the first of the words left, which then leaves the search)."""
    left = {word for word in words if any(word in text for text in texts)}  # one fast scan a word
    found: set[str] = set()
    for text in texts:
        position = 0
        while left - found:
            match = _any_word(left - found).search(text, position)
            if match is None:
                break
            found.add(match.group(0))
            position = match.end()
    return found


def _any_word(words: set[str], flags: int = 0) -> re.Pattern:
    """A pattern for any of `words` as a word of its own (the longest first, where one begins another)."""
    return re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")\b", flags)


def _starts_sentence(text: str, start: int) -> bool:
    """Whether the word at `start` begins a sentence, a line or the text (where its capital tells nothing)."""
    before = text[max(0, start - 16):start].rstrip(_NOT_A_SENTENCE_START)
    return not before or (before[-1] in _SENTENCE_END and not _ABBREVIATION.search(before))


def truncate_question(tokenizer, question: str, max_question_len: int) -> tuple[str, str | None]:
    """Cut the question to `max_question_len` tokens; returns the text and a notice when it was cut.

    Only the question's head is tokenized when it is far longer than that (a pasted book is not a question).
    """
    head_chars = 4 * CHARS_PER_TOKEN_BOUND * max_question_len
    head = question[:head_chars]
    encoding = tokenizer(head, add_special_tokens=False, return_offsets_mapping=True)
    if len(encoding["input_ids"]) <= max_question_len and len(head) == len(question):
        return question, None
    cut = encoding["offset_mapping"][min(max_question_len, len(encoding["input_ids"])) - 1][1]
    length = (f"{len(encoding['input_ids'])} tokens long" if len(head) == len(question)
              else f"{len(question):,} characters long")
    notice = f"The question was {length} and was cut to its first {max_question_len} tokens."
    return question[:cut], notice


def document_room(tokenizer, settings: EngineSettings, question_tokens: int) -> int:
    """Tokens of document in each window after a question of `question_tokens`; InputError when that is not more
    than the overlap (no window would move forward)."""
    room = settings.max_seq_len - question_tokens - tokenizer.num_special_tokens_to_add(pair=True)
    if room <= settings.doc_stride:
        raise InputError(f"The question leaves {room} tokens for the document in each {settings.max_seq_len}-token "
                         f"window, not more than the overlap of {settings.doc_stride}: shorten the question or "
                         f"lower doc_stride.")
    return room


def check_chars(documents: list[Document], max_total_tokens: int) -> None:
    """InputError when the documents have more characters than `max_total_tokens` can hold at any tokenization,
    refused without tokenizing."""
    n_chars = sum(len(d.text) for d in documents)
    max_chars = max_chars_for(max_total_tokens)
    if n_chars > max_chars:
        raise InputError(f"The documents have {n_chars:,} characters: over the limit of "
                         f"{max_total_tokens:,} tokens even at {CHARS_PER_TOKEN_BOUND} characters a token "
                         f"({max_chars:,} characters).")


def check_tokens(tokens: int, max_total_tokens: int) -> None:
    """InputError when the documents, tokenized, have more tokens than `max_total_tokens`."""
    if tokens > max_total_tokens:
        raise InputError(f"The documents have {tokens:,} tokens, over the limit of {max_total_tokens:,}.")


def check_predicted_time(predicted_s: float | None, settings: EngineSettings, windows: int, window_tokens: int,
                         tokens_per_s: float | None, *, after: str = "") -> None:
    """RequestTooLongError when `predicted_s` is over `settings.max_request_s` (no limit or no prediction: fine)."""
    if not passes_time_limit(predicted_s, settings.max_request_s):
        return
    raise RequestTooLongError(
        f"This request would take about {predicted_s:,.0f} s{after} ({windows:,} windows, {window_tokens:,} tokens, "
        f"at the {tokens_per_s:,.0f} tokens/s this model runs at here), over the limit of "
        f"{settings.max_request_s:g} s a request. Ask about fewer or shorter documents.",
        predicted_s=predicted_s, max_request_s=settings.max_request_s, windows=windows,
        window_tokens=window_tokens, tokens_per_s=tokens_per_s)


def passes_time_limit(predicted_s: float | None, max_request_s: float | None) -> bool:
    """Whether `predicted_s` is known and over `max_request_s` (no limit or no prediction: it does not pass it)."""
    return max_request_s is not None and predicted_s is not None and predicted_s > max_request_s
