"""The broad fact-finding task the bundled demo model trains on (issue 15): names, attributes, values and prose of
many more shapes than the classic task of `demo_task`, facts placed anywhere and distractors often right next to them.

Generates documents, questions and answers from a seed, as `demo_task` does, on top of its `FactWriter`. None of its
lists shares a word with the evaluation-only generator, `eval_task` (tests/test_eval_task.py checks), apart from month
names and shape markers ("St."). Not a model, no tokenization.
"""

from __future__ import annotations

import random
import re

from training.demo_task import Example, FactWriter, load_nouns, make_entity, make_word
from longqa.demo_model.fact import Fact

# A second syllable inventory: open syllables, as in many languages' names ("Kamiro", "Tesunan").
_OPEN_ONSETS = ["k", "s", "t", "n", "h", "m", "y", "r", "w", "g", "z", "d", "b", "p", "sh", "ch", "ts", ""]
_OPEN_VOWELS = ["a", "i", "u", "e", "o"]
_OPEN_CODAS = ["", "", "", "n"]

_GIVEN_NAMES = ["Alice", "Bernard", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Isla", "Jonas", "Katya",
                "Luca", "Maya", "Nils", "Olga", "Pablo", "Rosa", "Stefan", "Tara", "Viktor", "Wanda", "Xavier", "Yara",
                "Zora", "Amos", "Bettina", "Cyril", "Delphine", "Emeka", "Fiona", "Gideon", "Harriet", "Ivo",
                "Juniper", "Kwame", "Lorna", "Magnus", "Nadia", "Oskar", "Petra"]
_FAMILY_NAMES = ["Ashby", "Blackwood", "Calloway", "Dunmore", "Everett", "Fitzgerald", "Grantham", "Holloway",
                 "Ingram", "Jessop", "Kingsley", "Lockhart", "Marchetti", "Novak", "Oduya", "Pritchard", "Quill",
                 "Romanov", "Sato", "Tremaine", "Underhill", "Vance", "Winslow", "Yilmaz", "Zielinski", "Bauer",
                 "Chen", "Duarte", "Eriksen", "Forsyth"]
_PLACE_SUFFIXES = ["Mills", "Cross", "End", "Common", "Bay", "Point", "Hythe", "Magna", "Vale", "Hill", "Field",
                   "Bridge", "Gate", "Cove", "Ness", "Heights", "Well", "Stow", "Leigh", "Burn"]
_ORG_SUFFIXES = ["Trust", "Society", "& Co.", "Foundation", "Guild", "Ltd", "Institute", "Works", "Group",
                 "Associates"]
_NUMBERED_PLACES = ["Unit", "Block", "Gate", "Lot", "Pier", "Dock", "Stand", "Ward", "Terminal", "Level"]
_VESSEL_WORDS = ["Bold", "Swift", "Venture", "Endeavour", "Resolve", "Arrow", "Comet", "Victory", "Nomad", "Pilgrim"]
_PRODUCT_SUFFIXES = ["Mk II", "Pro", "Plus", "Mini", "Max", "One"]
_ATTRIBUTE_MODIFIERS = ["home", "main", "chief", "official", "original", "current", "annual", "average", "maximum",
                        "registered", "primary", "summer", "winter", "night", "local", "former", "national"]
_TRAIN_COLOURS = ["yellow", "purple", "maroon", "orange", "pink", "teal", "ochre", "indigo", "lilac", "beige"]
_TRAIN_CREATURES = ["dog", "beetle", "toad", "crab", "sparrow", "trout", "lizard", "snail", "beaver", "goose"]
_TRAIN_NUMBERS = ["five", "six", "eight", "ten", "eleven", "a dozen"]
_TRAIN_PLURALS = ["tin cups", "glass jars", "iron nails", "clay pots", "silk ribbons", "rubber boots"]
_TRAIN_DISHES = ["roast lamb with rosemary", "cheese scones", "fish chowder", "apple crumble", "mushroom risotto",
                 "spiced rice", "baked beans on toast", "lemon tart"]
