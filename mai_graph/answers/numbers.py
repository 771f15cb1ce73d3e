"""Numbers, dates and clock times: reading them off text, canonical forms, comparison.

A number keeps what changes its meaning: the sign, a magnitude (``4.1k`` is 4100, ``2.5
million``, ``7 bn``), a percent sign and, in ``auto``, its currency and unit noun (``4 birds``
is not ``4 cars``). Years, dates, decades and clock times are read whole and compare exactly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Context, Decimal, InvalidOperation
from typing import Final, Literal

from mai_graph.answers.text import (
    NUMBER_WORDS,
    last_matches,
    lower_same,
    word_start,
    words_to_number,
)

__all__ = [
    "Hedge",
    "Quantity",
    "format_quantity",
    "parse_canonical",
    "quantities_match",
    "read_auto_number",
    "read_number",
]

QuantityKind = Literal["num", "year", "date", "time", "decade"]

YEAR_MIN, YEAR_MAX = 1500, 2100
"""A bare four-digit integer in this range is read as a year (compared exactly)."""

_MAX_DIGITS = 30
_MAX_POWER = 308
"""Largest power read in ``a^b`` (a float's range): beyond it the number is not compared."""
_CTX = Context(prec=12)
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t|tember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_MONTHS: Final = {
    m: i + 1
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )
}
_CURRENCY = "$€£¥₹"

_NUMWORD_KEYS = (
    "zero|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen"
    "|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy"
    "|eighty|ninety|hundred|thousand|million|billion|dozen"
)
# Where a number may start (cheap, so the full scanner below runs only there).
_CAND_HEAD = (
    rf"\d(?<!\w.)|[{_CURRENCY}](?<!\w.)(?=\s?-?\.?\d)|-(?<![\w.-]-)(?=[{_CURRENCY}]?\.?\d|-\d)"
    r"|\.(?<![\w.]\.)(?=\d)"
    r"|\b(?:(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?,?\s+\d"
    rf"|(?:{_NUMWORD_KEYS})\b|an?\s+(?:dozen|hundred|thousand|million|billion)\b"
    r"|(?<!the )(?<!this )(?<!that )(?<!each )(?<!any )(?<!every )(?<!which )(?<!some )"
    r"(?<!another )(?<!no )one\b"
)
_CAND = re.compile(_CAND_HEAD + r"|no(?:ne)?\b)")
_CAND_NO_ZERO = re.compile(_CAND_HEAD + ")")
# The scanner, on lower-cased text; the first alternative that matches at a position wins.
_SCAN = re.compile(
    rf"""
    (?P<iso>(?<![\w.-])(?P<iy>\d{{4}})-(?P<im>\d{{1,2}})-(?P<id>\d{{1,2}})(?![\w-]))
    |(?P<md>(?<![\w-])--(?P<mdm>\d{{2}})-(?P<mdd>\d{{2}})(?![\w-]))
    |(?P<ym>(?<![\w.-])(?P<ymy>\d{{4}})-(?P<ymm>\d{{2}})(?![\w.-]))
    |(?P<mdy>\b(?P<m1>{_MONTH})\b\.?\s+(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?\b
        (?:,?\s*(?P<y1>\d{{4}})\b)?)
    |(?P<dmy>(?<![\w.,])(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m2>{_MONTH})\b\.?
        (?:,?\s*(?P<y2>\d{{4}})\b)?)
    |(?P<my>\b(?P<m3>{_MONTH})\b\.?,?\s+(?P<y3>\d{{4}})\b)
    |(?P<nd>(?<![\w./])(?P<na>\d{{1,2}})/(?P<nb>\d{{1,2}})/(?P<ny>\d{{4}})(?![\w/]))
    |(?P<time>(?<![\w.:])(?P<th>\d{{1,2}}):(?P<tm>\d{{2}})(?::(?P<ts>\d{{2}}))?
        (?:\s*(?P<tap>[ap])\.?m\b\.?)?(?![\w:]))
    |(?P<hap>(?<![\w.:])(?P<hh>\d{{1,2}})\s*(?P<hp>[ap])\.?m\b\.?)
    |(?P<oclock>(?<![\w.:])(?P<oh>\d{{1,2}})\s*o'?\s?clock\b)
    |(?P<ratio>(?<![\w.:])(?P<ra>\d+(?:\.\d+)?):(?P<rb>\d+(?:\.\d+)?)(?![\w:]|\.\d))
    |(?P<decade>(?<![\w.])(?P<dec>\d{{3}}0)'?s\b)
    |(?P<num>(?<![\w.,])(?P<neg>-(?=[{_CURRENCY}]?\.?\d))?(?:(?P<cur>[{_CURRENCY}])\s?)?
        (?P<neg2>-)?(?=\.?\d)
        (?P<int>\d{{1,3}}(?:,\d{{3}})+(?![\d,])
           |\d{{1,3}}(?:(?P<gsep>[ '_])\d{{3}})(?:(?P=gsep)\d{{3}})*(?![\d'_]|[.,]\d|\ \d)
           |\d+)?(?P<frac>\.\d+)?
        (?:\ (?P<mixn>\d{{1,6}})/(?P<mixd>\d{{1,6}})(?![\d/]|\.\d))?
        (?:e(?P<exp>[+-]?\d{{1,4}})(?![a-z\d]|\.\d)|\s?\^\s?(?P<pow>[+-]?\d{{1,4}})(?!\d|\.\d)
           |\s?[x×*·]\s?10\s?\^\s?(?P<sci>[+-]?\d{{1,4}})(?!\d|\.\d))?
        (?:\s?/\s?(?P<den>\d+(?:\.\d+)?)(?![\d/]))?
        (?P<ord>(?:st|nd|rd|th)\b)?
        (?:\s?(?P<magc>[kmbt])(?![a-z])
           |\s?(?P<magw>thousand|million|billion|trillion|bn|mn|mln|tn|dozens?|hundreds?
              |lakhs?|crores?|万|亿)(?:\b|(?<=[万亿])))?
        (?:\s?(?P<pct>%|percent\b|per\s?cent\b|pct\b))?)
    |(?P<words>{NUMBER_WORDS})
    |(?P<no>\b(?:none|no)\b)
    """,
    re.VERBOSE,
)
_MAGNITUDE: Final = {
    "k": 10**3, "thousand": 10**3, "m": 10**6, "million": 10**6, "mn": 10**6, "mln": 10**6,
    "b": 10**9, "billion": 10**9, "bn": 10**9, "t": 10**12, "trillion": 10**12, "tn": 10**12,
    "dozen": 12, "dozens": 12, "hundred": 100, "hundreds": 100, "lakh": 10**5,
    "lakhs": 10**5, "crore": 10**7, "crores": 10**7, "万": 10**4, "亿": 10**8,
}  # fmt: skip
_MAG_LETTERS = "kKMBT"  # "5m" is five metres, "5M" five million

