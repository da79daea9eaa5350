"""An evaluation-only generator of the demo task's facts, independent of the training generator.

Same sentence and question templates as `training.demo_task` ("The {attribute} of {entity} is {value}.", "What is
the {attribute} of {entity}?"), but nothing else in common: its own hand-written prose in ten registers, its own
names (several shapes), attributes and values. It is never used for training; tests/test_eval_task.py checks that it
shares no vocabulary with the training generator (`training/data/nouns.txt`, demo_task's word and syllable lists).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from longqa.demo_model.fact import Fact

# --- names -----------------------------------------------------------------------------------------------------
# Made-up words from syllables the training generator does not have; every one ends in a consonant the training
# syllables can never end a word with (g, p, b, z, f, or ck, ng, ff, dd, or k/t/d right after a vowel).
_ONSETS = ["bl", "gl", "pl", "cl", "sk", "sp", "sn", "wr", "ph", "kn", "gw", "y", "tw", "scr", "dw", "h", "b", "d",
           "g", "k", "m", "n", "p", "t", "v", "w"]
_NUCLEI = ["oo", "ee", "au", "oa", "ie", "ue", "oi", "a", "e", "i", "o", "u"]
_MEDIALS = ["l", "r", "n", "m", "s", "v", "w", "nd", "rr", "ll"]
_FINALS = ["g", "p", "b", "z", "f", "ck", "ng", "ff", "dd", "k", "t", "d", "gg", "mp", "lf"]

_GIVEN = ["Orla", "Tobias", "Marguerite", "Ansel", "Ines", "Kofi", "Yusuf", "Ravi", "Mei", "Soren", "Agnieszka",
          "Dolores", "Leopold", "Imogen", "Casimir", "Noor", "Thaddeus", "Wilhelmina", "Ezra", "Beatrix", "Matteo",
          "Rosalind", "Cormac", "Priya", "Halvard", "Ottilie", "Ignatius", "Lucinda", "Benedikt", "Ysolde"]
_SURNAMES = ["Pemberton", "Okonkwo", "Haverford", "Lindqvist", "Castellanos", "Tamsworth", "Abernathy", "Fairweather",
             "Delacroix", "Nakamura", "Oyelaran", "Vasquez", "Whitlock", "Brannigan", "Quartermaine", "Szymanski",
             "Achterberg", "Montgomery", "Featherstone", "Kowalczyk", "Rutherford", "Esterhazy", "Hollingsworth",
             "Mbeki", "Ravenscroft", "Gundersen", "Albrecht", "Thistlewood", "Carmichael", "Ferreira"]
_PLACE_WORDS = ["Ford", "Haven", "Crossing", "Wharf", "Priory", "Heath", "Moor", "Fen", "Combe", "Hollow", "Thorpe",
                "Wick", "Holm", "Marsh", "Downs", "Falls", "Quay", "Spur", "Saltings", "Reach"]
_BIRDS = ["Heron", "Kestrel", "Wren", "Lark", "Plover", "Curlew", "Osprey", "Lapwing", "Merlin", "Petrel"]
_NUMBERED = ["Hangar", "Kiosk", "Wharf", "Quay", "Berth"]
_COMPANY_WORDS = ["Holdings", "Brothers", "& Sons", "Bridgeworks", "Cooperative", "Syndicate", "Partners"]

# --- attributes, each with the kinds of value it takes ------------------------------------------------------------
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "motto": ("title", "phrase"),
    "mascot": ("phrase", "madeup"),
    "nickname": ("title", "madeup"),
    "birthplace": ("place",),
    "headquarters": ("place",),
    "callsign": ("code",),
    "founder": ("person",),
    "curator": ("person",),
    "postcode": ("code",),
    "tonnage": ("amount",),
    "wingspan": ("amount",),
    "homeland": ("place",),
    "patron": ("person",),
    "skipper": ("person",),
    "treasurer": ("person",),
    "hometown": ("place",),
    "birthday": ("date",),
    "surname": ("madeup", "title"),
    "namesake": ("person",),
    "landlord": ("person",),
    "warden": ("person",),
    "dialect": ("madeup", "phrase"),
    "delicacy": ("phrase",),
    "alias": ("title", "madeup"),
    "hallmark": ("code", "phrase"),
    "barcode": ("code", "plain"),
    "serial": ("code", "plain"),
    "tagline": ("phrase", "title"),
    "berth": ("code", "plain"),
    "draught": ("amount",),
    "payload": ("amount",),
    "opening day": ("date",),
    "closing day": ("date",),
    "feast day": ("date",),
    "patron saint": ("person",),
    "mother tongue": ("madeup",),
    "favourite dish": ("phrase",),
    "lead singer": ("person",),
    "eldest son": ("person",),
    "call sign": ("code",),
    "blood type": ("code",),
    "founding date": ("year", "date"),
    "launch date": ("date", "year"),
    "head count": ("separated", "plain"),
    "footfall": ("separated",),
    "cruising pace": ("amount",),
    "toll": ("amount",),
}

# --- values ----------------------------------------------------------------------------------------------------
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_UNITS = ["metres", "kilometres", "tonnes", "kilograms", "knots", "feet", "miles", "litres", "grams", "fathoms"]
_CURRENCIES = ["£", "€", "$"]
_COLOURS = ["red", "grey", "green", "amber", "violet", "scarlet", "pale blue", "rust-brown", "white", "black"]
_CREATURES = ["fox", "hare", "badger", "otter", "stag", "owl", "heron", "pike", "moth", "salmon"]
_COUNTED = ["two", "three", "four", "seven", "nine", "twelve"]
_PLURALS = ["brass keys", "oak doors", "copper bells", "wooden spoons", "stone lions", "paper lanterns"]
_DISHES = ["salted barley soup", "smoked eel pie", "plum dumplings", "fried sprats", "nettle broth",
           "honey oat cake", "pickled herring", "lentil stew with mint"]
_TITLE_WORDS = ["Tide", "Bright", "Morning", "Evening", "Harbour", "Light", "Long", "Road", "Home", "Old", "North",
                "Wind", "Silent", "Green", "Hills", "Onward", "Faithful", "Waters", "Lantern", "Salt"]
_TITLES = ["Hail the Tide", "Bright Morning Light", "Ever Onward", "Faithful Waters", "The Long Road Home",
           "Silent North Wind", "Green Hills Evermore", "Steady as the Rock", "By Lantern and Oar",
           "Onward Through the Salt"]


def made_up_word(rng: random.Random, syllables: int | None = None) -> str:
    """A lowercase made-up word that the training generator's syllables can never spell (two or three syllables:
    one-syllable ones are too often real English words, such as "knot")."""
    count = syllables or rng.choice([2, 2, 2, 3])
    parts = []
    for index in range(count):
        parts.append(rng.choice(_ONSETS) + rng.choice(_NUCLEI))
        parts.append(rng.choice(_FINALS) if index == count - 1 else rng.choice(_MEDIALS))
    return "".join(parts)


def made_up_name(rng: random.Random) -> str:
    return made_up_word(rng).capitalize()


# Entity shapes: (weight, builder). Real-world-like names of 1 to 4 words with hyphens, apostrophes, initials,
# digits and articles, and made-up names.
def _person(rng):
    return f"{rng.choice(_GIVEN)} {rng.choice(_SURNAMES)}"


def _initials(rng):
    letters = rng.sample("ABCDEFGHJKLMNPRSTW", rng.choice([1, 2]))
    return " ".join(f"{letter}." for letter in letters) + f" {rng.choice(_SURNAMES)}"


def _saint_place(rng):
    return f"St. {made_up_name(rng)}"


def _apostrophe_place(rng):
    return f"O'{made_up_name(rng)} {rng.choice(_PLACE_WORDS)}"


def _hyphen_place(rng):
    return f"{made_up_name(rng)}-{rng.choice([made_up_name(rng), rng.choice(_SURNAMES)])}"


def _numbered(rng):
    return f"{rng.choice(_NUMBERED)} {rng.randint(2, 99)}{rng.choice(['', '', 'B', 'C'])}"


def _ship(rng):
    return rng.choice([f"the {rng.choice(_GIVEN)} {rng.choice(_SURNAMES)}", f"the {rng.choice(_GIVEN)}",
                       f"the Grey {rng.choice(_BIRDS)}", f"the {made_up_name(rng)} {rng.choice(_BIRDS)}"])


def _company(rng):
    owner = rng.choice([rng.choice(_SURNAMES), f"{rng.choice(_GIVEN)} {rng.choice(_SURNAMES)}"])
    return f"{owner} {rng.choice(_COMPANY_WORDS)}"


def _product(rng):
    return f"{made_up_name(rng)} {rng.choice([str(rng.randint(2, 9) * 100), 'XL', str(rng.randint(2, 12))])}"


def _made_up_place(rng):
    words = [made_up_name(rng) for _ in range(rng.choice([1, 1, 2]))]
    if rng.random() < 0.4:
        words.append(rng.choice(_PLACE_WORDS))
    return " ".join(words)


ENTITY_SHAPES = [(3, _made_up_place), (2, _person), (1, _initials), (1, _saint_place), (1, _apostrophe_place),
                 (1, _hyphen_place), (1, _numbered), (2, _ship), (1, _company), (1, _product)]


def make_entity(rng: random.Random) -> str:
    weights, builders = zip(*ENTITY_SHAPES)
    return rng.choices(builders, weights=weights)[0](rng)


def make_value(rng: random.Random, kind: str) -> str:
    if kind == "plain":
        return str(rng.randint(1, 9999))
    if kind == "separated":
        return f"{rng.randint(1_000, 9_999_999):,}"
    if kind == "year":
        return str(rng.randint(1066, 2024))
    if kind == "date":
        day, month, year = rng.randint(1, 28), rng.choice(_MONTHS), rng.randint(1700, 2024)
        return rng.choice([f"{day} {month} {year}", f"{month} {day}, {year}", f"{day} {month}"])
    if kind == "amount":
        number = rng.choice([f"{rng.randint(1_000, 99_999):,}", str(rng.randint(2, 999)),
                             f"{rng.randint(1, 99)}.{rng.randint(1, 9)}"])
        if rng.random() < 0.2:
            return f"{rng.choice(_CURRENCIES)}{number}"
        return f"{number} {rng.choice(_UNITS)}"
    if kind == "code":
        letters = "".join(rng.choice("ABCDEFGHJKLMNPRSTVWXYZ") for _ in range(rng.choice([1, 2, 3])))
        digits = str(rng.randint(10, 99999))
        return rng.choice([f"{letters}-{digits}", f"{letters}{digits}", f"{letters}/{digits}-{rng.choice('ABCD')}",
                           f"{letters} {digits}", f"{digits}-{letters}"])
    if kind == "person":
        return rng.choice([_person, _initials])(rng)
    if kind == "place":
        return rng.choice([_made_up_place, _saint_place, _apostrophe_place, _hyphen_place])(rng)
    if kind == "title":
        return rng.choice(_TITLES) if rng.random() < 0.5 else " ".join(rng.sample(_TITLE_WORDS, rng.choice([2, 3])))
    if kind == "phrase":
        return rng.choice([f"a {rng.choice(_COLOURS)} {rng.choice(_CREATURES)}",
                           f"{rng.choice(_COUNTED)} {rng.choice(_PLURALS)}", rng.choice(_DISHES)])
    if kind == "madeup":
        word = made_up_word(rng)
        return word.capitalize() if rng.random() < 0.5 else word
    raise ValueError(f"unknown value kind {kind!r}")


# --- prose: ten registers of hand-written sentence templates --------------------------------------------------------
_SLOTS = {
    "who": ["my aunt", "the ferry captain", "a tall stranger", "our neighbour", "the night porter", "Dr. Albrecht",
            "the youngest apprentice", "an old fisherman", "the choir mistress", "my cousin Ezra"],
    "where": ["the harbour steps", "the covered market", "the north road", "the chapel yard", "the signal box",
              "the boathouse", "the dye works", "the lower meadow", "the tram depot", "the weir"],
    "object": ["a lantern", "the ledger", "a bolt of cloth", "the brass scales", "a crate of apples", "the spare oars",
               "a tin of biscuits", "the parish register", "a coil of rope", "the weather glass"],
    "weekday": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "month": _MONTHS,
    "adj": ["damp", "bright", "quiet", "crowded", "windy", "muddy", "golden", "chilly", "hazy", "restless"],
    "num": ["two", "three", "five", "eight", "eleven", "forty", "a dozen", "several", "a handful of", "twenty"],
    "food": ["bread", "oysters", "stew", "pears", "cheese", "kippers", "porridge", "rye cakes", "plums", "cider"],
    "animal": ["gulls", "ponies", "geese", "hares", "crows", "goats", "swallows", "otters", "sheep", "cats"],
    "act": ["repaired", "painted", "counted", "measured", "sold", "inspected", "weighed", "cleaned", "moved",
            "labelled"],
}

REGISTERS: dict[str, list[str]] = {
    "diary": [
        "We left {where} before breakfast and walked until the rain stopped.",
        "On {weekday} I bought {food} from a stall near {where} and ate it on the wall.",
        "The wind was {adj} all afternoon, so we stayed in and played cards.",
        "I wrote three letters tonight and posted none of them.",
        "{who} showed us {object} and told a long story about it.",
        "By evening the sky over {where} had turned the colour of weak tea.",
        "I slept badly; the {animal} on the roof made a racket until dawn.",
        "Tomorrow, if the weather holds, we mean to take the early boat.",
    ],
    "news": [
        "Officials confirmed on {weekday} that work at {where} will continue into {month}.",
        "Residents gathered outside {where} to protest the proposed closure.",
        "A spokesperson said {num} volunteers had signed up within hours.",
        "Police were called after {object} went missing from {where} overnight.",
        "The council will meet again in {month} to review the figures.",
        "Local traders described the mood as {adj} but hopeful.",
        "Organisers expect the event to draw larger crowds than last year.",
        "No injuries were reported, and the road reopened shortly after noon.",
    ],
    "recipe": [
        "Warm the pan over a low flame and add a knob of butter.",
        "Stir in the {food} and season well with salt and pepper.",
        "Leave the mixture to rest for {num} minutes before slicing.",
        "If the dough feels sticky, dust your hands with a little flour.",
        "Serve at once, with {food} on the side.",
        "Chop the onions finely; large pieces will not soften in time.",
        "Cover the dish and bake until the top is {adj} and crisp.",
        "Any leftovers keep for two days in a cool larder.",
    ],
    "minutes": [
        "The chair opened the meeting at half past seven and welcomed {num} members.",
        "Apologies were received from {who}.",
        "The minutes of the previous meeting were approved without amendment.",
        "It was agreed that {object} should be {act} before the next inspection.",
        "A motion to move the summer fair to {where} was carried by a show of hands.",
        "Members raised concerns about the {adj} state of {where}.",
        "Any other business: {who} asked that the notice board be tidied.",
        "The meeting closed at nine, and the next one was set for the first {weekday} of {month}.",
    ],
    "letter": [
        "Dear friend, I hope this finds you well and out of the rain.",
        "Thank you for the parcel; {object} arrived safe and only slightly dented.",
        "Mother sends her love and asks whether you still keep {animal}.",
        "The garden has gone wild since {month}, and I have rather given up on it.",
        "Do write soon and tell me all your news.",
        "I think of our walks along {where} more often than I say.",
        "With warm wishes, and apologies for my terrible handwriting.",
        "Please give my regards to {who} when you next see them.",
    ],
    "field_notes": [
        "Counted {num} {animal} along {where} between six and seven.",
        "Ground {adj} after last night's frost; tracks clear in the mud.",
        "A pair of {animal} nesting under the bridge, same spot as last spring.",
        "Water level low; the stepping stones at {where} fully exposed.",
        "Heard a curlew calling to the east but could not see it.",
        "Visibility poor by noon, so the afternoon transect was abandoned.",
        "Noted fresh droppings near {where}, probably from {animal}.",
        "Temperature dropped sharply after sunset.",
    ],
    "legal": [
        "The tenant shall keep {where} in good and substantial repair.",
        "Nothing in this clause shall oblige either party to act unlawfully.",
        "Any notice under this agreement must be given in writing.",
        "The licensee may not assign or sublet without prior written consent.",
        "Where a dispute arises, the parties shall first attempt to resolve it by negotiation.",
        "This agreement is governed by the laws in force on the date of signature.",
        "Charges are payable quarterly in advance on the usual quarter days.",
        "Failure to enforce any term shall not be taken as a waiver of it.",
    ],
    "story": [
        "Once upon a time, a miller's daughter found {object} at the bottom of the well.",
        "The fox laughed and ran off into the {adj} wood.",
        "Three times the stranger knocked, and three times nobody answered.",
        "At midnight the {animal} began to sing, one after another.",
        "She set out along {where} with nothing but bread and a borrowed coat.",
        "The old king had {num} sons and not one of them could whistle.",
        "And so they lived quietly, and mostly happily, for many years.",
        "Nobody in the village believed her, except the blacksmith's boy.",
    ],
    "maintenance": [
        "Replaced the worn gasket on pump two and tested it under load.",
        "The generator at {where} was {act} and returned to service on {weekday}.",
        "Found a hairline crack in the housing; ordered a spare from the depot.",
        "Lubricated all hinges on {object} and checked the seals.",
        "Fault did not recur during a four-hour soak test.",
        "Filters were {act}; next change due in {month}.",
        "Pressure readings stayed within tolerance throughout the shift.",
        "Left a note for {who} about the noisy bearing.",
    ],
    "dialogue": [
        "\"Are you coming or not?\" asked {who}.",
        "\"Not today,\" she said, \"the tide is all wrong.\"",
        "\"Did anyone see where I put {object}?\"",
        "He shrugged. \"Ask at {where}; they keep everything.\"",
        "\"It was {adj} out there,\" said the boy, stamping his boots.",
        "\"Two more minutes,\" called the cook, \"and not a second longer.\"",
        "\"Well, I never,\" muttered {who}, and went back to work.",
        "\"If it rains again on {weekday}, we give up.\"",
    ],
}

# Sentences shaped like facts that are not the asked one (the template with things that are not entities), and
# sentences that name an entity and an attribute without giving a value.
_FACTLIKE = [
    "The default setting of the old boiler is low.",
    "The colour of the chapel door is {colour}.",
    "The key to the boathouse is under the third stone.",
    "The price of a return ticket is {price}.",
    "The height of the tide gauge is {height}.",
    "The rule of thumb is simple: never sail on an empty stomach.",
    "The best time to visit is early {month}.",
    "The first stop of the tram is {where}.",
    "The trouble with {where} is the wind.",
]
_MENTIONS = [
    "Nobody in {entity} remembers who chose the {attribute}.",
    "Questions about the {attribute} of {entity} came up again at the meeting.",
    "A visitor asked about the {attribute}, but the guide at {entity} changed the subject.",
    "Records of the {attribute} of {entity} were lost in the flood of {year}.",
    "{entity} has argued about its {attribute} for years.",
]


@dataclass
class EvalDocument:
    """A document with one asked-about fact; `answer_start` is the value's character offset in `text`."""

    text: str
    question: str
    answer: str
    answer_start: int
    placement: str  # "first", "last" or "inside": where the fact sentence was put
    facts: list[Fact] = field(default_factory=list)

    @property
    def answer_end(self) -> int:
        return self.answer_start + len(self.answer)


