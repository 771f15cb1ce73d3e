"""The public API of mai_graph.answers: options, kinds, errors, canonical forms, scoring.

Reading rules per failure class are table-tested in test_answers_cases.py; speed in
test_answers_speed.py.
"""

import math
from collections import OrderedDict

import pytest

from mai_graph import UNKNOWN, ConfigError, answers_match, extract_answer
from mai_graph.answers import (
    MAX_OPTIONS,
    canonical_gold,
    canonical_match,
    match_gold,
    normalize_options,
    resolve_kind,
    strip_think,
)

CARS = ["a red car", "a blue bus", "a green bike", "a yellow truck"]

# ---------------------------------------------------------------------------------------------
# 4. Options as a mapping (and as a list), validated up front.

VALID_OPTIONS = [
    (["cat", "dog"], {"A": "cat", "B": "dog"}),
    (("cat", "dog", "bird"), {"A": "cat", "B": "dog", "C": "bird"}),
    ({"A": "cat", "B": "dog"}, {"A": "cat", "B": "dog"}),
    ({"a": "cat", "b": "dog"}, {"A": "cat", "B": "dog"}),
    ({"B": "cat", "C": "dog"}, {"B": "cat", "C": "dog"}),
    ({"D": "cat", "A": "dog"}, {"D": "cat", "A": "dog"}),  # the mapping's order is kept
    ({" C ": "cat", "E": "dog"}, {"C": "cat", "E": "dog"}),
    (OrderedDict([("A", "x"), ("B", "y")]), {"A": "x", "B": "y"}),
    ([3, 4.0, 5.5], {"A": "3", "B": "4", "C": "5.5"}),
    ({"A": 3.0, "B": -2}, {"A": "3", "B": "-2"}),
    (["  cat ", "dog"], {"A": "cat", "B": "dog"}),
    ([True, False], {"A": "True", "B": "False"}),
    ([f"o{i}" for i in range(26)], {chr(65 + i): f"o{i}" for i in range(26)}),
    (None, None),
]


@pytest.mark.parametrize(("options", "want"), VALID_OPTIONS)
def test_normalize_options(options, want):
    got = normalize_options(options)
    assert got == want
    if got is not None:
        assert list(got) == list(want)
        assert normalize_options(got) == got  # normalizing again changes nothing


INVALID_OPTIONS = [
    ("cat, dog", "list of texts or a mapping"),
    (b"ab", "list of texts or a mapping"),
    ({"cat", "dog"}, "list of texts or a mapping"),
    (42, "list of texts or a mapping"),
    (["cat"], "need 2 to 26 options, got 1"),
    ([], "need 2 to 26 options, got 0"),
    ({}, "need 2 to 26 options, got 0"),
    ([f"o{i}" for i in range(27)], "need 2 to 26 options, got 27"),
    ({"A": "cat", "B": None}, "option B is None"),
    (["cat", None], "option B is None"),
    (["cat", float("nan")], "option B is nan"),
    (["cat", math.inf], "option B is inf"),
    (["cat", " "], "option B is empty"),
    (["cat", ""], "option B is empty"),
    (["cat", ["dog"]], "option B must be a string or a number"),
    ({"AA": "cat", "B": "dog"}, "single letters A-Z, got 'AA'"),
    ({"1": "cat", "B": "dog"}, "single letters A-Z, got '1'"),
    ({1: "cat", 2: "dog"}, "single letters A-Z, got 1"),
    ({"Ä": "cat", "B": "dog"}, "single letters A-Z"),
    ({"a": "cat", "A": "dog"}, "letter A is given twice"),
]


@pytest.mark.parametrize(("options", "message"), INVALID_OPTIONS)
def test_invalid_options_are_refused_up_front(options, message):
    with pytest.raises(ConfigError, match="options|option") as err:
        normalize_options(options)
    assert message in str(err.value)
    assert err.value.parameter == "options"
    assert err.value.fix


