"""Refusals never agree: however a model says it cannot answer, the answer is unknown in every
kind, so two refusing models never end a run at the gate.

The phrasings cover inability to see, read or tell, apologies, requests for a clearer image,
a missing or broken picture, and refusals in Chinese, Japanese, Spanish, Portuguese, French,
German and Italian; the controls are answers that mention seeing or images and must still
be read.
"""

import pytest

from mai_graph import ScriptedBackend, run
from mai_graph.answers import UNKNOWN, extract_answer
from mai_graph.answers.text import is_refusal

REFUSALS = [
    "Sorry, I can't see the image.",
    "I'm sorry, but I cannot view images.",
    "I apologize, I am unable to see the picture you sent.",
    "Apologies — the image did not load for me.",
    "Unfortunately, the photo is too blurry to make out any details.",
    "I'm not able to view images.",
    "I can't make out what the sign says.",
    "The image is too dark to tell.",
    "Please provide a clearer image.",
    "Could you upload a higher-resolution picture?",
    "Can you send me a better photo?",
    "No image was provided.",
    "The picture seems corrupted.",
    "As an AI, I cannot process this image.",
    "I cannot determine that from this image.",
    "抱歉，我看不清这张图片。",
    "无法看到图片。",
    "申し訳ありませんが、画像が見えません。",
    "わかりません。",
    "Lo siento, no puedo ver la imagen.",
    "No es posible saberlo con esta imagen.",
    "Desculpe, não consigo ver a imagem.",
    "Désolé, je ne peux pas voir l'image.",
    "Je ne sais pas.",
    "Leider kann ich das Bild nicht sehen.",
    "Mi dispiace, non riesco a vedere l'immagine.",
    "There is no image.",
    "I don't see any image attached.",
    "I wasn't able to view the image.",
    "Unfortunately, I am unable to see the picture.",
]

ANSWERS = [
    ("I can see a red car.", "text", None),
    ("Yes, I can see it clearly: yes.", "yes_no", "yes"),
    ("There are 3 birds in the image.", "number", "3"),
    ("The image shows a blue bus, so the answer is B.", "choice", "B"),
    ("red", "text", "red"),
    ("The photo was taken at night; the car is red.", "text", None),
    ("No.", "yes_no", "no"),
    ("The sign is easy to read: it says STOP.", "text", None),
    # answers that share words with refusals (found by review)
    ("No, the box is too small for the cat.", "yes_no", "no"),
    ("B. The ball is too small for the hoop.", "choice", "B"),
    ("No, he can't see the ball because it is behind the wall.", "yes_no", "no"),
    ("The cat can't find its toy.", "text", None),
    ("No, there is no picture visible on the wall.", "yes_no", "no"),
    ("The TV picture is blank.", "text", None),
    ("SORRY WE'RE CLOSED", "text", None),
    ("No se permite fumar", "text", None),
    ("Leider geschlossen", "text", None),
    ("Unfortunately, it is raining.", "text", None),
    ("The sign says sorry.", "text", None),
    ("No image of a cat is visible, only a dog.", "text", None),
    ("I don't see any dog.", "yes_no", "no"),
    ("No, I don't see a cat.", "yes_no", "no"),
]


@pytest.mark.parametrize("text", REFUSALS)
@pytest.mark.parametrize("kind", ["text", "auto", "yes_no", "number", "choice"])
def test_a_refusal_is_unknown_in_every_kind(text, kind):
    options = {"A": "a red car", "B": "a blue bus"} if kind == "choice" else None
    assert is_refusal(text)
    assert extract_answer(text, kind, options) == UNKNOWN


@pytest.mark.parametrize("text, kind, want", ANSWERS)
def test_answers_that_mention_seeing_are_still_read(text, kind, want):
    options = {"A": "a red car", "B": "a blue bus"} if kind == "choice" else None
    got = extract_answer(text, kind, options)
    assert got != UNKNOWN and (want is None or got == want), got


def test_a_refusal_at_the_end_of_a_long_answer_is_found():
    text = "The picture shows a street with several cars parked. " * 40 + "Sorry, I can't see it."
    assert is_refusal(text)


@pytest.mark.parametrize("kind", ["text", "yes_no", "auto"])
@pytest.mark.parametrize(
    "refusal",
    [
        "Sorry, I can't see the image.",
        "Please provide a clearer image.",
        "Lo siento, no puedo ver.",
    ],
)
def test_two_refusing_models_never_end_a_run_at_the_gate(kind, refusal):
    small = ScriptedBackend({"short": refusal, "cot": refusal, "s2": refusal}, name="small")
    large = ScriptedBackend({"short": refusal, "answer": refusal}, name="large")
    result = run("Is the car red?", small=small, large=large, context={"answer_kind": kind})
    assert result.route not in ("agree", "extract_agree"), result.route
    assert result.canonical == UNKNOWN
