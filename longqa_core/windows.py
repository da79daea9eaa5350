"""Windows: the model's inputs cut from the documents (question first, overlapping by the stride), with each
token's offsets into its document, and the token counts that say how many windows a text takes, counted without
offsets or estimated from a sample of its characters. Windows are cut from a document's tokens (`tokenize_document`,
a chunk at a time so that a Stop is heard between chunks; `window_cuts`, `cut_windows`): the tokenizer's own windows
over the whole text, any of them, in any order, and the tokens can be kept once for a guided read.

It tokenizes and cuts; it runs no model and checks no limit (`longqa_core.limits` and `longqa_core.plan` do).
"""

from __future__ import annotations

import itertools
import json
import unicodedata
import weakref
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import regex

from longqa_core.documents import Document
from longqa_core.errors import Cancelled
from longqa_core.limits import EngineSettings, StopCheck, document_room, stop_check

@dataclass
class Window:
    """One model input: `<s> question </s></s> context-slice </s>` with offsets into its document. Arrays, not
    lists of Python ints: a full read holds every window until it is decoded, and lists took about three times the
    memory (457 MB against 154 MB held for the 489 windows of 6 MB of prose, docs/crowd-lane.md)."""

    document_index: int
    input_ids: np.ndarray  # (L,) int32
    offsets: np.ndarray  # (L, 2) int64: each token's character span in its document
    context: np.ndarray  # (L,) bool: tokens of the document
    n_global: int  # `<s>` and the question tokens: the positions with global attention


@dataclass
class DocumentStats:
    name: str
    chars: int
    tokens: int
    windows: int



def trim_offset(text: str, start: int, end: int) -> tuple[int, int]:
    """The token's character span without surrounding white space.

    The tokenizer leaves the leading space on the first context token of an overflowing window; trimmed, the
    same token has the same span in every window and answers never start with a space.
    """
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


# Every character `str.isspace` says is white space (none lies past U+3000).
_SPACE_CODES = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)