@pytest.mark.parametrize("options", [o for o, _ in INVALID_OPTIONS])
def test_every_entry_point_validates_options(options):
    for call in (
        lambda: extract_answer("B", "choice", options),
        lambda: answers_match("B", "B", "choice", options=options),
        lambda: match_gold("B", "B", "choice", options=options),
        lambda: canonical_gold("B", "choice", options),
    ):
        with pytest.raises(ConfigError):
            call()


def test_max_options_is_one_per_letter():
    assert MAX_OPTIONS == 26


MAPPING_CASES = [
    # (text, options, letter): a mapping keeps its letters
    ("a dog", {"B": "a cat", "C": "a dog"}, "C"),
    ("B", {"B": "a cat", "C": "a dog"}, "B"),
    ("A", {"B": "a cat", "C": "a dog"}, UNKNOWN),
    ("The answer is (C).", {"B": "a cat", "C": "a dog"}, "C"),
    ("dog", {"A": "cat", "B": "dog", "C": "bird", "D": "fish"}, "B"),
    ("4", {"A": 3, "B": 4, "C": 5}, "B"),
    ("four", {"A": 3, "B": 4.0, "C": 5}, "B"),
    ("The answer is 5.", [3, 4, 5], "C"),
    ("Z", {"Y": "cat", "Z": "dog"}, "Z"),
    ("cat", {"d": "cat", "a": "dog"}, "D"),
]


@pytest.mark.parametrize(("text", "options", "want"), MAPPING_CASES)
def test_mapping_options_keep_their_letters(text, options, want):
    assert extract_answer(text, "choice", options) == want
    assert extract_answer(text, "auto", options) == want


def test_mapping_and_list_read_the_same():
    as_list = ["a cat", "a dog", "a bird"]
    as_map = {"A": "a cat", "B": "a dog", "C": "a bird"}
    for text in ("B", "a dog", "The answer is C.", "a bird, not a cat", "A or B"):
        assert extract_answer(text, "choice", as_list) == extract_answer(text, "choice", as_map)
    assert answers_match("a dog", "B", options=as_map)
    assert match_gold("a dog", "B", "choice", options=as_map)


# ---------------------------------------------------------------------------------------------
# Kinds and errors.


def test_resolve_kind():
    assert resolve_kind("auto", ["x", "y"]) == "choice"
    assert resolve_kind("auto", {"A": "x", "B": "y"}) == "choice"
    assert resolve_kind("auto") == "auto"
    assert resolve_kind("number", ["x", "y"]) == "number"


def test_bad_kind_names_allowed_values():
    with pytest.raises(ConfigError, match="answer kind must be one of") as err:
        extract_answer("x", "letters")
    assert err.value.parameter == "answer_kind"


