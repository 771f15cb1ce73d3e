import pytest

from mai_graph import UNKNOWN, ConfigError, answers_match, extract_answer
from mai_graph.answers import canonical_match, resolve_kind, strip_think

OPTS = ["a red car", "a blue bus", "a green bike", "a yellow truck"]

CHOICE_CASES = [
    ("B", "B"),
    ("b", "B"),
    ("(B)", "B"),
    ("B.", "B"),
    ("B)", "B"),
    ("B: a blue bus", "B"),
    ("**B**", "B"),
    ("The answer is B", "B"),
    ("The answer is (C).", "C"),
    ("Answer: D", "D"),
    ("Option A", "A"),
    ("I think the correct choice is C because of the color.", "C"),
    ("a blue bus", "B"),
    ("It is a green bike.", "C"),
    ("The Yellow Truck", "D"),
    ("<think>maybe (A) or B?</think> C", "C"),
    ("<think>A A A", UNKNOWN),
    ("E", UNKNOWN),  # out of range for four options
    ("", UNKNOWN),
    ("I cannot tell from the image", UNKNOWN),
    ("red car or blue bus", UNKNOWN),
]


@pytest.mark.parametrize(("text", "want"), CHOICE_CASES)
def test_choice_extraction(text, want):
    assert extract_answer(text, "choice", OPTS) == want


def test_choice_prefers_longer_option_text():
    assert extract_answer("the red car", "choice", ["red", "red car"]) == "B"


YES_NO_CASES = [
    ("yes", "yes"),
    ("Yes.", "yes"),
    ("YES, it is", "yes"),
    ("no", "no"),
    ("No, there is none.", "no"),
    ("The answer is yes", "yes"),
    ("True", "yes"),
    ("false", "no"),
    ("I believe so, yes.", "yes"),
    ("maybe", UNKNOWN),
    ("yes and no", UNKNOWN),
]


@pytest.mark.parametrize(("text", "want"), YES_NO_CASES)
def test_yes_no_extraction(text, want):
    assert extract_answer(text, "yes_no") == want


NUMBER_CASES = [
    ("7", "7"),
    ("seven", "7"),
    ("Seven apples", "7"),
    ("twenty-one", "21"),
    ("three hundred", "300"),
    ("1,200", "1200"),
    ("$3.50", "3.5"),
    ("45%", "45%"),
    ("12 cm", "12"),
    ("-4", "-4"),
    ("1/2", "0.5"),
    ("There are 3 cats and 2 dogs, so the answer is 5.", "5"),
    ("I count 4 birds in total: 4", "4"),
    ("none", "0"),
    ("lots", UNKNOWN),
]


@pytest.mark.parametrize(("text", "want"), NUMBER_CASES)
def test_number_extraction(text, want):
    assert extract_answer(text, "number") == want


TEXT_CASES = [
    ("A Dog.", "dog"),
    ("the dog", "dog"),
    ("Two dogs!", "2 dogs"),
    ("The answer is: a red CAR", "red car"),
    ("3.5 meters", "3.5 meters"),
    ("<think>cat?</think>dog", "dog"),
    ("...", UNKNOWN),
]


@pytest.mark.parametrize(("text", "want"), TEXT_CASES)
def test_text_normalization(text, want):
    assert extract_answer(text, "text") == want


AUTO_CASES = [
    ("Yes.", None, "yes"),
    ("no", None, "no"),
    ("7", None, "7"),
    ("seven", None, "7"),
    ("7 apples", None, "7 apples"),
    ("A dog", None, "dog"),
    ("(B)", ["x", "y"], "B"),
    ("y", ["x", "y"], "B"),
]


@pytest.mark.parametrize(("text", "options", "want"), AUTO_CASES)
def test_auto_kind(text, options, want):
    assert extract_answer(text, "auto", options) == want


MATCH_CASES = [
    ("B", "(B)", "choice", OPTS, True),
    ("The answer is B", "a blue bus", "choice", OPTS, True),
    ("A", "B", "choice", OPTS, False),
    ("yes", "Yes, it is.", "yes_no", None, True),
    ("yes", "no", "yes_no", None, False),
    ("100", "104", "number", None, True),
    ("100", "106", "number", None, False),
    ("seven", "7", "number", None, True),
    ("0", "0.0", "number", None, True),
    ("a dog", "The dog.", "text", None, True),
    ("dog", "cat", "text", None, False),
    ("seven", "7", "auto", None, True),
    ("Yes", "yes.", "auto", None, True),
    ("I cannot tell", "I cannot tell", "text", None, False),
    ("??", "??", "auto", None, False),
]


@pytest.mark.parametrize(("a", "b", "kind", "options", "want"), MATCH_CASES)
def test_answers_match(a, b, kind, options, want):
    assert answers_match(a, b, kind, options=options) is want
    assert answers_match(b, a, kind, options=options) is want


def test_number_tolerance_is_configurable():
    assert answers_match("100", "109", "number", rel_tol=0.1)
    assert not answers_match("100", "101", "number", rel_tol=0.0)
    with pytest.raises(ConfigError, match="rel_tol"):
        answers_match("1", "1", "number", rel_tol=1.5)


ALL = [t for t, _ in CHOICE_CASES + YES_NO_CASES + NUMBER_CASES + TEXT_CASES]


@pytest.mark.parametrize("kind", ["choice", "yes_no", "number", "text", "auto"])
def test_extraction_is_idempotent(kind):
    options = OPTS if kind == "choice" else None
    for text in ALL:
        once = extract_answer(text, kind, options)
        assert extract_answer(once, kind, options) == once, text


def test_unknown_never_matches():
    assert not canonical_match(UNKNOWN, UNKNOWN)


def test_bad_kind_names_allowed_values():
    with pytest.raises(ConfigError, match="answer kind must be one of") as err:
        extract_answer("x", "letters")
    assert err.value.parameter == "answer_kind"
    assert resolve_kind("auto", ["x", "y"]) == "choice"


def test_non_string_text_is_refused():
    with pytest.raises(ConfigError, match="must be a str"):
        extract_answer(None, "text")  # type: ignore[arg-type]


def test_strip_think_unclosed():
    assert strip_think("<think>never closed") == ""


def test_normalize_options_interface():
    from mai_graph.answers import normalize_options

    assert normalize_options(None) is None
    assert normalize_options(["x", "y"]) == {"A": "x", "B": "y"}
    assert normalize_options({"b": "x", "C": 3.0}) == {"B": "x", "C": "3"}
    for bad in ("AB", ["x"], {"A": "x", "B": None}, {"AA": "x", "B": "y"}, ["x", " "]):
        with pytest.raises(ConfigError) as err:
            normalize_options(bad)
        assert err.value.parameter == "options"
    with pytest.raises(ConfigError, match="2 to 26"):
        normalize_options([str(i) for i in range(27)])


def test_mapping_options_keep_letters():
    opts = {"B": "a cat", "C": "a dog"}
    assert extract_answer("a dog", "choice", opts) == "C"
    assert extract_answer("A", "choice", opts) == UNKNOWN


def test_match_gold_interface():
    from mai_graph.answers import match_gold

    assert match_gold("The answer is C.", "C", options=["x", "y", "z"])
    assert match_gold("Unknown", "unknown", "text")
    assert UNKNOWN != "unknown"
