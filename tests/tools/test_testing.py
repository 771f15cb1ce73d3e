"""The tiny Qwen3-VL pair: offline, seeded, cached, loadable through from_pretrained."""

import json

import pytest

pytest.importorskip("transformers", reason="installed with the cpu / transformers extras")

from mai_graph.tiny.build import build_tiny_pair, count_parameters  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_tiny_pair(tmp_path_factory.mktemp("tiny"))


def test_pair_loads_back_and_shares_one_tokenizer(pair):
    from transformers import AutoModelForImageTextToText, AutoProcessor, Qwen3VLProcessor

    small_dir, large_dir = pair
    procs = [AutoProcessor.from_pretrained(d) for d in pair]
    assert all(isinstance(p, Qwen3VLProcessor) for p in procs)
    assert procs[0].tokenizer.get_vocab() == procs[1].tokenizer.get_vocab()
    for token in ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>"):
        assert token in procs[0].tokenizer.get_vocab()
    model = AutoModelForImageTextToText.from_pretrained(small_dir)
    assert model.config.image_token_id == procs[0].tokenizer.convert_tokens_to_ids("<|image_pad|>")
    text = procs[0].apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text.startswith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi")
    assert text.endswith("<|im_start|>assistant\n")


def test_large_has_at_least_four_times_the_parameters(pair):
    small, large = (count_parameters(d) for d in pair)
    assert large >= 4 * small


def test_rebuild_is_cached_and_seeded(pair, tmp_path):
    small_dir, _ = pair
    stamp = (small_dir / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_pair(small_dir.parent) == pair
    assert (small_dir / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    again, _ = build_tiny_pair(tmp_path)
    assert (again / "model.safetensors").read_bytes() == (
        small_dir / "model.safetensors"
    ).read_bytes()
    other, _ = build_tiny_pair(tmp_path / "seed1", seed=1)
    assert (other / "model.safetensors").read_bytes() != (
        small_dir / "model.safetensors"
    ).read_bytes()
    assert json.loads((small_dir / "mai-tiny.json").read_text())["role"] == "small"


def test_cli_build_tiny(tmp_path, capsys):
    from mai_graph.cli import main

    assert main(["build-tiny", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "small:" in out and "large:" in out and "parameters" in out