_TRAIN_TITLES = ["Rise Up Together", "Land of Valleys", "Our Shining Crown", "Mountains Eternal",
                 "Glory to the Fields", "Children of the Plain", "March of the Free", "Sing, My Country"]
_TRAIN_UNITS = ["km", "kg", "inches", "gallons", "hectares", "acres", "cubic yards", "degrees", "percent", "volts",
                "hours", "pounds", "ounces", "millimetres"]
_TRAIN_ADJECTIVES = ["small", "large", "dusty", "shiny", "broken", "wicker", "ancient", "narrow", "heavy", "fragile",
                     "twisted", "silver", "frozen", "crooked", "gentle", "sour", "sweet", "empty", "bitter", "noisy",
                     "striped", "velvet", "sleepy", "rusty", "tiny", "giant", "sacred", "lonely", "spotted", "humble"]
_TRAIN_NAME_PREFIXES = ["Upper", "Lower", "Little", "Great", "New", "Nether"]
_TRAIN_TITLE_PREPOSITIONS = ["Across", "Amid", "Beneath", "Towards", "Without", "Over", "Past", "With", "Upon"]
_TRAIN_TITLE_JOINS = ["of the", "and the", "in the", "for", "under the", "beyond the", "and"]
_TRAIN_AMOUNT_PREFIXES = ["about", "nearly", "over", "under", "roughly", "at least", "up to", "almost"]
_TRAIN_LONG_UNITS = ["square yards", "cubic inches", "degrees Kelvin", "troy ounces", "square chains", "fluid ounces",
                     "kilowatt hours", "man hours"]
_MONTH_NAMES = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
                "November", "December"]

# Sentences shaped like facts that do not answer anything asked, and plain prose of other registers.
_TRAIN_FACTLIKE = [
    "The default value of the flag is False.",
    "The result of the vote is still unknown.",
    "The purpose of this section is to explain the fees.",
    "The name of the game is patience.",
    "The size of the print run is uncertain.",
    "The start of the season is always busy.",
    "The point of the exercise is to learn.",
    "The colour of the old van is {colour}.",
]
_TRAIN_REGISTERS = [
    "The home side kept possession for most of the second half.",
    "A late goal settled a match that had looked certain to end level.",
    "Heavy showers are expected to clear from the west by the afternoon.",
    "Temperatures will fall below freezing in sheltered valleys overnight.",
    "I have used this blender daily for a month and it still works well.",
    "The battery lasts about two days, which is better than I expected.",
    "In the early years the settlement relied on fishing and trade.",
    "The treaty was signed after months of difficult negotiation.",
    "Hi all, just a reminder that the office closes early on Friday.",
    "Please find the updated schedule attached to this message.",
    "Unscrew the cover and disconnect the power before you begin.",
    "Tighten each bolt by hand first, then with the spanner.",
    "She opened the window and listened to the traffic below.",
    "He could not remember where he had left his keys.",
    "Nobody expected the ferry to arrive on time that morning.",
    "The results were published in a short report last spring.",
]

# Sentences that name the asked entity and attribute without giving its value (the value-less mentions a reader
# must not answer from), quoted speech, and prose full of numbers and names that answer nothing.
_TRAIN_MENTIONS = [
    "The {attribute} of {entity} was changed in {year}.",
    "{entity} is proud of its {attribute}.",
    "We asked {person} about the {attribute} of {entity}, but got no reply.",
    "Ask {person} if you need the {attribute} of {entity}.",
    "Whether the {attribute} of {entity} will change is unclear.",
    "In {year}, {entity} announced a new {attribute}.",
    "Visitors to {entity} often ask about its {attribute}.",
    "The {attribute} of {entity} has been disputed since {year}.",
    "{person} wrote {number} pages on the {attribute} of {entity}.",
    "Nobody knows who picked the {attribute} of {entity}.",
]
_TRAIN_QUOTES = [
    "\"Where did you put the {noun}?\" asked {person}.",
    "\"I will bring the {noun} tomorrow,\" said {person}.",
    "{person} laughed. \"That {noun} is older than me.\"",
    "\"Leave the {noun} where it is,\" she whispered.",
    "\"Is it {number} or {number}?\" he asked, scratching his chin.",
    "\"We sold the last {noun} in {month},\" the clerk replied.",
]
_TRAIN_NUMERIC = [
    "In {year} the {noun} was moved {number} {unit} to the north.",
    "{person} paid {money} for the {noun} in {month} {year}.",
    "Ticket {code} was issued to {person} on {date}.",
    "About {number} people came to see the {noun}.",
    "The shipment of {number} crates left on {date}.",
]