# Statements that name the value (keyword-led, on lower-cased text): the stated value wins
# over numbers mentioned after it.
_STATED = re.compile(
    r"answer\s*(?:(?:would|should|will|must)\s+be\b|is\b|:|=|-(?=\s)|\n)"
    r"|(?:total|sum|result|count|difference|average|mean|median|product|value|amount"
    r"|number|ratio|percentage|share|price|cost|age|year|date|time|reading|score)"
    r"(?:\s+(?:of|for|in|on)\s+[\w ]{1,30}?)?\s*\b(?:is|are|was|were|equals|comes\s+to)\b"
    r"|(?:total|sum|result|count|value|number)\s*[=:]"
    r"|there\s+(?:are|is|were|was)\b|there's\b|i\s+(?:can\s+)?(?:see|count)\b"
    r"|(?:equals|totals|is\s+equal\s+to|makes|gives)\b|=|in\s+total\s*:"
    r"|答案\s*(?:应该是|应为|是|为|:)?"
)
_POSTFIX_MARK = re.compile(r"(?:in\s+total|in\s+all|altogether|overall|total)\b")
_POSTFIX = re.compile(r"\s*(?:[a-z]+\s+){0,2}?(?:in\s+total|in\s+all|altogether|overall|total)\b")
_BREAK = re.compile(r"[;!?\n]|\.(?!\d)")
_STATE_WINDOW = 60
_MAX_STATEMENTS = 8

# Hedges: a range, a choice between numbers, "x out of y", a bound.
_HEDGE_AFTER = re.compile(
    rf"\s*(?:-|to\b|or\b|and\b|through\b|thru\b|until\b|till\b|&|in\b(?!\s*\d{{4}}\b)|~|/|out\s+of\b|of\b"
    rf"|vs\.?)\s*(?:[{_CURRENCY}]\s?)?"
    rf"(?:\d|{NUMBER_WORDS})"
    rf"|\s*,\s*(?:\d+|{NUMBER_WORDS})\s*(?:,|or\b)"
    r"|\+(?!\s*\d)|\s*(?:or\s+(?:more|less|fewer)|and\s+(?:up|above|more))\b"
    # what changes the number itself: a power, a sign in words, an era
    r"|\s*(?:squared|cubed|to\s+the\s+(?:power|\w+\s+power)|below\s+zero"
    r"|b\.?\s?c\.?(?:e\.?)?|a\.?\s?d\.?|c\.?e\.?)(?![\w])"
)
_HEDGE_BEFORE = re.compile(
    rf"(?:(?:\d|\b{NUMBER_WORDS})\s*(?:-|\bto|\bor|\band|~|/|\bout\s+of|\bof|\bvs\.?)"
    r"|\b(?:between|from|either|at\s+least|at\s+most|more\s+than|less\s+than|fewer\s+than"
    r"|greater\s+than|over|under|up\s+to|above|below|beyond|upwards\s+of"
    r"|not|isn'?t|wasn'?t|aren'?t|never|except|excluding|other\s+than|rather\s+than"
    r"|instead\s+of)"
    r"|[<>≤≥])\s*$"
)
_HEDGE_LOOK = 40