_SLOT_RE = re.compile(r"\{(\w+)\}")


class EvalWriter:
    """Draws facts, distractors and prose from one seeded random generator."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def fill(self, template: str, **given: str) -> str:
        def choose(match: re.Match) -> str:
            slot = match.group(1)
            if slot in given:
                return given[slot]
            if slot == "colour":
                return self.rng.choice(_COLOURS)
            if slot == "price":
                return f"{self.rng.choice(_CURRENCIES)}{self.rng.randint(2, 90)}.{self.rng.randint(10, 99)}"
            if slot == "height":
                return f"{self.rng.randint(2, 40)} {self.rng.choice(['metres', 'feet'])}"
            if slot == "year":
                return make_value(self.rng, "year")
            return self.rng.choice(_SLOTS[slot])

        sentence = _SLOT_RE.sub(choose, template)
        return sentence[0].upper() + sentence[1:]

    def prose_sentence(self, registers: list[str]) -> str:
        return self.fill(self.rng.choice(REGISTERS[self.rng.choice(registers)]))

    def target(self) -> Fact:
        attribute = self.rng.choice(sorted(ATTRIBUTES))
        return Fact(attribute, make_entity(self.rng), make_value(self.rng, self.rng.choice(ATTRIBUTES[attribute])))

    def distractors(self, target: Fact, same_attribute: int, same_entity: int, factlike: int,
                    mentions: int) -> list[str]:
        """Sentences near the asked fact: other entities' values for the same attribute (same shape of value), the
        same entity's other attributes, sentences shaped like facts, and mentions without a value."""
        kinds = ATTRIBUTES[target.attribute]
        facts = [Fact(target.attribute, make_entity(self.rng), make_value(self.rng, self.rng.choice(kinds)))
                 for _ in range(same_attribute)]
        others = [a for a in sorted(ATTRIBUTES) if a != target.attribute]
        for _ in range(same_entity):
            attribute = self.rng.choice(others)
            facts.append(Fact(attribute, target.entity,
                                  make_value(self.rng, self.rng.choice(ATTRIBUTES[attribute]))))
        sentences = [f.sentence for f in facts if f.value != target.value]
        sentences += [self.fill(self.rng.choice(_FACTLIKE)) for _ in range(factlike)]
        sentences += [self.fill(self.rng.choice(_MENTIONS), entity=target.entity, attribute=target.attribute)
                      for _ in range(mentions)]
        return sentences

    def document(self, n_words: int, target: Fact, distractors: list[str], placement: str | None = None,
                 registers: list[str] | None = None) -> EvalDocument:
        """About `n_words` words of prose in paragraphs, with the distractors and the fact sentence placed in it."""
        registers = registers or self.rng.sample(sorted(REGISTERS), self.rng.choice([1, 2, 3]))
        placement = placement or self.rng.choices(["first", "last", "inside"], weights=[1, 1, 4])[0]
        fixed_words = sum(len(s.split()) for s in distractors) + len(target.sentence.split())
        sentences: list[str] = []
        words = fixed_words
        while words < n_words:
            sentences.append(self.prose_sentence(registers))
            words += len(sentences[-1].split())
        for sentence in distractors:
            sentences.insert(self.rng.randint(0, len(sentences)), sentence)
        if placement == "first":
            sentences.insert(0, target.sentence)
        elif placement == "last":
            sentences.append(target.sentence)
        else:
            sentences.insert(self.rng.randint(1, max(1, len(sentences) - 1)), target.sentence)
        text = self._paragraphs(sentences)
        answer_start = text.index(target.sentence) + len(target.sentence) - len(target.value) - 1
        return EvalDocument(text, target.question, target.value, answer_start, placement, [target])

    def _paragraphs(self, sentences: list[str]) -> str:
        paragraphs, current = [], []
        for sentence in sentences:
            current.append(sentence)
            if len(current) >= self.rng.randint(3, 9):
                paragraphs.append(" ".join(current))
                current = []
        if current:
            paragraphs.append(" ".join(current))
        return "\n\n".join(paragraphs)