def test_non_string_text_is_refused():
    with pytest.raises(ConfigError, match="must be a str"):
        extract_answer(None, "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("rel_tol", [-0.1, 1.0, 1.5])
def test_tolerance_is_validated(rel_tol):
    for call in (
        lambda: answers_match("1", "1", "number", rel_tol=rel_tol),
        lambda: canonical_match("1", "1", rel_tol=rel_tol),
        lambda: match_gold("1", "1", "number", rel_tol=rel_tol),
    ):
        with pytest.raises(ConfigError, match="rel_tol") as err:
            call()
        assert err.value.parameter == "rel_tol"


def test_number_tolerance_is_configurable():
    assert answers_match("100", "109", "number", rel_tol=0.1)
    assert not answers_match("100", "101", "number", rel_tol=0.0)
    assert match_gold("109", "100", "number", rel_tol=0.1)
    assert not match_gold("101", "100", "number", rel_tol=0.0)


def test_strip_think():
    assert strip_think("<think>never closed") == ""
    assert strip_think("<think>a</think>B<think>c</think>") == "B"
    assert strip_think("reasoning only closed</think> C") == " C"
    assert strip_think("<THINK>x</THINK>y") == "y"


# ---------------------------------------------------------------------------------------------
# Canonical forms: what the graph stores and compares again.

CANONICAL_FORMS = [
    # (text, kind, canonical)
    ("B", "choice", "B"),
    ("yes", "yes_no", "yes"),
    ("7", "number", "7"),
    ("-0.25", "number", "-0.25"),
    ("4100", "number", "4100"),
    ("30%", "number", "30%"),
    ("1987", "number", "1987"),
    ("1,987", "number", "1,987"),
    ("1987-03-05", "number", "1987-03-05"),
    ("1987-03", "number", "1987-03"),
    ("--03-05", "number", "--03-05"),
    ("1990s", "number", "1990s"),
    ("07:45", "number", "07:45"),
    ("19:45:30", "number", "19:45:30"),
    ("4 birds", "auto", "4 birds"),
    ("$3.5", "auto", "$3.5"),
    ("-$5", "auto", "-$5"),
    ("1,987 people", "auto", "1987 people"),
    ("1987 people", "auto", "1987 people"),
    ("red car", "text", "red car"),
    ("unknown", "text", "unknown"),
    ("dont", "text", "don't"),
]


@pytest.mark.parametrize(("text", "kind", "want"), CANONICAL_FORMS)
def test_canonical_forms_read_back_unchanged(text, kind, want):
    options = CARS if kind == "choice" else None
    assert extract_answer(text, kind, options) == want
    assert extract_answer(want, kind, options) == want
    assert canonical_match(want, want)


CANONICAL_MATCH = [
    ("100", "104", True),
    ("100", "106", False),
    ("1987", "1988", False),
    ("1987", "1,987", True),
    ("1,987", "1,990", True),
    ("07:45", "08:45", False),
    ("07:45", "07:45", True),
    ("1987-03-05", "1987-03-05", True),
    ("1987-03-05", "1987-03-06", False),
    ("4 birds", "4 cars", False),
    ("4 birds", "4 bird", True),
    ("4 birds", "4", True),
    ("$5", "5 dollars", True),
    ("$5", "€5", False),
    ("30%", "0.3", True),
    ("30%", "30", True),
    ("30%", "30 birds", False),
    ("B", "B", True),
    ("B", "C", False),
    ("red car", "red car", True),
    ("red car", "red cars", False),
    ("yes", "yes", True),
    (UNKNOWN, UNKNOWN, False),
    (UNKNOWN, "B", False),
    ("unknown", "unknown", True),
]


@pytest.mark.parametrize(("a", "b", "want"), CANONICAL_MATCH)
def test_canonical_match(a, b, want):
    assert canonical_match(a, b) is want
    assert canonical_match(b, a) is want


# ---------------------------------------------------------------------------------------------
# Scoring against gold answers.

CANONICAL_GOLD = [
    ("C", "choice", CARS, "C"),
    ("(c)", "choice", CARS, "C"),
    ("a green bike", "choice", CARS, "C"),
    ("Yes", "yes_no", None, "yes"),
    ("no", "yes_no", None, "no"),
    ("1987", "number", None, "1987"),
    ("12%", "number", None, "12%"),
    ("1,234", "number", None, "1234"),
    ("1990-2000", "number", None, "1990 2000"),
    ("u.s.", "text", None, "us"),
    ("unknown", "text", None, "unknown"),
    ("Unknown", "auto", None, "unknown"),
    ("not sure", "text", None, "not sure"),
    ("4 birds", "auto", None, "4 birds"),
]


@pytest.mark.parametrize(("gold", "kind", "options", "want"), CANONICAL_GOLD)
def test_canonical_gold(gold, kind, options, want):
    assert canonical_gold(gold, kind, options) == want


BAD_GOLD = [
    ("", "text", None, "non-empty"),
    ("   ", "auto", None, "non-empty"),
    ("E", "choice", CARS, "cannot be read as a choice answer"),
    ("maybe", "yes_no", None, "cannot be read as a yes_no answer"),
    ("lots", "number", None, "cannot be read as a number answer"),
]


@pytest.mark.parametrize(("gold", "kind", "options", "message"), BAD_GOLD)
def test_unreadable_gold_is_a_config_error(gold, kind, options, message):
    with pytest.raises(ConfigError, match=message) as err:
        match_gold("B", gold, kind, options=options)
    assert err.value.parameter == "gold"


def test_gold_that_is_not_a_string_is_refused():
    with pytest.raises(ConfigError, match="gold answer must be a non-empty string"):
        canonical_gold(None, "text")  # type: ignore[arg-type]


def test_match_gold_shares_the_gates_reading():
    cases = [
        ("The answer is (C).", "C", "choice", CARS),
        ("I'd go with C", "C", "choice", CARS),
        ("There is no doubt.", "yes", "yes_no", None),
        ("4.1k", "4100", "number", None),
        ("The U.S.", "u.s.", "text", None),
        ("seven apples", "7", "auto", None),
    ]
    for pred, gold, kind, options in cases:
        assert match_gold(pred, gold, kind, options=options)
        assert answers_match(pred, gold, kind, options=options)


# ---------------------------------------------------------------------------------------------
# docs/answers.md states its examples; they must stay true.


def _doc_examples():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "answers.md").read_text()
    block = re.search(r"<!-- begin:examples -->\n(.*?)<!-- end:examples -->", text, re.DOTALL)
    assert block, "docs/answers.md lost its examples block"
    rows = []
    for line in block.group(1).splitlines()[2:]:
        kind, output, canonical = (cell.strip().strip("`") for cell in line.strip("|").split("|"))
        rows.append((kind, output, canonical))
    return rows