# Reading a unit noun after a number (auto), and the phrases that may follow it.
_UNIT_WORD = re.compile(r"[ \t]*([a-z°][a-z°'/-]*)")
_STOP: Final = frozenset(
    "in on at of and or the a an with that which who are is was were be been visible shown seen "
    "total altogether overall for from to per each than there here it its this these those as "
    "by but so because since while if when left apiece approximately approx roughly about "
    "around near under behind inside can could would will may might shall should has have had "
    "do does did not".split()
)
_NOT_UNITS: Final = frozenset(
    [*_MAGNITUDE, "am", "pm", "a.m", "p.m", "o'clock", "oclock", "percent", "pct", "yes", "no",
     "not", "none", "jan", "january", "feb", "february", "mar", "march", "apr", "april", "may",
     "jun", "june", "jul", "july", "aug", "august", "sep", "sept", "september", "oct",
     "october", "nov", "november", "dec", "december", "st", "nd", "rd", "th", "s", "maybe",
     "perhaps", "possibly", "unsure", "uncertain", "unclear"]
)  # fmt: skip
_FILLER = re.compile(
    r"(?:\s*(?:in\s+total|in\s+all|total|altogether|overall|visible|shown|present|left|each"
    r"|apiece|approximately|approx|roughly|(?:of\s+)?them|(?:are|is)\s+(?:visible|shown"
    r"|present|there)|can\s+be\s+seen|(?:(?:are|is)\s+)?(?:in|on|at|near|under|behind|inside)"
    r"\s+(?:the|this"
    r"|that|a)\s+[a-z]+(?:\s+[a-z]+)?)\b)*[\s.!,;:]*\Z"
)
_LEADS = (
    r"(?:(?:there\s+(?:are|is|were|was)|there's|i\s+(?:can\s+)?(?:see|count)|it(?:'s|\s+is"
    r"|\s+was)|they\s+are|we\s+(?:see|have)|the\s+[a-z]+(?:\s+(?:of|for|in)\s+[a-z]+)?"
    r"\s+(?:is|was|are|were)|a\s+total\s+of"
    r"|total\s*:|about|around|approximately|approx\.?|roughly|only|exactly|just{})"
    r"\s+|[~≈]\s*)*"
)
_NUM_LEAD = re.compile(_LEADS.format(""))
_AUTO_LEAD = re.compile(
    _LEADS.format(
        "|in|on|at|since|between|from|either|at\\s+least|at\\s+most|more\\s+than|less\\s+than"
        "|fewer\\s+than|greater\\s+than|over|under|up\\s+to|above|below"
    )
)
_SENTENCE_END = re.compile(r"[!?;\n]|\.(?!\d)")
_PRONOUN_ONE = re.compile(
    r"\b(?:the|this|that|which|each|every|any|another|no|some)\s+"
    r"(?:(?!(?:is|are|was|were|of|be)\b)[a-z]+\s+){0,2}$"
)
_UNIT_ALIAS: Final = {
    "cents": "cent", "¢": "cent", "pence": "penny", "pennies": "penny", "bps": "bp",
    "basis": "bp", "permil": "permille", "mille": "permille",
    "dollar": "$", "usd": "$", "buck": "$", "euro": "€", "eur": "€", "yen": "¥", "jpy": "¥",
    "yuan": "¥", "rmb": "¥", "cny": "¥", "gbp": "£", "rupee": "₹", "inr": "₹",
    "centimeter": "cm", "centimetre": "cm", "millimeter": "mm", "millimetre": "mm",
    "meter": "m", "metre": "m", "kilometer": "km", "kilometre": "km", "kilogram": "kg",
    "gram": "g", "lb": "lb", "pound": "lb", "hour": "h", "hr": "h", "minute": "min",
    "second": "s", "sec": "s", "yr": "year", "foot": "ft", "feet": "ft", "mile": "mi",
    "degree": "°", "people": "person", "person": "person", "children": "child",
    "men": "man", "women": "woman", "mice": "mouse", "geese": "goose", "teeth": "tooth",
    "inch": "inch", "yard": "yd", "ounce": "oz", "liter": "l", "litre": "l", "milliliter": "ml",
    "millilitre": "ml", "millisecond": "ms", "mins": "min", "hrs": "h", "secs": "s",
    "kgs": "kg", "lbs": "lb", "celsius": "°c", "fahrenheit": "°f", "ton": "tonne",
    "kph": "km/h", "kmh": "km/h", "mo": "month", "byte": "b", "kilobyte": "kb",
    "megabyte": "mb", "gigabyte": "gb", "terabyte": "tb",
}  # fmt: skip
_MEASURES: Final = {
    "mm": ("length", "0.001"), "cm": ("length", "0.01"), "m": ("length", "1"),
    "km": ("length", "1000"), "inch": ("length", "0.0254"), "ft": ("length", "0.3048"),
    "yd": ("length", "0.9144"), "mi": ("length", "1609.344"),
    "mm2": ("area", "0.000001"), "cm2": ("area", "0.0001"), "m2": ("area", "1"),
    "km2": ("area", "1000000"),
    "mg": ("mass", "0.000001"), "g": ("mass", "0.001"), "kg": ("mass", "1"),
    "tonne": ("mass", "1000"), "lb": ("mass", "0.45359237"), "oz": ("mass", "0.028349523125"),
    "ms": ("time", "0.001"), "s": ("time", "1"), "min": ("time", "60"), "h": ("time", "3600"),
    "day": ("time", "86400"), "week": ("time", "604800"), "month": ("time", "2629800"),
    "year": ("time", "31557600"),
    "m3": ("volume", "1000"), "cm3": ("volume", "0.001"),
    "mph": ("speed", "0.44704"), "km/h": ("speed", "0.277777777778"), "m/s": ("speed", "1"),
    "b": ("data", "1"), "kb": ("data", "1000"), "mb": ("data", "1000000"),
    "gb": ("data", "1000000000"), "tb": ("data", "1000000000000"), "kib": ("data", "1024"),
    "mib": ("data", "1048576"), "gib": ("data", "1073741824"),
    "ml": ("volume", "0.001"), "l": ("volume", "1"),
    "°": ("angle", "1"), "°c": ("celsius", "1"), "°f": ("fahrenheit", "1"),
    # Sub-units that name a hundredth or a thousandth of something another answer may state
    # whole ("5 cents" is not "$5", "5 bps" is not "5%"): kept, never converted.
    "cent": ("cent", "1"), "penny": ("penny", "1"), "bp": ("basis point", "1"),
    "permille": ("per mille", "1"),
}  # fmt: skip
"""Units of measure the ``number`` kind keeps (a count noun it drops): each with its dimension
and its size in the dimension's base unit, so ``1 km`` is ``1000 m`` and ``12 km`` is never
``12 m``. SI and US customary definitions (NIST SP 811, appendix B)."""


