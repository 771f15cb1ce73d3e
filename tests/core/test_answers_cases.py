"""Table-driven cases for answer canonicalization, grouped by the failure class they guard.

Each class has extraction cases (what a careful grader reads), gate cases (``answers_match``
between two model outputs) and scoring cases (``match_gold``, output vs a dataset's gold).
The property tests at the end run over every text in these tables.
"""

import pytest

from mai_graph.answers import UNKNOWN, answers_match, extract_answer, match_gold

U = UNKNOWN
CARS = ["a red car", "a blue bus", "a green bike", "a yellow truck"]
PETS = {"A": "a cat", "B": "a dog", "C": "a bird", "D": "a fish"}  # texts start with "a"
BLUES = {"A": "light blue", "B": "blue", "C": "dark blue", "D": "navy"}
MIDDLE = {"B": "a cat", "C": "a dog"}  # a mapping whose letters are not A, B
COUNTS = [3, 4, 5, 6.0]  # numbers from a table
YES_NO_OPTS = ["yes", "no"]
KINDS = ("auto", "choice", "yes_no", "number", "text")

# ---------------------------------------------------------------------------------------------
# 1. Non-answers: a refusal, a hedge or "I don't know" is unknown in every kind.

REFUSALS = [
    "I can't tell.",
    "I cannot tell from the image.",
    "Unsure",
    "unsure.",
    "I don't know.",
    "I do not know the answer.",
    "Not sure.",
    "I'm not sure.",
    "I am not certain.",
    "It is impossible to determine from the image.",
    "It's hard to say.",
    "Hard to tell.",
    "It is difficult to determine.",
    "The answer cannot be determined.",
    "Cannot be determined from the picture.",
    "I'm unable to identify it.",
    "I am unable to read the label.",
    "There is not enough information to answer.",
    "The image does not provide enough information.",
    "Insufficient information.",
    "No idea.",
    "no clue",
    "Maybe.",
    "Perhaps.",
    "Possibly.",
    "It depends.",
    "It's unclear.",
    "Unclear from the image.",
    "Uncertain",
    "Could be either.",
    "N/A",
    "None of the above.",
    "I couldn't tell you.",
    "Can't say for sure.",
    "I don't know, sorry!",
    "**I can't tell.**",
    "<think>it is B</think>I cannot determine.",
    "Answer: I cannot tell.",
    "The answer is: not sure.",
    "无法确定",
    "不知道",
    "Ｉ ｃａｎ'ｔ ｔｅｌｌ.",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text", REFUSALS)
def test_refusals_are_unknown_in_every_kind(text, kind):
    options = CARS if kind == "choice" else None
    assert extract_answer(text, kind, options) == U
    assert not answers_match(text, text, kind, options=options)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text", ["", "   ", "...", "?", "**", "<think>B</think>", U])
def test_empty_answers_are_unknown(text, kind):
    options = CARS if kind == "choice" else None
    assert extract_answer(text, kind, options) == U
    assert not answers_match(text, text, kind, options=options)


REFUSAL_GOLD = [
    # (prediction, gold, kind, options, correct)
    ("I don't know", "unknown", "text", None, False),
    ("Not sure", "unknown", "auto", None, False),
    ("Unknown.", "unknown", "text", None, True),
    ("unknown", "unknown", "auto", None, True),
    ("The answer is unknown.", "unknown", "text", None, True),
    ("I can't tell", "C", "choice", CARS, False),
    ("maybe yes", "yes", "yes_no", None, False),
    ("Not sure, maybe 7", "7", "number", None, False),
    ("unanswerable", "unanswerable", "text", None, True),
]


@pytest.mark.parametrize(("pred", "gold", "kind", "options", "want"), REFUSAL_GOLD)
def test_refusals_score_wrong(pred, gold, kind, options, want):
    assert match_gold(pred, gold, kind, options=options) is want


def test_sentinel_is_not_a_real_answer():
    assert UNKNOWN != "unknown"
    assert extract_answer("unknown", "text") == "unknown"
    assert extract_answer(UNKNOWN, "text") == UNKNOWN
    assert answers_match("Unknown", "unknown.", "text")


# ---------------------------------------------------------------------------------------------
# 2. Numbers keep their meaning.

NUMBER_CASES = [
    # magnitudes and percentages are part of the value
    ("4.1k", "4100"),
    ("4.1K", "4100"),
    ("2.5 million", "2500000"),
    ("2.5M", "2500000"),
    ("7 bn", "7000000000"),
    ("7 billion", "7000000000"),
    ("$1.2M", "$1200000"),
    ("1.5 thousand", "1,500"),  # a quantity in the year range keeps its separator
    ("3 trillion", "3000000000000"),
    ("30 %", "30%"),
    ("30%", "30%"),
    ("30 percent", "30%"),
    ("30 per cent", "30%"),
    ("12.5%", "12.5%"),
    ("-4.5%", "-4.5%"),
    ("5m", "5 m"),  # five metres, not five million
    # separators, signs, forms
    ("1,234", "1234"),
    ("1,234,567", "1234567"),
    ("12,000 people", "12000"),
    ("-4", "-4"),
    ("−4", "-4"),
    ("+4", "4"),
    ("0", "0"),
    ("0.0", "0"),
    ("3.50", "3.5"),
    (".5", "0.5"),
    ("5.", "5"),
    ("1/2", "0.5"),
    ("3/4 of them", "0.75"),
    ("$3.50", "$3.5"),
    ("€20", "€20"),
    ("12 cm", "12 cm"),
    ("12cm", "12 cm"),
    ("7 apples", "7"),
    ("１２", "12"),
    # number words
    ("seven", "7"),
    ("Seven apples", "7"),
    ("twenty-one", "21"),
    ("twenty one", "21"),
    ("three hundred", "300"),
    ("one hundred and five", "105"),
    ("a dozen", "12"),
    ("two thousand", "2,000"),
    ("zero", "0"),
    ("none", "0"),
    ("No birds.", "0"),
    ("There are no birds.", "0"),
    ("only one", "1"),
    ("the red one", U),
    ("lots", U),
    ("many", U),
    # years, dates, times, decades are read whole
    ("1987", "1987"),
    ("In 1987.", "1987"),
    ("1,987", "1,987"),
    ("1987 people", "1,987"),
    ("2000", "2000"),
    ("7:45", "07:45"),
    ("07:45", "07:45"),
    ("7:45 pm", "19:45"),
    ("7:45 PM", "19:45"),
    ("7:45 a.m.", "07:45"),
    ("12:30 am", "00:30"),
    ("8 a.m.", "08:00"),
    ("8pm", "20:00"),
    ("19:45:30", "19:45:30"),
    ("It is 7:45.", "07:45"),
    ("The clock shows 7:45.", "07:45"),
    ("March 5, 1987", "1987-03-05"),
    ("5 March 1987", "1987-03-05"),
    ("March 5th, 1987", "1987-03-05"),
    ("the 5th of March 1987", "1987-03-05"),
    ("Mar. 5, 1987", "1987-03-05"),
    ("1987-03-05", "1987-03-05"),
    ("3/5/1987", "1987-03-05"),
    ("25/12/2020", "2020-12-25"),
    ("March 1987", "1987-03"),
    ("March 5", "--03-05"),
    ("the 1990s", "1990s"),
    ("1990's", "1990s"),
    # a range, a choice between numbers, "x out of y" or a bound is a hedge
    ("3-5", U),
    ("3 - 5", U),
    ("3–5", U),
    ("3 to 5", U),
    ("between 3 and 5", U),
    ("from 2010 to 2015", U),
    ("1990-2000", U),
    ("2019-20", U),
    ("3 or 4", U),
    ("three or four", U),
    ("either 3 or 4", U),
    ("3, 4 or 5", U),
    ("3 out of 5", U),
    ("3 of 5", U),
    ("at least 3", U),
    ("more than 20", U),
    ("less than 5", U),
    ("over 100", U),
    ("under 10", U),
    ("up to 40", U),
    ("> 5", U),
    ("about 3 or 4 birds", U),
    ("30+", U),
    ("30 or more", U),
    ("30 or so", "30"),
    ("20 and up", U),
    ("3 (maybe 4)", U),
    ("a few", U),
    ("several", U),
    # the stated value wins over numbers mentioned after it
    ("The total is 8; the chart also lists 20 and 35.", "8"),
    ("The total is 8. The chart also lists 20 and 35.", "8"),
    ("The answer is 12 (the legend also shows 15).", "12"),
    ("Answer: 42. Note that 2019 had 40.", "42"),
    ("There are 3 cats and 2 dogs, so the answer is 5.", "5"),
    ("I count 4 birds in total: 4", "4"),
    ("5 in total", "5"),
    ("There are 5 birds in total, 2 of them red.", "5"),
    ("3 + 4 = 7", "7"),
    ("3 + 4 = 7, and 7 * 2 = 14", "14"),
    ("The number of birds in the image is 6.", "6"),
    ("The value in 2019 is 45%", "45%"),
    ("In 2019, the value was 45", "45"),
    ("In 2019, 45%", "45%"),
    ("8, because the chart lists 20 and 35 elsewhere", "8"),
    ("I see 4 birds.", "4"),
    ("There are 4 birds and 2 cats.", "4"),
    ("Approximately 45.", "45"),
    ("about 1,200 people", "1200"),
    ("~30", "30"),
    ("Roughly 2.5 million.", "2500000"),
    ("From the chart, the highest value is 78.", "78"),
    ("<think>maybe 20? or 35?</think>The total is 8.", "8"),
    ("**Answer:** 15", "15"),
    ("\\boxed{15}", "15"),
    ("答案：15", "15"),
    ("There are 12 people in the image.", "12"),
    ("The bar for 2019 shows 45.6.", "45.6"),
    ("In 2015, sales were $4.5 billion.", "$4500000000"),
    ("The difference between A and B is 15.", "15"),
    ("The difference is 15 (45 - 30).", "15"),
    ("45 - 30 = 15", "15"),
    ("15, since 45 - 30 = 15", "15"),
    ("It's 3.", "3"),
    ("The price is $19.99", "$19.99"),
    ("The temperature is -5°C", "-5 °c"),
    ("50km/h", "50 km/h"),
    ("The ratio is 3:2", "1.5"),
    ("16:9", "1.77777777778"),
    ("1:100", "0.01"),
    ("The year with the highest value is 2015.", "2015"),
    ("2015 had the highest value (45).", "2015"),
    ("45 in 2015", "45"),
    ("It was founded in 1998.", "1998"),
    ("10 o'clock", "10:00"),
    ("#3", "3"),
    ("0.5%", "0.5%"),
    ("No, there are 5.", "5"),
    ("COVID-19 cases: 1,234", "1234"),
    ("x = 12", "12"),
    ("There are two people in the image.", "2"),
    ("Two.", "2"),
    ("The image shows 5 apples on the table.", "5"),
    ("5 apples are on the table", "5"),
    ("According to the chart, the value for 2019 is 45.2%.", "45.2%"),
    ("The highest bar is 2019 with 78.", "78"),
    ("The difference is 12.5 percentage points.", "12.5"),
    ("Approximately 3,500 people", "3500"),
    ("The sum of the two largest values is 150 (90 + 60).", "150"),
    ("It's about 20 degrees.", "20 °"),
]


@pytest.mark.parametrize(("text", "want"), NUMBER_CASES)
def test_number_extraction(text, want):
    assert extract_answer(text, "number") == want


AUTO_CASES = [
    ("4 birds", "4 birds"),
    ("There are 4 birds.", "4 birds"),
    ("four birds", "4 birds"),
    ("Four.", "4"),
    ("4 red birds", "4 birds"),
    ("4 birds in the tree", "4 birds"),
    ("4 birds are visible", "4 birds"),
    ("4 of them", "4"),
    ("4 in total", "4"),
    ("About 4.", "4"),
    ("4.1k", "4100"),
    ("4.1k followers", "4100 followers"),
    ("2.5 million people", "2500000 people"),
    ("$5", "$5"),
    ("$5.00", "$5"),
    ("-$5", "-$5"),
    ("5 dollars", "5 dollars"),
    ("€20", "€20"),
    ("30%", "30%"),
    ("30 percent", "30%"),
    ("12 cm", "12 cm"),
    ("1987", "1987"),
    ("In 1987", "1987"),
    ("1,987", "1,987"),
    ("1987 people", "1987 people"),
    ("7:45", "07:45"),
    ("At 7:45 pm.", "19:45"),
    ("March 5, 1987", "1987-03-05"),
    ("the 1990s", "1990s"),
    ("3 or 4", U),
    ("3-5 birds", U),
    ("between 3 and 5", U),
    ("3 out of 5", U),
    ("more than 20", U),
    ("2 dogs and 3 cats", "2 dogs and 3 cats"),
    ("4 birds sitting on a wire next to a pole", "4 birds sitting on wire next to pole"),
    ("The Seven Dwarfs!", "7 dwarfs"),
    ("zero", "0"),
    ("none", "0"),
    ("1st", "1st"),
    ("There are 12 people in the image.", "12 people"),
    ("45 - 30 = 15", "15"),
    ("It's 3.", "3"),
    ("The price is $19.99", "$19.99"),
    ("The number of birds is 4.", "4"),
    ("The temperature is -5°C", "-5 °c"),
    ("10 o'clock", "10:00"),
    ("16:9", "1.77777777778"),
    ("It was founded in 1998.", "founded in 1998"),
    ("Red.", "red"),
    ("It is red.", "red"),
    ("It's a dog.", "dog"),
    ("They are red.", "red"),
    ("The dog is brown.", "dog is brown"),
    ("There are two people in the image.", "2 people"),
    ("5 apples are on the table", "5 apples"),
    ("It's about 20 degrees.", "20 degrees"),
    ("Approximately 3,500 people", "3500 people"),
]


@pytest.mark.parametrize(("text", "want"), AUTO_CASES)
def test_auto_number_forms(text, want):
    assert extract_answer(text, "auto") == want


NUMBER_GATE = [
    # (a, b, kind, agree)
    ("4 birds", "4 cars", "auto", False),
    ("4 birds", "four birds", "auto", True),
    ("4 birds", "4 bird", "auto", True),
    ("There are 4 birds.", "4 birds", "auto", True),
    ("4 birds", "4", "auto", True),
    ("4 red birds", "4 birds", "auto", True),
    ("4 birds", "5 birds", "auto", False),
    ("12 cm", "12 centimeters", "auto", True),
    ("12 cm", "12 m", "auto", False),
    ("12 cm", "12 inches", "auto", False),
    ("$5", "5 dollars", "auto", True),
    ("$5", "€5", "auto", False),
    ("$5", "5", "auto", True),
    ("4 birds", "4 cars", "number", True),  # the number kind drops units
    ("4.1k", "4100", "auto", True),
    ("4.1k", "4.1", "auto", False),
    ("4.1k", "4.1", "number", False),
    ("2.5 million", "2,500,000", "number", True),
    ("2.5 million", "2.5", "number", False),
    ("7 bn", "7 billion", "number", True),
    ("7 bn", "7 million", "number", False),
    ("30%", "30 percent", "number", True),
    ("30%", "0.3", "number", True),
    ("30%", "30", "number", True),
    ("30%", "40%", "number", False),
    ("30%", "31%", "number", True),
    ("100", "104", "number", True),
    ("100", "106", "number", False),
    ("19", "20", "number", True),
    ("0", "0.0", "number", True),
    ("0", "0.01", "number", False),
    ("-4", "4", "number", False),
    ("1987", "1988", "number", False),
    ("1987", "1988", "auto", False),
    ("1987", "1988", "text", False),
    ("1987", "1987.", "number", True),
    ("1987", "1,987", "number", True),
    ("1,987", "1,990", "number", True),
    ("In 1987", "1987", "auto", True),
    ("7:45", "8:45", "number", False),
    ("7:45", "8:45", "auto", False),
    ("7:45", "7:46", "number", False),
    ("7:45", "7:45 am", "number", True),
    ("7:45 pm", "19:45", "auto", True),
    ("7:45 pm", "7:45 am", "number", False),
    ("45", "7:45", "number", False),
    ("March 5, 1987", "1987-03-05", "auto", True),
    ("March 5, 1987", "March 6, 1987", "auto", False),
    ("March 5, 1987", "1987", "number", False),
    ("the 1990s", "1990s", "auto", True),
    ("1990s", "1990", "auto", False),
    ("3-5", "3-5", "number", False),
    ("3-5", "3-5", "auto", False),
    ("3 or 4", "3 or 4", "auto", False),
    ("3 out of 5", "3", "number", False),
    ("The total is 8; the chart also lists 20 and 35.", "8", "number", True),
    ("The total is 8; the chart also lists 20 and 35.", "35", "number", False),
    ("seven", "7.2", "number", True),
    ("Seven", "7 apples", "auto", True),
]


@pytest.mark.parametrize(("a", "b", "kind", "want"), NUMBER_GATE)
def test_number_gate(a, b, kind, want):
    assert answers_match(a, b, kind) is want
    assert answers_match(b, a, kind) is want


NUMBER_GOLD = [
    # (prediction, gold, kind, correct): ChartQA relaxed accuracy, exact years and times
    ("104", "100", "number", True),
    ("95.5", "100", "number", True),
    ("106", "100", "number", False),
    ("105", "100", "number", True),
    ("94", "100", "number", False),
    ("The answer is 45.", "45", "number", True),
    ("45%", "45", "number", True),
    ("0.45", "45%", "number", True),
    ("45", "45%", "number", True),
    ("45%", "0.45", "number", True),
    ("4.5", "45%", "number", False),
    ("1988", "1987", "number", False),
    ("1987", "1987", "number", True),
    ("In 1987.", "1987", "number", True),
    ("1,987", "1987", "number", True),
    ("1990", "1987", "number", False),
    ("0", "0", "number", True),
    ("0.01", "0", "number", False),
    ("7:45", "7:45", "number", True),
    ("7:50", "7:45", "number", False),
    ("4.1k", "4100", "number", True),
    ("4.1", "4100", "number", False),
    ("2.5 million", "2500000", "number", True),
    ("3 or 4", "3", "number", False),
    ("3-5", "3", "number", False),
    ("1990-2000", "1990-2000", "number", True),
    ("From 1990 to 2000", "1990-2000", "number", False),
    ("twelve", "12", "number", True),
    ("12 apples", "12", "number", True),
    ("$12", "12", "number", True),
    ("4 birds", "4", "auto", True),
    ("4", "4 birds", "auto", True),
    ("4 cars", "4 birds", "auto", False),
    ("There are 4 birds.", "4", "auto", True),
    ("5 birds", "4", "auto", False),
    ("1988", "1987", "auto", False),
    ("104", "100", "auto", True),
    ("twelve", "12", "text", True),
    ("12.0", "12", "text", False),  # text is VQA exact match
]


@pytest.mark.parametrize(("pred", "gold", "kind", "want"), NUMBER_GOLD)
def test_number_scoring(pred, gold, kind, want):
    assert match_gold(pred, gold, kind) is want


# ---------------------------------------------------------------------------------------------
# 3. Multiple choice reads the stated letter.

CHOICE_CASES = [
    # plain letters
    ("B", CARS, "B"),
    ("b", CARS, "B"),
    ("(B)", CARS, "B"),
    ("[B]", CARS, "B"),
    ("B.", CARS, "B"),
    ("B)", CARS, "B"),
    ("B:", CARS, "B"),
    ("**B**", CARS, "B"),
    ("`B`", CARS, "B"),
    ("  B  ", CARS, "B"),
    ("B: a blue bus", CARS, "B"),
    ("B) a blue bus", CARS, "B"),
    ("(B) a blue bus", CARS, "B"),
    ("B. a blue bus", CARS, "B"),
    ("Option B", CARS, "B"),
    ("option b", CARS, "B"),
    ("Ｃ", CARS, "C"),
    ("（C）", CARS, "C"),
    # stated answers
    ("The answer is B", CARS, "B"),
    ("The answer is (C).", CARS, "C"),
    ("Answer: D", CARS, "D"),
    ("Answer - D", CARS, "D"),
    ("Final answer: C", CARS, "C"),
    ("The correct answer is C.", CARS, "C"),
    ("The correct option is (B).", CARS, "B"),
    ("The best choice would be A.", CARS, "A"),
    ("I think the correct choice is C because of the color.", CARS, "C"),
    ("I'd go with D", CARS, "D"),
    ("I would choose B.", CARS, "B"),
    ("I choose B", CARS, "B"),
    ("My answer: C", CARS, "C"),
    ("D is right", CARS, "D"),
    ("D is correct.", CARS, "D"),
    ("D is the correct answer.", CARS, "D"),
    ("Option D is the best answer.", CARS, "D"),
    ("It's C.", CARS, "C"),
    ("It is C", CARS, "C"),
    ("So the answer is A.", CARS, "A"),
    ("The image shows a bus on the road, so B.", CARS, "B"),
    ("\\boxed{D}", CARS, "D"),
    ("$\\boxed{D}$", CARS, "D"),
    ("\\boxed{\\text{D}}", CARS, "D"),
    ("答案：C", CARS, "C"),
    ("答案是B", CARS, "B"),
    ("Answer: (B) a blue bus", CARS, "B"),
    ("Option B: a blue bus", CARS, "B"),
    ("B - a blue bus", CARS, "B"),
    ("The correct answer is: B. a blue bus", CARS, "B"),
    ("Based on the image, the vehicle is a blue bus. Therefore, the answer is B.", CARS, "B"),
    ("I think it's B.", CARS, "B"),
    ("It's B, the blue bus.", CARS, "B"),
    ("B is the answer.", CARS, "B"),
    ("The answer should be D.", CARS, "D"),
    ("Correct answer: D", CARS, "D"),
    ("ANSWER: C", CARS, "C"),
    ("Answer:\nC", CARS, "C"),
    ("The answer is option C.", CARS, "C"),
    ("The answer is C: a green bike.", CARS, "C"),
    ("(C) is the answer.", CARS, "C"),
    ("I believe the answer is C.", CARS, "C"),
    ("C. The bike is green.", CARS, "C"),
    ("C\n\nExplanation: the bike is green, unlike A and B.", CARS, "C"),
    ("C (a green bike)", CARS, "C"),
    ("The green bike (C).", CARS, "C"),
    ("Green bike.", CARS, "C"),
    ("D: a yellow truck, since C is a bike", CARS, "D"),
    ("The image shows a yellow truck. D", CARS, "D"),
    ("I would say B.", CARS, "B"),
    ("I'd say B", CARS, "B"),
    ("B would be my answer.", CARS, "B"),
    ("My final answer is B.", CARS, "B"),
    ("B\n\nThe bus is blue.", CARS, "B"),
    ("The answer is C. The red car (A) is parked, and the blue bus (B) is moving.", CARS, "C"),
    ("The vehicle in the image is a blue bus, which corresponds to option B.", CARS, "B"),
    ("Answer: B\nExplanation: The image shows a bus, not a car (A) or truck (D).", CARS, "B"),
    ("Options A and D are incorrect because the colors differ. The answer is C.", CARS, "C"),
    ("(B) a blue bus\n(C) a green bike", CARS, U),
    ("The answer is B) a blue bus.", CARS, "B"),
    (
        "Let me analyze each option:\nA. a red car - no\nB. a blue bus - yes\n"
        "C. a green bike - no\nD. a yellow truck - no\nSo the answer is B.",
        CARS,
        "B",
    ),
    ("Let me analyze each option:\nA. a red car - no\nB. a blue bus - yes", CARS, U),
    ("**(B) a blue bus**", CARS, "B"),
    ("Option B is correct.", CARS, "B"),
    ("The correct option is B, a blue bus.", CARS, "B"),
    ("The most likely answer is B.", CARS, "B"),
    ("B. The bus is blue, unlike the car in A.", CARS, "B"),
    ("I'm fairly confident it's B.", CARS, "B"),
    ("Definitely B.", CARS, "B"),
    ("Probably B.", CARS, "B"),
    ("Clearly, B.", CARS, "B"),
    ("B!", CARS, "B"),
    ("Choice B", CARS, "B"),
    ("The answer is: **B**", CARS, "B"),
    ("Bus", CARS, U),
    ("bike", CARS, U),
    ("Neither", CARS, U),
    ("All of the above", CARS, U),
    ("Both A and B", CARS, U),
    ("A and B", CARS, U),
    ("正确答案是 D。", CARS, "D"),
    ("我选C", CARS, "C"),
    # the stated answer wins over letters in the explanation
    ("Answer: D. Option C would need a wider road.", CARS, "D"),
    ("D, since C shows a bike.", CARS, "D"),
    ("D. Option C is a bike, not a truck.", CARS, "D"),
    ("The answer is B; A and C show other vehicles.", CARS, "B"),
    ("C is wrong, B is correct.", CARS, "B"),
    ("A is incorrect because the vehicle is blue. B is correct.", CARS, "B"),
    ("(A) is incorrect; (B) is correct.", CARS, "B"),
    ("Not A, it's B.", CARS, "B"),
    ("The answer is not C, it's D.", CARS, "D"),
    ("<think>maybe (A) or B?</think> C", CARS, "C"),
    ("<think>A A A", CARS, U),
    ("Looking at the options, A and C are vehicles with four wheels. The answer is B.", CARS, "B"),
    # option texts
    ("a blue bus", CARS, "B"),
    ("A blue bus", CARS, "B"),
    ("The blue bus.", CARS, "B"),
    ("It is a green bike.", CARS, "C"),
    ("The Yellow Truck", CARS, "D"),
    ("The answer is a blue bus.", CARS, "B"),
    ("a dog", PETS, "B"),
    ("A dog", PETS, "B"),
    ("a fish", PETS, "D"),
    ("A fish.", PETS, "D"),
    ("A", PETS, "A"),
    ("a", PETS, "A"),
    ("A.", PETS, "A"),
    ("(a)", PETS, "A"),
    ("A because it has whiskers", PETS, "A"),
    ("A cat, clearly.", PETS, "A"),
    ("blue, not light blue", BLUES, "B"),
    ("blue", BLUES, "B"),
    ("light blue", BLUES, "A"),
    ("It's dark blue, not navy.", BLUES, "C"),
    ("navy rather than blue", BLUES, "D"),
    ("5", COUNTS, "C"),
    ("five", COUNTS, "C"),
    ("6", COUNTS, "D"),
    ("The answer is 4.", COUNTS, "B"),
    ("Yes.", YES_NO_OPTS, "A"),
    ("no", YES_NO_OPTS, "B"),
    # hedges, echoes, conflicts, out of range
    ("A or B", CARS, U),
    ("Either A or C.", CARS, U),
    ("B/C", CARS, U),
    ("B, C", CARS, U),
    ("between B and C", CARS, U),
    ("The answer is B or C.", CARS, U),
    ("B or C is correct.", CARS, U),
    ("maybe B", CARS, U),
    ("The answer is A, but B is also possible.", CARS, U),
    ("A, though it could also be C.", CARS, U),
    ("B is also possible, but the stripes point to A. The answer is A.", CARS, "A"),
    ("Probably B, but I'm not sure", CARS, U),
    ("A. a red car B. a blue bus", CARS, U),
    ("A. a red car\nB. a blue bus\nC. a green bike\nD. a yellow truck", CARS, U),
    ("A, B, C, D", CARS, U),
    ("A. a blue bus", CARS, U),  # the letter and the text disagree
    ("red car or blue bus", CARS, U),
    ("It is not C.", CARS, U),
    ("E", CARS, U),
    ("Option E", CARS, U),
    ("I cannot tell", CARS, U),
    ("", CARS, U),
    # mappings keep their letters
    ("a dog", MIDDLE, "C"),
    ("C", MIDDLE, "C"),
    ("B", MIDDLE, "B"),
    ("A", MIDDLE, U),
    ("D", MIDDLE, U),
    ("(c)", MIDDLE, "C"),
    ("The answer is a cat.", MIDDLE, "B"),
]


@pytest.mark.parametrize(("text", "options", "want"), CHOICE_CASES)
def test_choice_extraction(text, options, want):
    assert extract_answer(text, "choice", options) == want


def test_choice_prefers_longer_option_text():
    assert extract_answer("the red car", "choice", ["red", "red car"]) == "B"


CHOICE_GATE = [
    ("B", "(B)", CARS, True),
    ("The answer is B", "a blue bus", CARS, True),
    ("Answer: D. Option C would need a wider road.", "C", CARS, False),
    ("Answer: D. Option C would need a wider road.", "D", CARS, True),
    ("D, since C shows a bike.", "C", CARS, False),
    ("A or B", "A or B", CARS, False),
    ("A. a red car B. a blue bus", "A. a red car B. a blue bus", CARS, False),
    ("blue, not light blue", "light blue", BLUES, False),
    ("blue, not light blue", "B", BLUES, True),
    ("a dog", "B", PETS, True),
    ("a dog", "A", PETS, False),
    ("I can't tell", "I can't tell", CARS, False),
    ("\\boxed{C}", "I'd go with C", CARS, True),
    ("A", "B", CARS, False),
    ("a dog", "C", MIDDLE, True),
]


@pytest.mark.parametrize(("a", "b", "options", "want"), CHOICE_GATE)
def test_choice_gate(a, b, options, want):
    assert answers_match(a, b, "choice", options=options) is want
    assert answers_match(b, a, "auto", options=options) is want


CHOICE_GOLD = [
    ("The answer is (C).", "C", CARS, True),
    ("c", "C", CARS, True),
    ("a green bike", "C", CARS, True),
    ("C", "a green bike", CARS, True),
    ("C", "(C)", CARS, True),
    ("B", "C", CARS, False),
    ("B or C", "C", CARS, False),
    ("I can't tell", "C", CARS, False),
    ("", "C", CARS, False),
    ("a dog", "C", MIDDLE, True),
    ("A", "B", MIDDLE, False),
    ("5", "C", COUNTS, True),
]


@pytest.mark.parametrize(("pred", "gold", "options", "want"), CHOICE_GOLD)
def test_choice_scoring(pred, gold, options, want):
    assert match_gold(pred, gold, "choice", options=options) is want


# ---------------------------------------------------------------------------------------------
# 5. Yes / no.

YES_NO_CASES = [
    ("yes", "yes"),
    ("Yes.", "yes"),
    ("YES, it is", "yes"),
    ("Yes it is.", "yes"),
    ("Yeah.", "yes"),
    ("Yep", "yes"),
    ("True", "yes"),
    ("Correct.", "yes"),
    ("Absolutely.", "yes"),
    ("Definitely, the cat is black.", "yes"),
    ("Of course yes.", "yes"),
    ("I believe so, yes.", "yes"),
    ("I think so.", "yes"),
    ("The answer is yes.", "yes"),
    ("Answer: Yes", "yes"),
    ("**Yes**", "yes"),
    ("Ｙｅｓ", "yes"),
    ("是", "yes"),
    ("是的", "yes"),
    ("对", "yes"),
    ("There is no doubt that the cat is black.", "yes"),
    ("No doubt, it is red.", "yes"),
    ("Without a doubt.", "yes"),
    ("Undoubtedly.", "yes"),
    ("Not only is it red, but also shiny.", "yes"),
    ("Yes, there is no dog.", "yes"),
    ("Yes, although it is not very clear... it is a dog.", "yes"),
    ("<think>no?</think>yes", "yes"),
    ("no", "no"),
    ("No.", "no"),
    ("NO", "no"),
    ("No, there isn't.", "no"),
    ("No, there is none.", "no"),
    ("Nope", "no"),
    ("False", "no"),
    ("Incorrect.", "no"),
    ("Not at all.", "no"),
    ("Not really.", "no"),
    ("Definitely not.", "no"),
    ("Absolutely not!", "no"),
    ("I don't think so.", "no"),
    ("There is no dog in the image.", "no"),
    ("The car is not red.", "no"),
    ("It isn't red.", "no"),
    ("The answer is no.", "no"),
    ("Never.", "no"),
    ("None.", "no"),
    ("否", "no"),
    ("不是", "no"),
    ("没有", "no"),
    ("不对", "no"),
    ("Yes, the man is wearing a hat.", "yes"),
    ("No, the man is not wearing a hat.", "no"),
    ("Y", "yes"),
    ("N", "no"),
    ("Sure.", "yes"),
    ("Right.", "yes"),
    ("That's correct.", "yes"),
    ("That is wrong.", "no"),
    ("It is true.", "yes"),
    ("It is false.", "no"),
    ("It's not true.", "no"),
    ("No, but there is a cat.", "no"),
    ("Not exactly.", "no"),
    ("I don't see any dog.", "no"),
    ("The image does not show a dog.", "no"),
    ("Nothing.", "no"),
    ("Yes, but only partially.", "yes"),
    ("Yes?", "yes"),
    ("yes yes", "yes"),
    ("是的，图中有一只猫", "yes"),
    ("不，没有", "no"),
    ("There is a cat in the image, so the answer is yes.", "yes"),
    ("No, I don't see a cat.", "no"),
    ("The image shows a cat, so yes.", "yes"),
    ("In the image, there is no cat.", "no"),
    ("Answer: No.", "no"),
    ("There is no cat, but there is a dog.", "no"),
    ("I can see a cat.", U),
    ("The man is wearing a hat.", U),
    ("Partially.", U),
    ("Not sure.", U),
    ("Not necessarily.", U),
    ("maybe", U),
    ("Maybe yes.", U),
    ("Possibly.", U),
    ("It depends on the angle.", U),
    ("yes and no", U),
    ("Yes. No, wait, no.", U),
    ("It is red.", U),
    ("The cat.", U),
    ("lots", U),
]


@pytest.mark.parametrize(("text", "want"), YES_NO_CASES)
def test_yes_no_extraction(text, want):
    assert extract_answer(text, "yes_no") == want


YES_NO_GATE = [
    ("yes", "Yes, it is.", "yes_no", True),
    ("yes", "no", "yes_no", False),
    ("There is no doubt that it is red.", "No.", "yes_no", False),
    ("There is no doubt that it is red.", "Yes.", "yes_no", True),
    ("Not sure.", "Not sure.", "yes_no", False),
    ("Not necessarily.", "No.", "yes_no", False),
    ("Yes.", "yes", "auto", True),
    ("No, it isn't.", "no", "auto", True),
    ("No.", "Yes.", "auto", False),
    ("是", "yes", "yes_no", True),
    ("Not only red but also shiny", "yes", "yes_no", True),
]


@pytest.mark.parametrize(("a", "b", "kind", "want"), YES_NO_GATE)
def test_yes_no_gate(a, b, kind, want):
    assert answers_match(a, b, kind) is want
    assert answers_match(b, a, kind) is want


YES_NO_GOLD = [
    ("Yes, it is.", "yes", True),
    ("Yes, it is.", "Yes", True),
    ("No.", "yes", False),
    ("There is no doubt.", "yes", True),
    ("Not sure.", "no", False),
    ("The dog is not visible.", "no", True),
    ("否", "no", True),
]


@pytest.mark.parametrize(("pred", "gold", "want"), YES_NO_GOLD)
def test_yes_no_scoring(pred, gold, want):
    assert match_gold(pred, gold, "yes_no") is want


# ---------------------------------------------------------------------------------------------
# 6. Text normalization (the VQA answer processor, with the project's extras).

TEXT_CASES = [
    ("A Dog.", "dog"),
    ("the dog", "dog"),
    ("An apple", "apple"),
    ("Two dogs!", "2 dogs"),
    ("twenty-one", "21"),
    ("The answer is: a red CAR", "red car"),
    ("U.S.", "us"),
    ("the U.S.A.", "usa"),
    ("Dont", "don't"),
    ("don't", "don't"),
    ("Isnt it", "isn't it"),
    ("its", "its"),
    ("red-white", "red white"),
    ("red - white", "red white"),
    ("t-shirt", "t shirt"),
    ("1,000 dollars", "1000 dollars"),
    ("3.5 meters", "3.5 meters"),
    ("None", "0"),
    ("none of them", "0 of them"),
    ("unknown", "unknown"),
    ("Unknown.", "unknown"),
    ("It's a dog.", "it's dog"),
    ("Mr. Smith", "mr smith"),
    ("yes, it is", "yes it is"),
    ("cat; dog", "cat dog"),
    ("(cat)", "cat"),
    ('"cat"', "cat"),
    ("“cat”", "cat"),
    ("cat’s toy", "cat's toy"),
    ("<think>cat?</think>dog", "dog"),
    ("**Dog**", "dog"),
    ("ＤＯＧ", "dog"),
    ("答案：狗", "狗"),
    ("7:45", "7:45"),
    ("12%", "12%"),
    ("...", U),
    ("I can't tell", U),
]


@pytest.mark.parametrize(("text", "want"), TEXT_CASES)
def test_text_normalization(text, want):
    assert extract_answer(text, "text") == want


TEXT_GATE = [
    ("a dog", "The dog.", "text", True),
    ("dog", "cat", "text", False),
    ("U.S.", "us", "text", True),
    ("Dont", "don't", "text", True),
    ("red-white", "red white", "text", True),
    ("Two dogs", "2 dogs", "text", True),
    ("A Dog.", "dog", "auto", True),
    ("unknown", "Unknown.", "auto", True),
    ("I can't tell.", "I can't tell.", "auto", False),
    ("Unsure", "Unsure", "text", False),
]


@pytest.mark.parametrize(("a", "b", "kind", "want"), TEXT_GATE)
def test_text_gate(a, b, kind, want):
    assert answers_match(a, b, kind) is want
    assert answers_match(b, a, kind) is want


TEXT_GOLD = [
    ("The U.S.", "u.s.", "text", True),
    ("USA", "u.s.", "text", False),
    ("Unknown", "unknown", "text", True),
    ("unknown", "unknown", "auto", True),
    ("I don't know", "unknown", "text", False),
    ("A red car.", "red car", "text", True),
    ("red car", "red cars", "text", False),
    ("Two", "2", "text", True),
    ("dont", "don't", "text", True),
    ("The answer is: dog", "dog", "text", True),
    ("dog", "Dog", "auto", True),
]


@pytest.mark.parametrize(("pred", "gold", "kind", "want"), TEXT_GOLD)
def test_text_scoring(pred, gold, kind, want):
    assert match_gold(pred, gold, kind) is want


# ---------------------------------------------------------------------------------------------
# 7. Unicode: NFKC first; common Chinese answer forms.

UNICODE_CASES = [
    ("Ｃ", "choice", CARS, "C"),
    ("（Ｂ）", "choice", CARS, "B"),
    ("答案：C", "choice", CARS, "C"),
    ("答案：Ｃ", "choice", CARS, "C"),
    ("最终答案是A", "choice", CARS, "A"),
    ("是", "yes_no", None, "yes"),
    ("否", "yes_no", None, "no"),
    ("是", "auto", None, "yes"),
    ("否。", "auto", None, "no"),
    ("１２", "number", None, "12"),
    ("１２％", "number", None, "12%"),
    ("½", "number", None, "0.5"),
    ("１，２３４", "number", None, "1234"),
    ("Ｙｅｓ", "yes_no", None, "yes"),
    ("ｄｏｇ", "text", None, "dog"),
    ("−５", "number", None, "-5"),
    ("5 – 7", "number", None, U),
]


@pytest.mark.parametrize(("text", "kind", "options", "want"), UNICODE_CASES)
def test_unicode(text, kind, options, want):
    assert extract_answer(text, kind, options) == want


# ---------------------------------------------------------------------------------------------
# Properties over every text in the tables above.

ALL_TEXTS = sorted(
    {t for t in REFUSALS}
    | {t for t, _ in NUMBER_CASES + AUTO_CASES + YES_NO_CASES + TEXT_CASES}
    | {t for t, _, _ in CHOICE_CASES}
    | {t for t, _, _, _ in UNICODE_CASES}
    | {x for a, b, _, _ in NUMBER_GATE + YES_NO_GATE + TEXT_GATE for x in (a, b)}
    | {x for a, b, _, _ in CHOICE_GATE for x in (a, b)}
    | {p for p, _, _, _ in NUMBER_GOLD}
)
OPTION_SETS = [CARS, PETS, BLUES, MIDDLE, COUNTS]


@pytest.mark.parametrize("kind", ["auto", "yes_no", "number", "text"])
def test_extraction_is_idempotent(kind):
    for text in ALL_TEXTS:
        once = extract_answer(text, kind)
        assert extract_answer(once, kind) == once, (text, once)


@pytest.mark.parametrize("options", OPTION_SETS, ids=["list", "pets", "blues", "mapping", "nums"])
def test_choice_extraction_is_idempotent(options):
    for text in ALL_TEXTS:
        once = extract_answer(text, "choice", options)
        assert extract_answer(once, "choice", options) == once, (text, once)


@pytest.mark.parametrize("kind", ["auto", "yes_no", "number", "text"])
def test_unknown_never_matches_and_answers_match_themselves(kind):
    for text in ALL_TEXTS:
        canonical = extract_answer(text, kind)
        agrees = answers_match(text, text, kind)
        assert agrees is (canonical != U), (text, canonical)
        assert not answers_match(text, U, kind)


@pytest.mark.slow
def test_gate_is_symmetric_on_every_pair():
    for kind in ("auto", "number", "text", "yes_no"):
        canon = [extract_answer(t, kind) for t in ALL_TEXTS[::3]]
        for a in canon:
            for b in canon:
                assert answers_match(a, b, kind) is answers_match(b, a, kind), (kind, a, b)


FRAGMENTS = [
    "A", "B", "(C)", "D.", "a", "the", "answer is", "Answer:", "not", "no", "yes", "maybe", "4",
    "4.1k", "1987", "1,987", "7:45", "pm", "March", "5", "2019-20", "3-5", "or", "and", "birds",
    "$", "%", "30", "twenty", "one", "none", "dozen", "=", "I'd go with", "is correct", "it's",
    "so", ",", ".", "\n", "red car", "blue bus", "light blue", "blue", "<think>", "</think>",
    "\\boxed{", "}", "答案", "是", "否", "Ｃ", "１２", "−", "u.s.", "don't", "I can't tell",
    "unknown", UNKNOWN, "in total", "between", "out of", "the red one", "There are", "o'clock",
    "16:9", "½", "°C", "km", "million", "bn", "B is right", "Option", "(", ")", "-", "'", '"',
    "*", "#", "_", "…",
]  # fmt: skip


def test_random_outputs_read_idempotently_and_match_themselves():
    import random

    rng = random.Random(20260101)
    for _ in range(1500):
        words = [rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 7))]
        text = ("" if rng.random() < 0.3 else " ").join(words)
        for kind in KINDS:
            options = rng.choice(OPTION_SETS) if kind == "choice" else None
            once = extract_answer(text, kind, options)
            assert extract_answer(once, kind, options) == once, (kind, text, once)
            assert answers_match(text, text, kind, options=options) is (once != U), (kind, text)