def make_open_word(rng: random.Random, min_syllables: int = 2, max_syllables: int = 4) -> str:
    """A made-up word of open syllables (the second inventory)."""
    count = rng.randint(min_syllables, max_syllables)
    parts = [rng.choice(_OPEN_ONSETS) + rng.choice(_OPEN_VOWELS) for _ in range(count)]
    return "".join(parts) + rng.choice(_OPEN_CODAS)


def make_letters(rng: random.Random) -> str:
    """A word of 2 to 11 random letters, pronounceable or not ("Qwyzt", "brlaxe"): no syllable code at all, so the
    tokenizer splits it into pieces the model has rarely seen, and only where it stands tells what it is."""
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz" + "aeiou" * 2) for _ in range(rng.randint(2, 11)))


def make_name_word(rng: random.Random) -> str:
    """A capitalised made-up word from either syllable inventory, or of random letters."""
    draw = rng.random()
    word = make_word(rng, 1, 3) if draw < 0.4 else make_open_word(rng) if draw < 0.8 else make_letters(rng)
    return word.capitalize()


def _broad_person(rng):
    if rng.random() < 0.3:
        initials = " ".join(f"{c}." for c in rng.sample("ABCDEFGHJKLMNOPRSTVW", rng.choice([1, 2])))
        return f"{initials} {rng.choice(_FAMILY_NAMES)}"
    return f"{rng.choice(_GIVEN_NAMES)} {rng.choice(_FAMILY_NAMES + [make_name_word(rng)])}"


def _broad_place(rng):
    shape = rng.randrange(6)
    if shape == 0:
        return f"St. {rng.choice(_GIVEN_NAMES + [make_name_word(rng)])}"
    if shape == 1:
        return f"O'{make_name_word(rng)} {rng.choice(_PLACE_SUFFIXES)}"
    if shape == 2:
        return f"{make_name_word(rng)}-{rng.choice(['on-Sea', 'under-Hill', make_name_word(rng)])}"
    if shape == 3:
        return f"{make_name_word(rng)} {rng.choice(_PLACE_SUFFIXES)}"
    return " ".join(make_name_word(rng) for _ in range(rng.choice([1, 2, 3])))


def make_broad_entity(rng: random.Random) -> str:
    """A place, person, organisation, ship or product name of 1 to 4 words, a numbered place, or a common noun
    phrase ("the sleepy owl", "pump 3", "compound QX-7")."""
    shape = rng.randrange(10)
    if shape == 8:
        return rng.choice([f"the {_noun(rng)}", f"the {rng.choice(_TRAIN_ADJECTIVES)} {_noun(rng)}",
                           f"the {_plural(_noun(rng))}", f"the {_noun(rng)} {_noun(rng)}"])
    if shape == 9:
        return f"{_noun(rng)} {make_broad_value(rng, 'code') if rng.random() < 0.5 else rng.randint(1, 99)}"
    if shape == 0:
        return _broad_person(rng)
    if shape == 1:
        owner = rng.choice([rng.choice(_FAMILY_NAMES), make_name_word(rng),
                            f"{rng.choice(_GIVEN_NAMES)} {rng.choice(_FAMILY_NAMES)}"])
        return f"{owner} {rng.choice(_ORG_SUFFIXES)}"
    if shape == 2:
        return rng.choice([f"the {rng.choice(_GIVEN_NAMES)} {rng.choice(_GIVEN_NAMES)}",
                           f"the {rng.choice(_VESSEL_WORDS)} {rng.choice(_VESSEL_WORDS + [make_name_word(rng)])}"])
    if shape == 3:
        return f"{make_name_word(rng)} {rng.choice(_PRODUCT_SUFFIXES + [str(rng.randint(2, 9999))])}"
    if shape == 4:
        return f"{rng.choice(_NUMBERED_PLACES)} {rng.randint(1, 99)}{rng.choice(['', '', 'A'])}"
    if shape == 5:
        return make_entity(rng)  # the classic made-up names stay in the mix
    return _broad_place(rng)