def trimmed_offsets(text: str, offsets: np.ndarray) -> np.ndarray:
    """`trim_offset` of every (start, end) row of `offsets` at once, as an (N, 2) int64 array: from the positions
    of the characters that are not white space in the stretch they cover (a window's offsets took about 6 ms a window
    one at a time, before its first forward pass)."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    if not len(offsets):
        return offsets
    low, high = int(offsets[:, 0].min()), int(offsets[:, 1].max())
    codes = np.frombuffer(text[low:high].encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    solid = np.flatnonzero(~np.isin(codes, _SPACE_CODES)) + low  # where the characters that are not white space are
    starts, ends = offsets[:, 0], offsets[:, 1]
    if not len(solid):
        return np.stack([ends, ends], axis=1)
    first = np.searchsorted(solid, starts)  # the first such character at or after each start
    found = first < len(solid)
    found[found] = solid[first[found]] < ends[found]  # ... and before its end
    last = np.searchsorted(solid, ends) - 1  # the last one before each end
    trimmed_start = np.where(found, solid[np.minimum(first, len(solid) - 1)], ends)
    trimmed_end = np.where(found, solid[np.maximum(last, 0)] + 1, ends)
    return np.stack([trimmed_start, trimmed_end], axis=1)


def make_windows(tokenizer, question: str, documents: list[Document], settings: EngineSettings, *,
                 should_stop: StopCheck | None = None) -> tuple[list[Window], list[DocumentStats]]:
    """Windows of every document, question first, overlapping by `doc_stride` tokens (the pipeline's meaning):
    token for token what the tokenizer's own overflow gives over the whole document (tests/reference_windows.py),
    cut from the document's tokens (`tokenize_document`, a chunk at a time). Cancelled when `should_stop` says so
    between chunks or between windows: nothing runs for more than a fraction of a second without asking.

    Check the request with `plan_request` first.
    """
    settings = settings.resolved(tokenizer)
    room = document_room(tokenizer, settings, len(tokenizer(question, add_special_tokens=False)["input_ids"]))
    tokens = [tokenize_document(tokenizer, d.text, should_stop=should_stop) for d in documents]
    cuts = [cut for index, (document, doc_tokens) in enumerate(zip(documents, tokens))
            for cut in window_cuts(index, document.text, doc_tokens, room, settings.doc_stride)]
    stats = [DocumentStats(d.name, len(d.text), len(t), count_windows(len(t), room, settings.doc_stride))
             for d, t in zip(documents, tokens)]
    return cut_windows(tokenizer, question, documents, tokens, cuts, should_stop=should_stop), stats


# Counting tokens before building windows: a count needs no offsets, and it stops at the limit, so a text that
# tokenizes to about one token a character is refused after the limit's worth of tokens, not after all of them.

_COUNT_CHUNK_CHARS = 1 << 16  # tokenized at a time when counting (at most about 130,000 tokens held at once)
_CUT_SEARCH_CHARS = 1024  # how far back from a chunk's end to look for a space to cut at


class TokenCount(NamedTuple):
    tokens: int  # exact unless `hard_cuts`; over the limit asked for when `stopped`
    chars: int  # characters counted (all of them unless `stopped`)
    hard_cuts: int  # chunks cut inside a word: each may shift the count by a token or two
    stopped: bool  # counting stopped once past the limit


def count_tokens(tokenizer, text: str, limit: int | None = None, *, should_stop: StopCheck | None = None,
                 chunk_chars: int = _COUNT_CHUNK_CHARS) -> TokenCount:
    """The tokens of `text` alone (no special tokens), counted a chunk at a time without offsets; stops as soon as
    the count is surely over `limit`.

    Chunks end at a single space between two non-space characters: byte-level BPE (Longformer's) never joins
    tokens across such a space, so there the sum of the chunks' counts is the whole text's count. Only a stretch of
    `chunk_chars` characters without such a space is cut inside a word (`hard_cuts`).
    """
    backend = counting_backend(tokenizer)
    stop = stop_check(should_stop)
    tokens = hard_cuts = start = 0
    while start < len(text):
        if stop():
            raise Cancelled("The request was cancelled while its documents were being tokenized.")
        end, is_hard = _chunk_end(text, start, chunk_chars)
        hard_cuts += is_hard
        chunk = text[start:end]
        tokens += len(backend.encode_batch_fast([chunk], add_special_tokens=False)[0]) if backend is not None \
            else len(tokenizer(chunk, add_special_tokens=False)["input_ids"])
        start = end
        if limit is not None and tokens - 2 * hard_cuts > limit:
            return TokenCount(tokens, start, hard_cuts, start < len(text))
    return TokenCount(tokens, start, hard_cuts, False)


def _chunk_end(text: str, start: int, chunk_chars: int) -> tuple[int, bool]:
    """Where the chunk from `start` ends, and whether that cut is inside a word."""
    end = start + chunk_chars
    if end >= len(text):
        return len(text), False
    lowest = max(start + 1, end - _CUT_SEARCH_CHARS)
    for cut in range(end, lowest, -1):  # the chunk ends before the space, the next one starts with it
        if text[cut] == " " and _cut_kind(text, cut) == "space":
            return cut, False
    return end, True


def counting_backend(tokenizer):
    """The Rust tokenizer, made ready to encode without truncation or padding (what transformers' own call does
    first), when it can count without building offsets; None otherwise."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        return None
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    return backend




def count_windows(n_tokens: int, room: int, doc_stride: int) -> int:
    """How many windows a document of `n_tokens` takes with `room` tokens for it in each (the tokenizer's
    overflow: each window starts `room - doc_stride` tokens after the one before)."""
    if n_tokens <= room:
        return 1
    return 1 + -(-(n_tokens - room) // (room - doc_stride))


# Characters per token are measured on a few samples of each document instead of tokenizing it whole: the 2M-token
# document a full read tokenizes in about 14 s is cut and ranked on its characters, and only what is read is
# tokenized for the model.
_SAMPLE_CHARS = 4_000
_SAMPLES = 5


def chars_per_token(tokenizer, text: str) -> float:
    """Characters per token of `text`, measured on a few evenly spread samples (all of a short text)."""
    if len(text) <= _SAMPLES * _SAMPLE_CHARS:
        samples = [text]
    else:
        step = (len(text) - _SAMPLE_CHARS) // (_SAMPLES - 1)
        samples = [text[i * step: i * step + _SAMPLE_CHARS] for i in range(_SAMPLES)]
    backend = counting_backend(tokenizer)
    counts = [len(backend.encode_batch_fast([t], add_special_tokens=False)[0]) if backend is not None
              else len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in samples]
    return max(1.0, sum(len(t) for t in samples) / max(1, sum(counts)))



# The full read's windows, cut from a document's tokens kept once: a guided read reads exactly the windows the
# full read would (the same boundaries, the same tokens, the same logits), any of them and in any order, so a read
# that goes on to the whole document reads only the windows it has not read yet.

@dataclass
class DocumentTokens:
    """One document's tokens with their character offsets (as the tokenizer gives them, untrimmed), in numpy:
    about 12 bytes a token, where Python lists of the same take over 100."""

    ids: np.ndarray  # (N,) int32
    offsets: np.ndarray  # (N, 2) int32: each token's [start, end) in the document's text
    lone_space: int | None = None  # `lone_space_id` of the tokenizer

    def __len__(self) -> int:
        return len(self.ids)

    def context_offsets(self, text: str, first: int, end: int) -> np.ndarray:
        """The offsets of tokens [first, end) as a window starting at `first` has them (`make_windows`): (N, 2)."""
        offsets = trimmed_offsets(text, self.offsets[first:end])
        if len(offsets) and first > 0 and self.ids[first] == self.lone_space:  # first in this window's encoding
            start = offsets[0, 0] - 1
            offsets[0] = (start, start)
        return offsets


@dataclass(frozen=True)
class WindowCut:
    """Where the full read cuts one window: its document, its context tokens [first_token, end_token) and the
    stretch of text they cover (trimmed, as `window_span` reports it)."""

    document_index: int
    first_token: int
    end_token: int
    start_char: int
    end_char: int


_ENCODE_GROUP_CHARS = 1 << 17  # characters encoded in one call (two chunks, which the Rust tokenizer spreads over
# the cores); Stop is asked between calls, about every 0.1 s of one core for prose here. Fewer chunks a call were no
# slower (docs/results/tokenizing.json: 6 MB of prose, 1.97 CPU seconds two a call, 2.33 sixteen a call)
_LONE_SPACE = "\u0120"  # byte-level BPE's token for a space alone ("Ġ")


def lone_space_id(tokenizer) -> int | None:
    """The id of a lone space token whose offsets depend on where its encoding starts, else None.

    A byte-level post-processor that trims offsets and adds a prefix space (Roberta's, Longformer's) keeps the first
    token's single leading space: a lone space first in its encoding (each overflowing window's first context token)
    gets the empty span before that space, anywhere else the empty span after it. Every other token's offsets,
    once trimmed of white space (`trim_offset`), are the same wherever its encoding starts.
    """
    if tokenizer not in _LONE_SPACE_IDS:  # reading it serialises the whole tokenizer: 10 ms for the demo model's
        _LONE_SPACE_IDS[tokenizer] = _find_lone_space_id(tokenizer)  # tokenizer, more for a 50k vocabulary
    return _LONE_SPACE_IDS[tokenizer]


_LONE_SPACE_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> its lone_space_id


def _find_lone_space_id(tokenizer) -> int | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    processors = [json.loads(backend.to_str()).get("post_processor") or {}]
    while processors and processors[0].get("type") == "Sequence":
        processors = processors[0].get("processors", [])
    if not any(p.get("trim_offsets") and p.get("add_prefix_space") for p in processors):
        return None
    return backend.token_to_id(_LONE_SPACE)


# Where a long text is cut into chunks that encode to exactly the whole text's tokens. Byte-level BPE (Longformer's)
# first splits text with its regex (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`)
# and merges bytes only within each piece, so a cut where two pieces meet, and where the regex run from the cut
# finds the same pieces, changes nothing:
# - before a single space between two non-space characters (" word" is one piece, and starts the next chunk);
# - between two characters of different classes (letter, digit, other: a punctuation mark, symbol or mark), neither
#   of them an apostrophe (the contractions span one) nor white space. A tokenizer that adds a prefix space would add
#   one before the next chunk's first character: that chunk is encoded from an earlier cut of either kind, a few
#   characters back, and the tokens before the cut are dropped (the regex, run from that earlier cut, meets the
#   whole text's pieces again by the end of its first class run, before the cut).
# A run of one class longer than a chunk (a million "x", emoji without spaces) holds no cut: its chunk reaches the
# run's end, and that run is encoded in one call.
_CANDIDATE = regex.compile(r"(?<=\S)(?= \S)|(?<=\p{L})(?=[^\p{L}\s])|(?<=\p{N})(?=[^\p{N}\s])"
                           r"|(?<=[^\p{L}\p{N}\s])(?=[\p{L}\p{N}])")  # a superset of the cuts, checked by `_cut_kind`


class _Chunk(NamedTuple):
    encode_from: int  # where its encoding starts: `start`, or an earlier cut whose tokens are dropped
    start: int
    end: int


def _char_class(char: str) -> str | None:
    """The regex's class of a character ("L", "N", or "O" for other), None where a cut never goes: white space,
    controls, format and unassigned characters, and the apostrophe."""
    if char == "'":
        return None
    kind = unicodedata.category(char)[0]
    return kind if kind in "LN" else "O" if kind in "MPS" else None


def _cut_kind(text: str, cut: int) -> str | None:
    """"space" (a single space between non-space characters, starting the next chunk), "class" (between two
    characters of different classes), or None where a chunk may not end."""
    if 0 < cut < len(text) - 1 and text[cut] == " " and not text[cut - 1].isspace() and not text[cut + 1].isspace():
        return "space"
    if 0 < cut < len(text):
        before, after = _char_class(text[cut - 1]), _char_class(text[cut])
        if before is not None and after is not None and before != after:
            return "class"
    return None


def _cuts(text: str, start: int, end: int, in_runs: bool):
    """The cuts in [start, end) in order, as (position, kind): spaces only unless `in_runs`."""
    for match in _CANDIDATE.finditer(text, start, min(len(text), end + 1)):
        cut = match.start()
        if cut >= end:
            return
        kind = _cut_kind(text, cut)
        if kind == "space" or (kind == "class" and in_runs):
            yield cut, kind


def _next_chunk(text: str, start: int, chunk_chars: int, in_runs: bool, prefix_space: bool) -> tuple[int, int]:
    """Where the chunk from `start` ends, and where the next chunk's encoding starts: the last space cut in the
    chunk's last `_CUT_SEARCH_CHARS`, else its last class cut there, else the first cut after it, else the end."""
    target = start + chunk_chars
    if target >= len(text):
        return len(text), len(text)
    lowest = max(start + 1, target - _CUT_SEARCH_CHARS)
    for cut in range(target, lowest - 1, -1):  # prose has a space within a few characters: no regex needed
        if text[cut] == " " and _cut_kind(text, cut) == "space":
            return cut, cut
    usable = _usable(list(_cuts(text, lowest, target + 1, in_runs)), prefix_space)
    if usable:
        return usable[-1]
    previous = None
    for cut, kind in _cuts(text, _run_end(text, target + 1), len(text), in_runs):
        if kind == "space" or not prefix_space:
            return cut, cut
        if previous is not None:
            return cut, previous
        previous = cut
    return len(text), len(text)


_NOT_IN_CLASS = {"L": regex.compile(r"[^\p{L}]"), "N": regex.compile(r"[^\p{N}]"),
                 "O": regex.compile(r"[\p{L}\p{N}\s']")}  # where a run of one class ends (a fast scan)


def _run_end(text: str, position: int) -> int:
    """The end of the run of one class around `position` (no cut lies inside it), else `position`."""
    kind = _char_class(text[position - 1]) if 0 < position <= len(text) else None
    if kind is None:
        return position
    found = _NOT_IN_CLASS[kind].search(text, position)
    return found.start() if found is not None else len(text)


def _usable(found: list[tuple[int, str]], prefix_space: bool) -> list[tuple[int, int]]:
    """(cut, where the next encoding starts) for the cuts in `found`: the cut itself, or with a prefix space the
    cut before it."""
    if not prefix_space:
        return [(cut, cut) for cut, _ in found]
    return [(cut, before) for (before, _), (cut, _) in zip(found, found[1:])]


def plan_chunks(tokenizer, text: str, chunk_chars: int = _COUNT_CHUNK_CHARS):
    """`text` cut into chunks of about `chunk_chars` that encode, each on its own, to the whole text's tokens: a
    generator, so that a caller can stop between chunks of a text whose cuts take long to find."""
    in_runs, prefix_space = _byte_level(tokenizer)
    start = encode_from = 0
    while start < len(text):
        end, next_from = _next_chunk(text, start, chunk_chars, in_runs, prefix_space)
        yield _Chunk(encode_from, start, end)
        start, encode_from = end, next_from


def _byte_level(tokenizer) -> tuple[bool, bool]:
    """(whether chunks may be cut inside runs without spaces, whether the pre-tokenizer adds a prefix space): runs
    are cut only for a byte-level pre-tokenizer that splits on its regex, with no normalizer before it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pre = getattr(backend, "pre_tokenizer", None)
    if backend is None or type(pre).__name__ != "ByteLevel" or backend.normalizer is not None:
        return False, True
    return bool(pre.use_regex), bool(pre.add_prefix_space)


def tokenize_document(tokenizer, text: str, *, should_stop: StopCheck | None = None,
                      chunk_chars: int = _COUNT_CHUNK_CHARS, limit: int | None = None) -> DocumentTokens:
    """The tokens of `text` alone (no special tokens), with offsets: the same tokens as the text encoded whole,
    encoded a chunk at a time (`plan_chunks`), a few chunks a call, and Cancelled when `should_stop` says so
    between calls. Past `limit` tokens it stops at the end of that call: the tokens so far, more than `limit`."""
    backend = counting_backend(tokenizer)
    stop = stop_check(should_stop)
    lone_space = lone_space_id(tokenizer)
    ids: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    for group in _groups(plan_chunks(tokenizer, text, chunk_chars), _ENCODE_GROUP_CHARS):
        if stop():
            raise Cancelled("The request was cancelled while its documents were being tokenized.")
        pieces = [text[c.encode_from:c.end] for c in group]
        if backend is not None:
            encoded = [(e.ids, e.offsets) for e in backend.encode_batch(pieces, add_special_tokens=False)]
        else:
            batch = tokenizer(pieces, add_special_tokens=False, return_offsets_mapping=True)
            encoded = list(zip(batch["input_ids"], batch["offset_mapping"]))
        for chunk, (chunk_ids, chunk_offsets) in zip(group, encoded):
            chunk_ids = np.asarray(chunk_ids, dtype=np.int32)  # (n,)
            chunk_offsets = np.fromiter(itertools.chain.from_iterable(chunk_offsets), dtype=np.int32,
                                        count=2 * len(chunk_offsets)).reshape(-1, 2) + chunk.encode_from  # (n, 2)
            if chunk.encode_from < chunk.start:  # the tokens before the cut are the chunk before's
                first = int(np.searchsorted(chunk_offsets[:, 0], chunk.start, side="left"))
                chunk_ids, chunk_offsets = chunk_ids[first:], chunk_offsets[first:]
            elif chunk.start > 0 and len(chunk_ids) and chunk_ids[0] == lone_space:  # first in its chunk only
                chunk_offsets[0] = chunk_offsets[0, 0] + 1
            ids.append(chunk_ids)
            offsets.append(chunk_offsets)
        if limit is not None and sum(len(part) for part in ids) > limit:
            break
    if not ids:
        return DocumentTokens(np.zeros(0, dtype=np.int32), np.zeros((0, 2), dtype=np.int32), lone_space)
    return DocumentTokens(np.concatenate(ids), np.concatenate(offsets), lone_space)


def _groups(chunks: list[_Chunk], group_chars: int):
    """`chunks` in consecutive groups of about `group_chars` characters (a chunk longer than that alone)."""
    group: list[_Chunk] = []
    chars = 0
    for chunk in chunks:
        if group and chars + chunk.end - chunk.encode_from > group_chars:
            yield group
            group, chars = [], 0
        group.append(chunk)
        chars += chunk.end - chunk.encode_from
    if group:
        yield group


def window_cuts(document_index: int, text: str, tokens: DocumentTokens, room: int, doc_stride: int) -> list[WindowCut]:
    """The full read's windows of one document (`make_windows`, the tokenizer's overflow): `room` context tokens
    each, each starting `room - doc_stride` tokens after the one before."""
    n = len(tokens)
    cuts = []
    for k in range(count_windows(n, room, doc_stride)):
        first = k * (room - doc_stride)
        end = min(n, first + room)
        if end > first:
            start_char = int(tokens.context_offsets(text, first, first + 1)[0, 0])
            end_char = trim_offset(text, *map(int, tokens.offsets[end - 1]))[1]
        else:
            start_char = end_char = 0
        cuts.append(WindowCut(document_index, first, end, start_char, end_char))
    return cuts


def narrowed_cut(cut: WindowCut, text: str, tokens: DocumentTokens, centre_char: int, room: int) -> WindowCut:
    """The part of `cut` that holds `room` of its context tokens centred on the token at `centre_char` (kept inside
    the cut), for reading a ranked passage in a window sized to it; the cut itself where it holds no more."""
    if cut.end_token - cut.first_token <= room:
        return cut
    centre = int(np.searchsorted(tokens.offsets[:, 0], centre_char, side="right")) - 1  # the token holding it
    first = min(max(centre - room // 2, cut.first_token), cut.end_token - room)
    end = first + room
    start_char = int(tokens.context_offsets(text, first, first + 1)[0, 0])
    end_char = trim_offset(text, *map(int, tokens.offsets[end - 1]))[1]
    return WindowCut(cut.document_index, first, end, start_char, end_char)


@dataclass(frozen=True)
class QuestionFrame:
    """What a window holds around its context, from the tokenizer's own pair encoding: `<s> question </s></s>`
    before it and `</s>` after it, with their offsets, and how many leading tokens get global attention."""

    head_ids: list[int]
    head_offsets: list[tuple[int, int]]
    tail_ids: list[int]
    tail_offsets: list[tuple[int, int]]
    n_global: int


def question_frame(tokenizer, question: str) -> QuestionFrame:
    encoded = tokenizer(question, "x", return_offsets_mapping=True)
    sequence_ids = encoded.sequence_ids(0)
    context = [i for i, s in enumerate(sequence_ids) if s == 1]
    first, last = context[0], context[-1] + 1
    ids, offsets = encoded["input_ids"], [tuple(o) for o in encoded["offset_mapping"]]
    return QuestionFrame(ids[:first], offsets[:first], ids[last:], offsets[last:], sequence_ids.index(None, 1))


def cut_windows(tokenizer, question: str, documents: list[Document], tokens: list[DocumentTokens],
                cuts: list[WindowCut], *, should_stop: StopCheck | None = None) -> list[Window]:
    """The windows at `cuts`, token for token what the tokenizer's own overflow gives for them; Cancelled when
    `should_stop` says so between windows (cutting one takes about 0.5 ms with the demo model; 6 MB of prose has
    about 500)."""
    frame = question_frame(tokenizer, question)
    head_offsets = np.asarray(frame.head_offsets, dtype=np.int64).reshape(-1, 2)
    tail_offsets = np.asarray(frame.tail_offsets, dtype=np.int64).reshape(-1, 2)
    stop = stop_check(should_stop)
    windows = []
    for cut in cuts:
        if stop():
            raise Cancelled("The request was cancelled while its windows were being built.")
        text, doc_tokens = documents[cut.document_index].text, tokens[cut.document_index]
        context_ids = doc_tokens.ids[cut.first_token: cut.end_token].tolist()
        context_offsets = doc_tokens.context_offsets(text, cut.first_token, cut.end_token)
        head = len(frame.head_ids)
        context = np.zeros(head + len(context_ids) + len(frame.tail_ids), dtype=bool)  # (L,)
        context[head: head + len(context_ids)] = True
        input_ids = np.asarray(frame.head_ids + context_ids + frame.tail_ids, dtype=np.int32)  # (L,)
        offsets = np.concatenate([head_offsets, context_offsets, tail_offsets])  # (L, 2)
        windows.append(Window(cut.document_index, input_ids, offsets, context, frame.n_global))
    return windows


def window_span(window: Window) -> dict:
    """The stretch of its document a window read: from its first context token's start to its last one's end."""
    spans = [window.offsets[i] for i in np.flatnonzero(window.context)]
    start, end = (spans[0][0], spans[-1][1]) if spans else (0, 0)
    return {"document_index": window.document_index, "start_char": int(start), "end_char": int(end)}