NOTE_WORDS = (20, 100)  # short notes: the fact among a handful of sentences


def make_document(seed: int, n_words: int, placement: str | None = None) -> EvalDocument:
    """One evaluation document of about `n_words` words (at least the fact and its distractors)."""
    writer = EvalWriter(seed)
    target = writer.target()
    rng = writer.rng
    short = n_words <= NOTE_WORDS[1]
    counts = (rng.randint(0, 1), rng.randint(0, 1), rng.randint(0, 1), rng.randint(0, 1)) if short else \
        (rng.randint(1, 4), rng.randint(1, 3), rng.randint(1, 4), rng.randint(0, 2))
    return writer.document(n_words, target, writer.distractors(target, *counts), placement)


def make_note(seed: int) -> EvalDocument:
    """A short note of 20 to 100 words."""
    rng = random.Random(seed)
    return make_document(seed, rng.randint(NOTE_WORDS[0] + 10, NOTE_WORDS[1] - 15))


DOCUMENT_TOKENS = (300, 40_000)  # the evaluation's long documents, in the model's tokens


def document_of_tokens(seed: int, target_tokens: int, count_tokens, bounds: tuple[int, int] = DOCUMENT_TOKENS,
                       words_per_token: float = 0.5) -> EvalDocument:
    """A document of about `target_tokens` tokens as `count_tokens(text)` counts them, never outside `bounds`:
    written at a guessed length, counted, and rewritten at a corrected length until it fits."""
    lo, hi = bounds
    target_tokens = min(max(target_tokens, lo), hi)
    n_words = max(1, int(target_tokens * words_per_token))
    for _ in range(8):
        document = make_document(seed, n_words)
        tokens = count_tokens(document.text)
        if lo <= tokens <= hi and abs(tokens - target_tokens) <= 0.25 * target_tokens:
            return document
        n_words = max(1, int(n_words * target_tokens / max(tokens, 1)))
    raise RuntimeError(f"no document of about {target_tokens} tokens for seed {seed} (last had {tokens})")