def near_name(rng: random.Random, entity: str) -> str:
    """Another name that shares most of `entity`'s words ("compound K-6" beside "compound K-7", "the red fox" beside
    "the red panda"), so only one word or number tells the two apart."""
    words = entity.split()
    numbers = [i for i, w in enumerate(words) if any(c.isdigit() for c in w)]
    if numbers and rng.random() < 0.7:
        i = rng.choice(numbers)
        words[i] = re.sub(r"\d+", lambda m: str((int(m.group()) + rng.randint(1, 9)) % 10 ** len(m.group())), words[i])
    elif len(words) > 1 and rng.random() < 0.7:
        i = rng.randrange(1 if words[0] == "the" else 0, len(words))
        replacement = _noun(rng) if words[i].islower() else make_name_word(rng)
        words[i] = replacement
    else:
        extra = rng.choice(_TRAIN_NAME_PREFIXES) if words[0][0].isupper() else rng.choice(_TRAIN_ADJECTIVES)
        words.insert(1 if words[0] == "the" else 0, extra)
    near = " ".join(words)
    return near if near != entity else near + " " + make_name_word(rng)


def make_broad_attribute(rng: random.Random) -> str:
    """A noun, or a noun phrase of two words ("home port", "annual budget")."""
    noun = rng.choice(load_nouns())
    return f"{rng.choice(_ATTRIBUTE_MODIFIERS)} {noun}" if rng.random() < 0.35 else noun


VALUE_KINDS = ("digits", "separated", "year", "date", "amount", "code", "word", "name", "phrase", "title", "letters")


def _noun(rng: random.Random) -> str:
    return rng.choice(load_nouns())


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"


def _number(rng: random.Random) -> str:
    return rng.choice([str(rng.randint(1, 999)), f"{rng.randint(1_000, 999_999):,}",
                       f"{rng.randint(0, 99)}.{rng.randint(0, 99):02d}", f"{rng.randint(0, 999)}.{rng.randint(1, 9)}"])


def _unit(rng: random.Random) -> str:
    """A unit of one or two words: the usual ones, a plural noun ("4 barrels"), or a made-up word."""
    draw = rng.random()
    if draw < 0.4:
        return rng.choice(_TRAIN_UNITS)
    if draw < 0.55:
        return rng.choice(_TRAIN_LONG_UNITS)
    if draw < 0.9:
        return _plural(_noun(rng))
    return make_word(rng, 1, 2) + "s"


def _phrase(rng: random.Random) -> str:
    """A lowercase phrase of one to five words, made of a closed list or composed from the noun list."""
    shape = rng.randrange(8)
    if shape == 0:
        return rng.choice([f"a {rng.choice(_TRAIN_COLOURS)} {rng.choice(_TRAIN_CREATURES)}",
                           f"{rng.choice(_TRAIN_NUMBERS)} {rng.choice(_TRAIN_PLURALS)}", rng.choice(_TRAIN_DISHES),
                           f"the {rng.choice(_TRAIN_COLOURS)} one"])
    if shape == 1:
        noun = _noun(rng)
        article = "an" if (adjective := rng.choice(_TRAIN_ADJECTIVES))[0] in "aeiou" else "a"
        return f"{rng.choice([article, 'the', 'one'])} {adjective} {noun}"
    if shape == 2:
        return f"{rng.choice(_TRAIN_NUMBERS)} {rng.choice(_TRAIN_ADJECTIVES)} {_plural(_noun(rng))}"
    if shape == 3:
        return f"{rng.choice(_TRAIN_ADJECTIVES)} {_noun(rng)} {_noun(rng)}"
    if shape == 4:
        return f"{_noun(rng)} {rng.choice(['with', 'and', 'in', 'on'])} {_noun(rng)}"
    if shape == 5:
        return " ".join(make_word(rng, 1, 2) for _ in range(rng.randint(2, 4)))
    if shape == 6:
        return f"{rng.choice(_TRAIN_ADJECTIVES)}-{rng.choice(_TRAIN_COLOURS)}"
    return " ".join([rng.choice(_TRAIN_ADJECTIVES)] * rng.randint(0, 1) + [_noun(rng) for _ in range(rng.randint(1, 3))])


