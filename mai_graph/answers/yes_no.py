"""Yes/no: whether an answer says yes, no, or neither.

Order of reading (after the last answer statement, if any):

1. Chinese short forms: 是 / 对 / 有 / 正确 → yes; 不 / 否 / 没 / 错 (first) → no.
2. Fixed phrases that read positive: "no doubt", "without a doubt", "not only ... but also".
3. A refusal or hedge ("not sure", "not necessarily", "maybe", "it depends") → unknown.
4. The first word: yes / yeah / true / correct / sure / definitely / ... → yes ("definitely
   not" → no); no / nope / false / incorrect / not / none / never → no. A standalone answer
   word of the other side later ("Yes. No, wait.") makes it unknown.
5. "That's correct" / "it is true" → yes ("that's wrong", "it's not true" → no); "I think
   so" → yes; "I don't think so" → no.
6. Standalone yes and no words anywhere: one side only → that side; both → unknown.
7. A negated statement ("There is no dog", "It isn't red") → no. Anything else → unknown.
"""

from __future__ import annotations

import re
from typing import Final

from mai_graph.answers.kinds import UNKNOWN
from mai_graph.answers.text import answer_region, is_refusal

__all__ = ["read_yes_no"]

_POSITIVE = re.compile(
    r"\b(?:there\s+is\s+)?no\s+doubt\b|\bwithout\s+(?:a\s+|any\s+)?doubt\b|\bundoubtedly\b"
    r"|\bnot\s+only\b|\bno\s+question\s+(?:that|about\s+it)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_YES_FIRST: Final = frozenset(
    "yes yeah yep yup yea aye y true correct right sure absolutely definitely certainly "
    "indeed affirmative positive".split()
)
_NO_FIRST: Final = frozenset(
    "no nope nah n false incorrect wrong negative not none never nothing nobody neither".split()
)
_STRONG: Final = frozenset("absolutely definitely certainly surely".split())
_STANDALONE_YES = re.compile(r"\byes\b", re.IGNORECASE)
_STANDALONE_NO = re.compile(r"\bno\b(?=\s*(?:[.,!;:)]|$))", re.IGNORECASE)
_VERDICT = re.compile(
    r"\b(?:that|it|this)(?:'s|\s+is)\s+(?P<neg>not\s+)?(?:(?P<yes>correct|right|true|so)"
    r"|(?P<no>incorrect|wrong|false|untrue))\b",
    re.IGNORECASE,
)
_THINK_SO = re.compile(
    r"\bi\s+(?:(?P<neg>don't|do\s+not|doesn't)\s+)?(?:think|believe|guess|suppose)\s+so\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nothing|nobody|neither|nor|[a-z]+n't|cannot)\b", re.IGNORECASE
)
_ZH_NO = ("不", "否", "没", "错", "無", "无")
_ZH_YES = ("是", "对", "對", "有", "正确", "正確")


def read_yes_no(text: str) -> str:
    """``"yes"``, ``"no"`` or UNKNOWN for a prepared answer text.

    >>> read_yes_no("There is no doubt that the light is red.")
    'yes'
    >>> read_yes_no("Not necessarily."), read_yes_no("No, there isn't.")
    ('<unknown>', 'no')
    """
    region = answer_region(text)
    if is_refusal(region):
        return UNKNOWN
    head = region.lstrip(" \t\n\"'([:")
    if head.startswith(_ZH_NO):
        return "no"
    if head.startswith(_ZH_YES):
        return "yes"
    region = _POSITIVE.sub(" yes ", region)
    if is_refusal(region):
        return UNKNOWN
    words = _WORD.findall(region.lower())
    if not words:
        return UNKNOWN
    first = words[0]
    if first in _YES_FIRST:
        if len(words) > 1 and words[1] == "not" and first in _STRONG:
            return "no"
        return UNKNOWN if _STANDALONE_NO.search(region) else "yes"
    if first in _NO_FIRST:
        return UNKNOWN if _STANDALONE_YES.search(region) else "no"
    verdict = _VERDICT.search(region[:200])
    if verdict is not None:
        return "no" if bool(verdict.group("neg")) == bool(verdict.group("yes")) else "yes"
    think = _THINK_SO.search(region)
    if think is not None:
        return "no" if think.group("neg") else "yes"
    has_yes = _STANDALONE_YES.search(region) is not None
    has_no = _STANDALONE_NO.search(region) is not None
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    if has_yes:
        return UNKNOWN
    return "no" if _NEGATION.search(region) else UNKNOWN
