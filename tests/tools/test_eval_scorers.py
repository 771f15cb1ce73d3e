import pytest

from mai_graph.answers import UNKNOWN
from mai_graph.eval.scorers import kind_metrics, pope_metrics, score, vqa_accuracy


def test_pope_metrics_on_a_hand_made_confusion_matrix():
    # 40 TP, 10 FN (8 said no, 2 unreadable), 5 FP, 45 TN.
    pairs = (
        [("yes", "yes")] * 40
        + [("no", "yes")] * 8
        + [(UNKNOWN, "yes")] * 2
        + [("yes", "no")] * 5
        + [("no", "no")] * 45
    )
    m = pope_metrics(pairs)
    assert (m["tp"], m["fn"], m["fp"], m["tn"], m["n"]) == (40, 10, 5, 45, 100)
    assert m["accuracy"] == pytest.approx(0.85)
    assert m["precision"] == pytest.approx(40 / 45)
    assert m["recall"] == pytest.approx(40 / 50)
    p, r = 40 / 45, 40 / 50
    assert m["f1"] == pytest.approx(2 * p * r / (p + r))
    assert m["yes_ratio"] == pytest.approx(0.45)
    assert m["unknown_ratio"] == pytest.approx(0.02)


def test_pope_unreadable_answer_to_a_no_question_is_wrong_not_a_true_negative():
    m = pope_metrics([(UNKNOWN, "no"), ("no", "no")])
    assert m["tn"] == 1 and m["accuracy"] == 0.5 and m["fp"] == 0


def test_pope_metrics_with_no_positives_do_not_divide_by_zero():
    m = pope_metrics([("no", "no")])
    assert m["precision"] == 0.0 and m["recall"] == 0.0 and m["f1"] == 0.0


@pytest.mark.parametrize(
    ("prediction", "gold", "kind", "options", "correct"),
    [
        ("B", "B", "choice", {"A": "cat", "B": "dog"}, True),
        ("The answer is (B).", "B", "choice", {"A": "cat", "B": "dog"}, True),
        ("a dog", "B", "choice", {"A": "cat", "B": "dog"}, True),
        ("I cannot tell", "A", "choice", {"A": "cat", "B": "dog"}, False),
        ("C", "C", "choice", {"A": "x", "C": "z"}, True),
        ("Yes, there is.", "yes", "yes_no", None, True),
        ("no", "yes", "yes_no", None, False),
        ("104", "100", "number", None, True),  # within 5%
        ("106", "100", "number", None, False),
        ("2020", "2019", "number", None, False),  # years exact
        ("seven", "7", "number", None, True),
        ("The Red one!", "red", "text", None, False),
        ("Red", "red", "text", None, True),
        ("the United States", "United States", "text", None, True),
    ],
)
def test_verdicts(prediction, gold, kind, options, correct):
    assert score(prediction, gold, kind, options).correct is correct


def test_unreadable_prediction_is_unknown():
    v = score("no idea", "A", "choice", {"A": "x", "B": "y"})
    assert v.prediction == UNKNOWN and not v.correct


def test_kind_metrics_headlines():
    rows = [
        {"kind": "choice", "credit": 1.0, "prediction": "A", "gold_canonical": "A"},
        {"kind": "choice", "credit": 0.0, "prediction": UNKNOWN, "gold_canonical": "B"},
        {"kind": "number", "credit": 1.0, "prediction": "3", "gold_canonical": "3"},
        {"kind": "text", "credit": 0.0, "prediction": "red", "gold_canonical": "blue"},
        {"kind": "yes_no", "credit": 1.0, "prediction": "yes", "gold_canonical": "yes"},
    ]
    m = kind_metrics(rows)
    assert m["choice"] == {"n": 2, "accuracy": 0.5, "unknown_ratio": 0.5}
    assert m["number"]["relaxed_accuracy"] == 1.0
    assert m["text"]["exact_match"] == 0.0
    assert m["yes_no"]["accuracy"] == 1.0 and m["yes_no"]["f1"] == 1.0


# -- VQA accuracy: several human answers per question ------------------------------------------

TEN = ["2"] * 4 + ["two"] * 2 + ["3"] * 2 + ["4", "a few"]


@pytest.mark.parametrize(
    ("prediction", "references", "credit"),
    [
        ("2", TEN, 1.0),  # 6 annotators (number words read as digits)
        ("Two.", TEN, 1.0),
        ("There are 2.", TEN, 0.0),  # VQA matching is whole-answer, as the benchmark's
        ("3", TEN, 0.6),  # two annotators: 2 x (1/3) + 8 x (2/3), over 10
        ("4", TEN, 0.3),  # one: 9 x (1/3), over 10
        ("a few", TEN, 0.3),
        ("five", TEN, 0.0),
        ("red", ["red"] * 3 + ["maroon"] * 7, 0.9),  # three: 3 x (2/3) + 7 x 1, over 10
        ("red", ["red"] * 4 + ["maroon"] * 6, 1.0),  # four: every leave-one-out keeps 3
        ("Red", ["red", "RED!", "red ", "the red"], 1.0),  # case, punctuation, articles
        ("blue", ["red", "red"], 0.0),
        ("red", ["red", "blue"], 1 / 6),  # 1 x (0/3) + 1 x (1/3), over 2
    ],
)
def test_vqa_accuracy(prediction, references, credit):
    v = score(prediction, references[0], "text", references=references)
    assert v.credit == pytest.approx(credit, abs=1e-9)
    assert v.correct is (v.credit == 1.0)
    assert vqa_accuracy(prediction, references) == pytest.approx(v.credit)


def test_vqa_accuracy_of_non_answers_and_single_references():
    assert score("I can't tell.", "2", "text", references=TEN).credit == 0.0
    # VizWiz's own answer "unanswerable" is an answer, not a refusal
    vizwiz = ["unanswerable"] * 7 + ["blurry"] * 3
    assert score("Unanswerable", "unanswerable", "text", references=vizwiz).credit == 1.0
    # one reference: plain exact match
    assert score("Red", "red", "text", references=["red"]).credit == 1.0
    assert score("Red", "red", "text", references=None).credit == 1.0
    assert score("blue", "red", "text").credit == 0.0


def test_kind_metrics_name_the_vqa_accuracy_when_questions_have_several_answers():
    rows = [
        {"kind": "text", "credit": 0.6, "prediction": "3", "gold_canonical": "2",
         "references": TEN},
        {"kind": "text", "credit": 1.0, "prediction": "red", "gold_canonical": "red",
         "references": None},
    ]  # fmt: skip
    m = kind_metrics(rows)["text"]
    assert m == {"n": 2, "vqa_accuracy": pytest.approx(0.8), "unknown_ratio": 0.0}