@pytest.mark.parametrize(("kind", "output", "canonical"), _doc_examples())
def test_docs_examples_hold(kind, output, canonical):
    options = CARS if kind == "choice" else None
    assert extract_answer(output, kind, options) == canonical


# -- numbers that must not agree by accident (scientific notation, powers) ----------------------

NOT_EQUAL = [
    ("1e5", "1e9"), ("1e5", "1"), ("10^5", "10"), ("2^10", "2"), ("1e400", "1e401"),
    ("2^400", "2^401"), ("x = 1e5", "1e9"), ("1.5e-2", "1.5"), ("3e+2", "3"), ("5E3", "5"),
    # signs
    ("-5", "5"), ("\u22125", "5"), ("+5", "-5"), ("-0.5", "0.5"), ("-$3", "$3"),
    # separators: a comma, period or space that is not a thousands group
    ("1,5", "15"), ("1,5", "1"), ("1,50", "150"), ("1.2.3", "1.2"), ("3.14.15", "3.14"),
    ("1.234,5", "1.234"), ("1.234,5", "1234"), ("1 000 000", "1"), ("1'000", "1"),
    ("1_000", "1"), ("12.03.2024", "12.03"), ("1,234,5", "1234"),
    # scale words and units next to the number
    ("12 km", "12 m"), ("12 kg", "12 g"), ("5 cm", "5 mm"), ("3 hours", "3 minutes"),
    ("12\u00b0C", "12\u00b0F"), ("20 degrees Celsius", "20 degrees Fahrenheit"),
    ("10 m\u00b2", "10 m"), ("5 million", "5 billion"), ("5M", "5m"), ("10k", "10"),
    ("3 dozen", "3"), ("a dozen", "1"), ("5 thousand", "5"), ("$5", "5\u20ac"),
    ("$5", "\u20ac5"), ("1 mile", "1 km"), ("2 lb", "2 kg"), ("500 ml", "500 l"),
    ("1 day", "1 week"),
    # powers written with superscripts and products
    ("10\u00b3", "103"), ("10\u00b3", "10"), ("5 \u00d7 10^3", "5"), ("5x10^3", "5"),
    ("5\u00b710\u00b3", "5"), ("2.5 \u00d7 10\u207b\u00b3", "2.5"),
    # fractions and mixed numbers
    ("2 1/2", "2"), ("2 1/2", "21/2"), ("1 \u00bd", "1"), ("1\u00bd", "11/2"),
    ("\u00bd", "1"), ("1/2", "2"), ("3/4", "34"),
    # ranges are no single number
    ("3-5", "3"), ("3\u20135", "5"), ("10 to 20", "10"), ("between 3 and 5", "3"),
    ("5 or 6", "5"), ("3 through 5", "3"), ("3 thru 5", "3"), ("3 until 5", "3"), ("3 & 5", "3"),
    ("1 in 5", "1"), ("one in five", "1"), ("3\u20115", "3"), ("3\u301c5", "3"),
    # a statement before a signed number keeps its sign
    ("The answer is -5.", "The answer is 5."), ("\\boxed{-3}", "\\boxed{3}"),
    ("Answer: -1e5", "Answer: 1e5"), ("Answer: -5%", "Answer: 5%"), ("Answer: -$5", "Answer: $5"),
    ("minus 5", "5"), ("negative 5", "5"), ("\u20115", "5"), ("\u20105", "5"),
    # a full stop after the number ends the sentence, not the number
    ("The answer is 1e5.", "The answer is 1e9."), ("It is 10^5.", "It is 10^6."),
    ("It is 1 000.", "It is 1."), ("It is 1'000.", "1"), ("It is 1 1/2.", "1"),
    # LaTeX and code notation
    ("\\frac{1}{2}", "2"), ("\\dfrac{3}{4}", "4"), ("10^{5}", "10"), ("1 \\times 10^{5}", "1"),
    ("$10^{5}$", "$10"), ("10**5", "105"), ("2**10", "210"),
    # scale words
    ("5 lakh", "5"), ("5 crore", "5"), ("2 hundred", "2"), ("5 k", "5"), ("5\u4e07", "5"),
    ("5\u4ebf", "5"), ("$5 M", "$5"), ("$5 K", "$5"), ("2 dozens", "2"),
    # more units
    ("5 minutes", "5 months"), ("5 GB", "5 MB"), ("60 mph", "60 km/h"), ("5 EUR", "$5"),
    ("5 tons", "5 kg"), ("10 m\u00b3", "10 m"), ("10 m^2", "10 m"),
    # tiny numbers compare relatively
    ("1e-15", "1e-20"), ("3e-13", "0"),
    # fractions and ordinals in words, compound measures
    ("half a dozen", "12"), ("one and a half", "1"), ("two thirds", "2"), ("twenty-first", "20"),
    ("three quarters", "3"), ("5 ft 6 in", "5 ft"), ("2 h 30 min", "2 h"), ("1 m 50 cm", "1 m"),
    ("5'6\"", "5"),
    # other scripts and notations
    ("\u0665\u066b\u0665", "5"), ("\u0665\u066c\u0660\u0660\u0660", "5"), ("1\u200b000", "1"),
    ("0x10", "0x20"),
    # a third independent probe: sub-units, words that change the number, eras, huge signed
    ("5 cents", "$5"), ("5 pence", "£5"), ("5 bps", "5%"), ("5 basis points", "5%"),
    ("5‰", "5%"), ("5 per mille", "5%"), ("5 below zero", "5"), ("5 squared", "5"),
    ("5 cubed", "5"), ("5 to the power of 3", "5"), ("not 5", "5"), ("isn't 5", "5"),
    ("except 5", "5"), ("<5", "5"), (">5", "5"), ("≤5", "5"), ("1987 BC", "1987"),
    ("1987 BCE", "1987 CE"), ("500 BC", "500"), ("-1e308", "1e308"), ("−1e400", "1e400"),
    ("-" + "9" * 40, "9" * 40), ("-1e400%", "1e400%"),
]  # fmt: skip
SIGNED_TEXT = [("-5", "5"), ("-3 degrees", "3 degrees"), ("<5", "5"), ("−5 m", "5 m")]