def _title(rng: random.Random) -> str:
    """A title in title case of two to six words: a closed list, or composed from nouns and adjectives."""
    def cap(word: str) -> str:
        return word[0].upper() + word[1:]

    shape = rng.randrange(6)
    if shape == 0:
        return rng.choice(_TRAIN_TITLES)
    if shape == 5:  # led by a preposition: "Across the Frozen Harvest", "Beneath Stone and Mirror"
        rest = rng.choice([f"the {cap(_noun(rng))}", f"{cap(_noun(rng))} and {cap(_noun(rng))}",
                           f"the {cap(rng.choice(_TRAIN_ADJECTIVES))} {cap(_noun(rng))}"])
        return f"{rng.choice(_TRAIN_TITLE_PREPOSITIONS)} {rest}"
    if shape == 1:
        return f"{cap(rng.choice(_TRAIN_ADJECTIVES))} {cap(_noun(rng))}"
    if shape == 2:
        joined = " ".join(w if w in ("of", "the", "and", "in", "for", "under", "beyond") else cap(w)
                          for w in rng.choice(_TRAIN_TITLE_JOINS).split())
        return f"{rng.choice(['The ', ''])}{cap(_noun(rng))} {joined} {cap(_noun(rng))}"
    if shape == 3:
        return " ".join(cap(rng.choice([_noun(rng), rng.choice(_TRAIN_ADJECTIVES)])) for _ in range(rng.randint(2, 4)))
    return f"{cap(_noun(rng))} {cap(make_word(rng, 1, 2))}"


def make_broad_value(rng: random.Random, kind: str | None = None) -> str:
    kind = kind or rng.choice(VALUE_KINDS)
    if kind == "digits":
        return str(rng.randint(0, 10 ** rng.randint(1, 6) - 1))
    if kind == "separated":
        return f"{rng.randint(1_000, 99_999_999):,}"
    if kind == "year":
        return str(rng.randint(1000, 2030))
    if kind == "date":
        day, month, year = rng.randint(1, 31), rng.choice(_MONTH_NAMES), rng.randint(1600, 2030)
        return rng.choice([f"{day} {month} {year}", f"{month} {day}, {year}", f"{month} {year}", f"{day} {month}",
                           f"{year}-{rng.randint(1, 12):02d}-{day:02d}", f"{day}/{rng.randint(1, 12)}/{year}",
                           f"the {day}{'th' if 10 <= day <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th')}"
                           f" of {month}"])
    if kind == "amount":
        number = _number(rng)
        shape = rng.random()
        if shape < 0.55:
            amount = f"{number} {_unit(rng)}"
        elif shape < 0.75:
            amount = f"{rng.choice('£$€¥')}{number}"
        elif shape < 0.85:
            amount = f"{rng.choice('£$€')}{number} {rng.choice(['million', 'billion', 'a year', 'each'])}"
        else:
            amount = f"{number}{rng.choice(['%', ' %', 'kg', 'km', 'm', 'cm'])}"
        return f"{rng.choice(_TRAIN_AMOUNT_PREFIXES)} {amount}" if rng.random() < 0.15 else amount
    if kind == "code":
        letters = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(rng.randint(1, 4)))
        digits = str(rng.randint(0, 99_999)).zfill(rng.randint(1, 5))
        return rng.choice([f"{letters}-{digits}", f"{letters}{digits}", f"{digits}-{letters}", f"{letters} {digits}",
                           f"{letters}-{digits}-{rng.choice('XYZ')}", f"{letters}.{digits}",
                           f"{letters}/{digits}", f"{letters}/{digits}-{rng.choice('EFGH')}", f"#{digits}",
                           f"{letters}{digits}{rng.choice('QRST')}", f"{digits}/{letters}"])
    if kind == "word":
        word = make_word(rng) if rng.random() < 0.5 else make_open_word(rng)
        return word.capitalize() if rng.random() < 0.5 else word
    if kind == "name":
        return rng.choice([_broad_person, _broad_place, make_entity, make_broad_entity])(rng)
    if kind == "phrase":
        return _phrase(rng)
    if kind == "title":
        return _title(rng)
    if kind == "letters":  # one to four words of random letters, in any case, sometimes joined by a hyphen
        words = [make_letters(rng) for _ in range(rng.choice([1, 1, 2, 2, 3, 4]))]
        case = rng.choice([str.lower, str.capitalize, str.capitalize, str.upper])
        return rng.choice([" ", " ", "-"]).join(case(w) for w in words)
    raise ValueError(f"unknown value kind {kind!r}")