_MALFORMED = re.compile(r"[.,'’]\d|x[\da-f]")
"""After a number: another decimal or group part that does not fit it ("1,5", "1.2.3",
"5'6"), or a hexadecimal number ("0x10")."""
_NEGATED = re.compile(r"\b(?:minus|negative)\s+\Z", re.IGNORECASE)
_FRACTION_AFTER = re.compile(
    r"[\s-]*(?:and\s+(?:a|one)\s+half|halves|half|thirds?|quarters?|fourths?|fifths?|sixths?"
    r"|sevenths?|eighths?|ninths?|tenths?|first|second|third|fourth|fifth|sixth|seventh|eighth"
    r"|ninth|tenth|eleventh|twelfth|[a-z]*tieth)\b",
    re.IGNORECASE,
)
"""Words after a number word that make it a fraction or an ordinal ("two thirds", "one and a
half", "twenty-first"): read as neither, they would be a different number."""
_FRACTION_BEFORE = re.compile(r"\b(?:half|quarter|third)\s+(?:of\s+)?\Z", re.IGNORECASE)

_C_NUM = re.compile(
    rf"(?P<neg>-)?(?P<cur>[{_CURRENCY}])?(?P<int>\d{{1,3}}(?:,\d{{3}})+|\d+)(?P<frac>\.\d+)?"
    r"(?P<pct>%)?(?: (?P<unit>[a-z°'][a-z°'/-]*[23]?))?"
)
_C_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_C_DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{4}-\d{2}|--\d{2}-\d{2}|\d{3}0s")


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number, year, date or clock time read off an answer.

    Attributes:
        kind: ``num`` (compared within a tolerance) or an exact kind: ``year``, ``date``,
            ``time``, ``decade``.
        value: The number (``num`` and ``year``).
        key: The canonical text of an exact kind (``1987-03-05``, ``07:45``, ``1990s``).
        percent: Written with ``%`` / "percent".
        currency: A currency symbol, ``""`` if none.
        unit: The unit noun as written (auto only), ``""`` if none.
        grouped: Written with a thousands separator (a quantity, never a year).
    """

    kind: QuantityKind
    value: Decimal = Decimal(0)
    key: str = ""
    percent: bool = False
    currency: str = ""
    unit: str = ""
    grouped: bool = field(default=False, compare=False)


class Hedge(Exception):
    """The number read is a range, a choice between numbers or a bound."""


def _plain(value: Decimal) -> str:
    """Decimal text without exponent, 12 significant digits.

    >>> _plain(Decimal("4.1") * 1000), _plain(Decimal(1) / Decimal(3)), _plain(Decimal("-0"))
    ('4100', '0.333333333333', '0')
    """
    value = _CTX.plus(value)
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _month(name: str) -> int:
    return _MONTHS[name[:3].lower()]


def _date_key(year: str | None, month: int, day: int | None) -> str:
    if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
        raise Hedge
    if year is None:
        return f"--{month:02d}-{day:02d}"
    return f"{year}-{month:02d}" if day is None else f"{year}-{month:02d}-{day:02d}"


def _time_key(hour: int, minute: int, second: str | None, ampm: str | None) -> str:
    if ampm:
        if not 1 <= hour <= 12:
            raise Hedge
        hour = hour % 12 + (12 if ampm.lower() == "p" else 0)
    if hour > 23 or minute > 59 or (second is not None and int(second) > 59):
        raise Hedge
    return f"{hour:02d}:{minute:02d}" + (f":{second}" if second is not None else "")


def _quantity(m: re.Match[str], text: str) -> tuple[Quantity | None, int]:
    """The quantity a scanner match denotes (None if no usable number) and where it ends.

    ``m`` matched the lower-cased form of ``text``; ``text`` decides letter case ("5M" is five
    million, "5m" five metres).

    Raises:
        Hedge: For an impossible date or time (a range such as ``2019-20``).
    """
    g = m.groupdict()
    end = m.end()
    if g["iso"]:
        return Quantity("date", key=_date_key(g["iy"], int(g["im"]), int(g["id"]))), end
    if g["md"]:
        return Quantity("date", key=_date_key(None, int(g["mdm"]), int(g["mdd"]))), end
    if g["ym"]:
        return Quantity("date", key=_date_key(g["ymy"], int(g["ymm"]), None)), end
    if g["mdy"]:
        return Quantity("date", key=_date_key(g["y1"], _month(g["m1"]), int(g["d1"]))), end
    if g["dmy"]:
        return Quantity("date", key=_date_key(g["y2"], _month(g["m2"]), int(g["d2"]))), end
    if g["my"]:
        return Quantity("date", key=_date_key(g["y3"], _month(g["m3"]), None)), end
    if g["nd"]:
        a, b = int(g["na"]), int(g["nb"])
        month, day = (b, a) if a > 12 >= b else (a, b)
        return Quantity("date", key=_date_key(g["ny"], month, day)), end
    if g["time"]:
        return Quantity("time", key=_time_key(int(g["th"]), int(g["tm"]), g["ts"], g["tap"])), end
    if g["hap"]:
        return Quantity("time", key=_time_key(int(g["hh"]), 0, None, g["hp"])), end
    if g["oclock"]:
        return Quantity("time", key=_time_key(int(g["oh"]), 0, None, None)), end
    if g["ratio"]:
        a_, b_ = Decimal(g["ra"]), Decimal(g["rb"])
        if b_ == 0 or len(g["ra"]) + len(g["rb"]) > _MAX_DIGITS:
            return None, end
        return Quantity("num", _CTX.divide(a_, b_)), end
    if g["decade"]:
        return Quantity("decade", key=f"{g['dec']}s"), end
    negated = _NEGATED.search(text, max(0, m.start() - 12), m.start()) is not None
    if g["words"]:
        if _FRACTION_AFTER.match(text, end) or _FRACTION_BEFORE.search(
            text, max(0, m.start() - 12), m.start()
        ):
            raise Hedge  # "two thirds", "half a dozen": not the number the words spell
        value = words_to_number(g["words"])
        if value is not None and negated:
            value = -value
        return (None if value is None else Quantity("num", value)), end
    if g["no"]:
        return Quantity("num", Decimal(0)), end
    int_part, frac = g["int"] or "", g["frac"] or ""
    if len(int_part) + len(frac) > _MAX_DIGITS + 8:
        return None, end
    core = max(m.end(k) for k in ("int", "frac", "mixd", "exp", "pow", "sci", "den") if g[k])
    if _MALFORMED.match(text, core) or text.startswith(" and a half", core):
        raise Hedge  # "1,5", "1.2.3", "0x10": not one number we can read for sure
    mixed = g["mixn"] is not None and not (frac or g["den"])
    if mixed and not 0 < int(g["mixn"]) < int(g["mixd"]):
        raise Hedge  # "3 4/2": not a mixed number
    try:
        value = Decimal(int_part.replace(",", "").replace(g["gsep"] or ",", "") + frac
                        if int_part else "0" + frac)  # fmt: skip
        if mixed:  # "2 1/2" is 2.5
            value += _CTX.divide(Decimal(g["mixn"]), Decimal(g["mixd"]))
        # Scientific notation and powers keep their scale: "1e5" is 100000, never 1.
        if g["exp"] or g["sci"]:
            value = value.scaleb(int(g["exp"] or g["sci"]), _CTX)
        elif g["pow"]:
            power = int(g["pow"])
            if abs(power) > _MAX_POWER or (value == 0 and power < 0):
                return None, end
            value = _CTX.power(value, power)
        if (g["exp"] or g["pow"] or g["sci"]) and value and abs(value.adjusted()) > _MAX_DIGITS:
            return None, end  # beyond what a canonical number spells out: not compared
        if g["den"]:
            den = Decimal(g["den"])
            if den == 0:
                return None, end
            value = _CTX.divide(value, den)
    except InvalidOperation:
        return None, end
    mag = g["magw"]
    if g["magc"]:
        if text[m.start("magc")] in _MAG_LETTERS:
            mag = g["magc"]
        else:
            end = m.start("magc")
    if mag:
        value *= _MAGNITUDE[mag]
    if g["neg"] or g["neg2"] or negated:
        value = -value
    pct = bool(g["pct"]) and end == m.end()
    scaled = g["exp"] or g["pow"] or g["sci"] or mixed
    signed = g["neg"] or g["neg2"] or negated
    bare = not (frac or g["den"] or mag or pct or g["cur"] or signed or scaled)
    if bare and "," not in int_part and len(int_part) == 4 and YEAR_MIN <= value <= YEAR_MAX:
        return Quantity("year", value), end
    grouped = "," in int_part or g["gsep"] is not None
    q = Quantity("num", value, percent=pct, currency=g["cur"] or "", grouped=grouped)
    return q, end


def _unit_after(low: str, end: int) -> tuple[str, int]:
    """The unit noun after a number (the last of up to three words before a stop word).

    Returns ``("", end)`` when a word follows that would change how the number reads
    ("bn", "pm", "March", "yes"): then the answer is not a plain number form.
    """
    head, pos = "", end
    for _ in range(3):
        m = _UNIT_WORD.match(low, pos)
        if m is None or m.group(1) in _STOP:
            break
        if m.group(1) in _NOT_UNITS:
            return "", -1
        head, pos = m.group(1), m.end()
    return head, pos


def _with_unit(q: Quantity, unit: str) -> Quantity:
    """Attach a unit noun; a year followed by a count noun ("1987 people") is a quantity."""
    if not unit or unit in ("ad", "ce") or q.kind not in ("num", "year"):
        return q
    return Quantity("num", q.value, percent=q.percent, currency=q.currency, unit=unit)


def _hedged(low: str, start: int, end: int) -> bool:
    before = low[max(0, start - _HEDGE_LOOK) : start]
    return (
        _HEDGE_AFTER.match(low, end, min(len(low), end + _HEDGE_LOOK)) is not None
        or _HEDGE_BEFORE.search(before) is not None
    )


def _is_pronoun_one(low: str, m: re.Match[str]) -> bool:
    return (
        m.group("words") is not None
        and m.group(0) == "one"
        and _PRONOUN_ONE.search(low[max(0, m.start() - 40) : m.start()]) is not None
    )


def _tokens(low: str, start: int, end: int, *, allow_no: bool = True) -> Iterator[re.Match[str]]:
    """Number matches starting in ``low[start:end]``, left to right."""
    pos = start
    while pos < end:
        c = (_CAND if allow_no else _CAND_NO_ZERO).search(low, pos, end)
        if c is None:
            return
        m = _SCAN.match(low, c.start())
        if m is None or (m.group("no") and not allow_no) or _is_pronoun_one(low, m):
            pos = c.start() + 1
            continue
        yield m
        pos = max(m.end(), c.start() + 1)


def _last_token(low: str) -> re.Match[str] | None:
    """The last number in ``low`` ("no" aside), looking back in growing windows."""
    end, size = len(low), 256
    while True:
        start = 0 if size >= end else word_start(low, end - size)
        last = None
        for last in _tokens(low, start, end, allow_no=False):  # noqa: B007 - keeps the last
            pass
        if last is not None or start == 0:
            return last
        end, size = start, size * 4


def _pick(low: str) -> re.Match[str] | None:
    """The number match that states the answer, in lower-cased text.

    The first number after the last statement ("the total is", "answer:", "=", "there are")
    or right before "in total"; else the first number when the text opens with one; else the
    last. A "no" counts as zero only at the start or right after a statement.
    """
    best_at, best = -1, None
    for stmt in last_matches(_STATED, low, _MAX_STATEMENTS):
        stop = min(len(low), stmt.end() + _STATE_WINDOW)
        tok = next(_tokens(low, stmt.end(), stop), None)
        if tok is not None and _BREAK.search(low, stmt.end(), tok.start()) is None:
            best_at, best = stmt.start(), tok
            break
    for mark in last_matches(_POSTFIX_MARK, low, _MAX_STATEMENTS):
        if mark.start() <= best_at:
            break
        window = word_start(low, max(0, mark.start() - 60))
        last = None
        for last in _tokens(low, window, mark.start(), allow_no=False):  # noqa: B007
            pass
        if last is not None:
            post = _POSTFIX.match(low, last.end(), mark.end())
            if post is not None and post.end() == mark.end():
                best_at, best = mark.start(), last
                break
    if best is not None:
        return best
    lead = _NUM_LEAD.match(low, _skip_space(low))
    first = _SCAN.match(low, lead.end() if lead else 0)
    if first is not None and not _is_pronoun_one(low, first):
        return first
    return _last_token(low)


def _skip_space(text: str) -> int:
    return len(text) - len(text.lstrip(" \t\n\"'([:"))


def read_number(text: str) -> Quantity | None:
    """The stated number of a prepared text (``number`` kind); None if there is none.

    Count nouns are dropped (a year followed by one becomes a quantity); the percent sign,
    currencies and units of measure (:data:`_MEASURES`) stay.

    Raises:
        Hedge: When the stated number is a range, a choice between numbers or a bound.

    >>> read_number("The total is 8; the chart also lists 20 and 35.").value
    Decimal('8')
    """
    low = lower_same(text)
    m = _pick(low)
    if m is None:
        return None
    if _hedged(low, m.start(), m.end()):
        raise Hedge
    q, end = _quantity(m, text)
    if q is None:
        return None
    if q.kind == "year":
        q = _with_unit(q, _unit_after(low, end)[0])
    if q.kind == "num":
        unit, stop = _measure_after(low, end) if not q.percent else ("", end)
        if unit and _COMPOUND.match(low, stop):
            raise Hedge  # "5 ft 6 in": one measure in two parts, not read as its first
        currency, after = q.currency, low[end : end + 2].lstrip()[:1]
        if (unit and unit in _CURRENCY) or (not unit and after and after in _CURRENCY):  # 5€
            currency, unit = currency or unit or after, ""
        return Quantity("num", q.value, percent=q.percent, currency=currency, unit=unit,
                        grouped=q.grouped)  # fmt: skip
    return q


def _measure_after(low: str, end: int) -> tuple[str, int]:
    """The unit of measure or currency word right after a number, and where it ends.

    ``("", end)`` when none follows ("4 birds": a count noun).

    >>> _measure_after("12 kilometres long", 2), _measure_after("4 birds", 1)
    (('km', 13), ('', 1))
    >>> _measure_after("10 m2", 2)[0], _measure_after("10 m^3", 2)[0], _measure_after("5 eur", 1)[0]
    ('m2', 'm3', '€')
    """
    m = _UNIT_WORD.match(low, end)
    if m is None:
        return "", end
    key, stop = _unit_key(m.group(1)), m.end()
    power = _UNIT_POWER.match(low, stop)
    if power is not None:  # "10 m²" (prepared as "m2") is an area, "m^3" a volume
        key, stop = key + power.group(1), power.end()
    if key == "°":  # "20 degrees Celsius"
        scale = _UNIT_WORD.match(low, stop)
        if scale is not None and _unit_key(scale.group(1)) in ("°c", "°f"):
            key, stop = _unit_key(scale.group(1)), scale.end()
    return (key, stop) if key in _MEASURES or (len(key) == 1 and key in _CURRENCY) else ("", end)


_UNIT_POWER = re.compile(r"\^?([23])(?![\w.])")
_COMPOUND = re.compile(r"[\s,]*(?:and\s+)?\.?\d")
"""Another number right after a unit: a compound measure ("5 ft 6 in", "2 h 30 min")."""


def read_auto_number(region: str) -> Quantity | None:
    """A short answer that *is* a number, date or time ("4 birds", "about 7:45", "$3.50").

    The number must open the answer (after "there are", "about", "it's", ...), and only its
    unit noun and filler ("in total", "in the image") may follow in its sentence.

    Returns:
        The quantity with its unit noun, or None when the answer is not a number form.

    Raises:
        Hedge: When it is a range, a choice between numbers or a bound.

    >>> read_auto_number("There are 4 red birds in the tree.").unit
    'birds'
    """
    low = lower_same(region)
    lead = _AUTO_LEAD.match(low)
    m = _SCAN.match(low, lead.end() if lead else 0)
    if m is None or m.group("ord") or m.group("no") == "no":
        return None
    sentence = _SENTENCE_END.search(low, m.end())
    stop = sentence.start() if sentence else len(low)
    if _hedged(low[:stop], m.start(), m.end()):
        raise Hedge
    q, end = _quantity(m, region)
    if q is None:
        return None
    unit, pos = _unit_after(low, end) if q.kind in ("num", "year") else ("", end)
    if pos < 0 or pos > stop or not _FILLER.match(low, pos, stop):
        return None
    if next(_tokens(low, pos, stop), None) is not None:
        return None
    return _with_unit(q, unit)


def format_quantity(q: Quantity, *, with_unit: bool) -> str:
    """Canonical text of a quantity.

    A quantity in the year range keeps a thousands separator (``1,987``) so it never reads as
    a year; ``with_unit`` keeps the currency and unit noun (``auto``).

    >>> format_quantity(Quantity("num", Decimal("4100"), unit="birds"), with_unit=True)
    '4100 birds'
    >>> format_quantity(Quantity("num", Decimal("1987")), with_unit=False)
    '1,987'
    """
    if q.kind in ("date", "time", "decade"):
        return q.key
    if q.kind == "year":
        return str(int(q.value))
    text = _plain(q.value)
    bare = not (q.percent or (with_unit and (q.currency or q.unit)))
    if bare and text.isdigit() and len(text) == 4 and YEAR_MIN <= q.value <= YEAR_MAX:
        text = f"{int(q.value):,}"
    if q.percent:
        text += "%"
    if with_unit:
        if q.currency:
            text = f"-{q.currency}{text[1:]}" if text.startswith("-") else q.currency + text
        if q.unit:
            text += f" {q.unit}"
    return text


def parse_canonical(text: str) -> Quantity | None:
    """Read a canonical answer back as a quantity; None when it is not one.

    >>> parse_canonical("1987").kind, parse_canonical("1,987").kind, parse_canonical("7:45").key
    ('year', 'num', '07:45')
    >>> parse_canonical("$3.5 apples")
    Quantity(kind='num', value=Decimal('3.5'), key='', percent=False, currency='$', unit='apples', grouped=False)
    """  # noqa: E501
    if _C_DATE.fullmatch(text):
        return Quantity("decade" if text.endswith("s") else "date", key=text)
    m = _C_TIME.fullmatch(text)
    if m:
        try:
            return Quantity("time", key=_time_key(int(m[1]), int(m[2]), m[3], None))
        except Hedge:
            return None
    m = _C_NUM.fullmatch(text)
    if m is None or len(m["int"]) > _MAX_DIGITS + 8:
        return None
    value = Decimal(m["int"].replace(",", "") + (m["frac"] or ""))
    if m["neg"]:
        value = -value
    grouped = "," in m["int"]
    if not (grouped or m["frac"] or m["pct"] or m["cur"] or m["unit"] or m["neg"]):
        if len(m["int"]) == 4 and YEAR_MIN <= value <= YEAR_MAX:
            return Quantity("year", value)
    return Quantity(
        "num",
        value,
        percent=bool(m["pct"]),
        currency=m["cur"] or "",
        unit=m["unit"] or "",
        grouped=grouped,
    )


def _unit_key(unit: str) -> str:
    """The comparable form of a unit noun: aliases joined, plurals made singular.

    >>> _unit_key("Birds"), _unit_key("centimeters"), _unit_key("dollars"), _unit_key("buses")
    ('bird', 'cm', '$', 'bus')
    """
    word = unit.lower()
    if word in _UNIT_ALIAS:
        return _UNIT_ALIAS[word]
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes", "uses")):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    return _UNIT_ALIAS.get(word, word)


def _close(x: Decimal, y: Decimal, rel_tol: float, gold: bool) -> bool:
    a, b = float(x), float(y)
    if gold:  # ChartQA relaxed accuracy: relative to the gold value; exact at zero
        return a == b if b == 0 else abs(a - b) <= rel_tol * abs(b) + 1e-12 * abs(b)
    return math.isclose(a, b, rel_tol=rel_tol)  # relative only: 1e-15 is not 1e-20


def quantities_match(a: Quantity, b: Quantity, *, rel_tol: float, gold: bool = False) -> bool:
    """Whether two quantities say the same thing.

    Exact kinds (year, date, time, decade) must be equal; a year equals a plain number only at
    the same value. Numbers compare within ``rel_tol``. Currencies and unit nouns must agree
    when both answers give one (``4 birds`` is not ``4 cars``; ``4`` is ``4 birds``). A
    percent ``p`` equals a plain ``x`` when ``x`` is close to ``p`` or to ``p/100``. With
    ``gold=True`` the tolerance is relative to ``b``, the gold value (ChartQA), and exact when
    it is zero.

    >>> q = parse_canonical
    >>> quantities_match(q("1987"), q("1988"), rel_tol=0.05)
    False
    >>> quantities_match(q("100"), q("104"), rel_tol=0.05)
    True
    >>> quantities_match(q("30%"), q("0.3"), rel_tol=0.05)
    True
    >>> quantities_match(q("4 birds"), q("4 cars"), rel_tol=0.05)
    False
    """
    if a.kind in ("date", "time", "decade") or b.kind in ("date", "time", "decade"):
        return a.kind == b.kind and a.key == b.key
    ua = _unit_key(a.currency or a.unit) if (a.currency or a.unit) else ""
    ub = _unit_key(b.currency or b.unit) if (b.currency or b.unit) else ""
    if ua and ub and ua != ub:
        da, db = _MEASURES.get(ua), _MEASURES.get(ub)
        if da is None or db is None or da[0] != db[0] or a.percent or b.percent:
            return False
        # one dimension, two units: "1 km" is "1000 m"
        return _close(a.value * Decimal(da[1]), b.value * Decimal(db[1]), rel_tol, gold)
    if a.kind == "year" or b.kind == "year":
        return a.value == b.value and a.percent == b.percent
    if a.percent == b.percent:
        return _close(a.value, b.value, rel_tol, gold)
    x = b if a.percent else a
    if x.unit or x.currency:
        return False
    if b.percent:  # b is p%: a is p or p/100
        return _close(a.value, b.value, rel_tol, gold) or _close(
            a.value, b.value / 100, rel_tol, gold
        )
    return _close(a.value, b.value, rel_tol, gold) or _close(a.value / 100, b.value, rel_tol, gold)