@pytest.mark.parametrize("a, b", SIGNED_TEXT)
def test_a_sign_or_comparison_before_a_number_is_kept_in_text_answers(a, b):
    """VQA's normalization deletes '-' and '<': a text answer keeps them as words."""
    from mai_graph.answers import answers_match, match_gold

    assert not answers_match(a, b, "text") and not match_gold(a, b, "text")
    assert answers_match(a, a, "text") and match_gold(a, a, "text")


def test_a_run_whose_models_answer_minus_5_and_5_as_text_does_not_end_at_the_gate():
    from mai_graph import ScriptedBackend, run

    small = ScriptedBackend({"short": "-5", "cot": "it is 5", "s2": "5"}, name="small")
    large = ScriptedBackend({"short": "5", "answer": "5"}, name="large")
    result = run("What is the value?", small=small, large=large, answer_kind="text")
    assert result.route != "agree"


EQUAL = [
    ("1e5", "100000"), ("2.5e3", "2500"), ("1E-3", "0.001"), ("10^5", "100000"),
    ("7e2", "700"), ("3e+2", "300"), ("1e05", "100,000"), ("2^10", "1024"),
    ("the answer is 5e3", "5000"), ("1.5e-2", "0.015"),
    ("\u22125", "-5"), ("1 000 000", "1000000"), ("1'000", "1000"), ("1_000", "1,000"),
    ("10\u00b3", "1000"), ("5 \u00d7 10^3", "5000"), ("5\u00b710\u00b3", "5,000"),
    ("2.5 \u00d7 10\u207b\u00b3", "0.0025"), ("2 1/2", "2.5"), ("1 \u00bd", "1.5"),
    ("1\u00bd", "1.5"), ("\u00bd", "0.5"), ("3 dozen", "36"), ("1 km", "1000 m"),
    ("12 km", "12 kilometers"), ("2 h", "120 minutes"), ("12", "12 km"),
    ("1.5 inches", "1.5 inch"), ("5 kg", "5000 g"), ("$5", "5 dollars"),
    ("\uff11\uff12", "12"),
    ("1 m\u00b2", "10000 cm\u00b2"), ("0.5", "\\frac{1}{2}"), ("1e5", "10^{5}"),
    ("100000", "1 \\times 10^{5}"), ("500000", "5 lakh"), ("200", "2 hundred"),
    ("5500", "\u0665\u066c\u0665\u0660\u0660"), ("5.5", "\u0665\u066b\u0665"),
    ("1000", "1\u200b000"), ("The answer is -5.", "-5"), ("1e5", "The answer is 1e5."),
    ("5 GB", "5000 MB"), ("36 km/h", "10 m/s"),
]  # fmt: skip