class BroadFactWriter(FactWriter):
    """FactWriter with the broad task's names, attributes, values and prose, facts placed anywhere (first and last
    sentence included) and distractors often right next to the fact."""

    def __init__(self, seed: int, split: str = "train", with_licenses: bool = False):
        super().__init__(seed, split, with_licenses)
        self.kinds: dict[Fact, str] = {}  # the value kind each drawn fact was made with

    def filler(self) -> str:
        draw = self.rng.random()
        if draw < 0.15:
            return self.rng.choice(_TRAIN_REGISTERS)
        if draw < 0.22:
            return self.rng.choice(_TRAIN_FACTLIKE).replace("{colour}", self.rng.choice(_TRAIN_COLOURS))
        if draw < 0.28:
            return self.fill(self.rng.choice(_TRAIN_QUOTES))
        if draw < 0.33:
            return self.fill(self.rng.choice(_TRAIN_NUMERIC))
        return super().filler()

    def fill(self, template: str, **given: str) -> str:
        """A template's {slots} filled: with `given`, else drawn."""
        rng = self.rng
        draw = {"person": lambda: _broad_person(rng), "noun": lambda: _noun(rng), "year": lambda: str(rng.randint(1600, 2030)),
                "number": lambda: rng.choice([str(rng.randint(2, 999)), f"{rng.randint(1_000, 99_999):,}"]),
                "month": lambda: rng.choice(_MONTH_NAMES), "unit": lambda: _unit(rng),
                "money": lambda: make_broad_value(rng, "amount"), "code": lambda: make_broad_value(rng, "code"),
                "date": lambda: make_broad_value(rng, "date")}
        text = re.sub(r"\{(\w+)\}", lambda m: given[m.group(1)] if m.group(1) in given else draw[m.group(1)](), template)
        return text[0].upper() + text[1:]

    def mentions(self, target: Fact, count: int) -> list[str]:
        """Sentences naming the asked entity and attribute that do not give the value."""
        return [self.fill(self.rng.choice(_TRAIN_MENTIONS), entity=target.entity, attribute=target.attribute)
                for _ in range(count)]

    def join(self, sentences: list[str]) -> str:
        """Sentences as running text, as paragraphs, or one to a line (notes, logs)."""
        style = self.rng.choices(["running", "paragraphs", "lines"], weights=[4, 4, 1])[0]
        if style == "running" or len(sentences) < 2:
            return " ".join(sentences)
        if style == "lines":  # a note or log: one sentence a line, sometimes bulleted, sometimes under a heading
            bullet = self.rng.choice(["", "", "- ", "* ", "• "])
            heading = [self.rng.choice(["Notes", "Summary", "Log", "Details", "Facts"]) + self.rng.choice([":", ""])] \
                if self.rng.random() < 0.3 else []
            return "\n".join(heading + [bullet + sentence for sentence in sentences])
        paragraphs, current = [], []
        for sentence in sentences:
            current.append(sentence)
            if len(current) >= self.rng.randint(2, 8):
                paragraphs.append(" ".join(current))
                current = []
        return "\n\n".join(paragraphs + ([" ".join(current)] if current else []))

    def fact(self, attribute: str, entity: str, kind: str | None = None) -> Fact:
        kind = kind or self.rng.choice(VALUE_KINDS)
        value = make_broad_value(self.rng, kind)
        if kind == "name" and len(value.split()) > 1 and self.rng.random() < 0.25:
            # a value that shares a word with the entity ("Tobias Ashby" for "Mira Ashby"): still the answer whole
            value = " ".join(value.split()[:-1] + [entity.split()[-1]])
        drawn = Fact(attribute, entity, value)
        self.kinds[drawn] = kind
        return drawn

    def target(self) -> Fact:
        return self.fact(make_broad_attribute(self.rng), make_broad_entity(self.rng))

    def distractors(self, target: Fact, same_attribute: int, same_entity: int, unrelated: int) -> list[Fact]:
        """Same-attribute distractors take values of the target's kind, so only the entity tells them apart."""
        kind = self.kinds.get(target)
        facts = [self.fact(target.attribute, make_broad_entity(self.rng) if index or self.rng.random() < 0.5 else
                           near_name(self.rng, target.entity), kind) for index in range(same_attribute)]
        facts += [self.fact(make_broad_attribute(self.rng), target.entity) for _ in range(same_entity)]
        facts += [self.target() for _ in range(unrelated)]
        return [f for f in facts if f.value != target.value and (f.attribute, f.entity) != (target.attribute,
                                                                                              target.entity)]

    def document(self, n_chars: int, target: Fact, others: list[Fact], include_target: bool = True,
                 placement: str | None = None, mentions: int | None = None) -> Example:
        """Like FactWriter.document, with value-less mentions of the asked fact (0 to 2 unless given) among the
        filler, and paragraphs or lines as well as running text."""
        mentions = self.rng.choice([0, 0, 1, 1, 2]) if mentions is None else mentions
        placement = placement or self.rng.choices(["first", "last", "near", "anywhere"], weights=[1, 1, 2, 4])[0]
        extra = self.mentions(target, mentions)
        if placement == "anywhere" or not include_target:
            return super().document(n_chars, target, others, include_target, extra)
        sentences = self.prose(n_chars - sum(len(f.sentence) + 1 for f in others), extra)
        if placement == "first":
            at = 0
        elif placement == "last":
            at = len(sentences)
        else:
            at = self.rng.randint(0, len(sentences))
        sentences.insert(at, target.sentence)
        for fact in others:  # near: within three sentences of the fact; else anywhere
            if placement == "near":
                spot = min(max(at + self.rng.randint(-3, 4), 0), len(sentences))
            else:
                spot = self.rng.randint(1, len(sentences)) if placement == "first" else self.rng.randint(0, at)
            sentences.insert(spot, fact.sentence)
            at += spot <= at
        text = self.join(sentences)
        answer_start = text.index(target.sentence) + len(target.sentence) - len(target.value) - 1
        return Example(text, target.question, target.value, answer_start, facts=[target, *others])


def make_broad_example(seed: int, n_chars: int, split: str = "test", n_distractors: tuple[int, int, int] = (3, 2, 3),
                       with_licenses: bool = False, placement: str | None = None) -> Example:
    """One document of the broad task: a target fact and same-attribute, same-entity and unrelated distractors."""
    writer = BroadFactWriter(seed, split, with_licenses)
    target = writer.target()
    others = writer.distractors(target, *n_distractors)
    return writer.document(n_chars, target, others, placement=placement)