@pytest.mark.parametrize("a, b", NOT_EQUAL)
@pytest.mark.parametrize("kind", ["number", "auto"])
def test_scientific_notation_and_powers_keep_their_scale(a, b, kind):
    from mai_graph.answers import answers_match

    assert not answers_match(a, b, kind) and not answers_match(b, a, kind)


@pytest.mark.parametrize("a, b", EQUAL)
@pytest.mark.parametrize("kind", ["number", "auto"])
def test_scientific_notation_reads_as_its_value(a, b, kind):
    from mai_graph.answers import answers_match

    assert answers_match(a, b, kind) and answers_match(b, a, kind)


def test_a_run_whose_models_answer_1e5_and_1e9_does_not_end_at_the_gate():
    """The gate compares canonical answers: two different numbers are a disagreement."""
    from mai_graph import ScriptedBackend, run

    small = ScriptedBackend({"short": "1e5", "cot": "about 1e9", "s2": "1e9"}, name="small")
    large = ScriptedBackend({"short": "1e9", "answer": "1e9"}, name="large")
    result = run("How many grains of sand?", small=small, large=large, answer_kind="number")
    assert result.route != "agree"
    assert result.canonical == "1000000000"


DIFFERENT = [("12 km", "12 m"), ("1,5", "15"), ("10³", "103"), ("2 1/2", "2")]


@pytest.mark.parametrize(("small_says", "large_says"), DIFFERENT)
def test_different_numbers_never_end_a_run_at_the_gate(small_says, large_says):
    """Through the Python door: two readings of different numbers are a disagreement."""
    from mai_graph import ScriptedBackend, run

    small = ScriptedBackend({"short": small_says, "cot": "so", "s2": small_says}, name="small")
    large = ScriptedBackend({"short": large_says, "answer": large_says}, name="large")
    for kind in ("number", "auto"):
        assert run("How far is it?", small=small, large=large, answer_kind=kind).route != "agree"


@pytest.mark.parametrize(("a", "b"), [("-5", "minus 5"), ("45 in 2015", "45")])
def test_number_kind_reads_signs_in_words_and_a_value_with_its_year(a, b):
    from mai_graph.answers import answers_match

    assert answers_match(a, b, "number") and answers_match(b, a, "number")
