"""The GPU recipes in the docs, run as dry runs: every `mai-graph plan` command they show.

The lineup files name hub ids; a Hugging Face cache folder is laid out with the real Qwen3-VL
configs (mai_graph/deploy/configs/qwen3_vl, sources in SOURCES.md) so the plan reads them as
it would on a machine that downloaded the checkpoints.
"""

import re
import shlex
from pathlib import Path

import pytest

from mai_graph.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "mai_graph" / "deploy" / "configs" / "qwen3_vl"
DOCS = [ROOT / "README.md", ROOT / "docs" / "engines.md", ROOT / "docs" / "deployment.md"]
LINEUPS = sorted((ROOT / "examples" / "lineups").glob("*.toml"))


def commands():
    found = []
    for path in DOCS + LINEUPS:
        for line in path.read_text().splitlines():
            match = re.search(r"(mai-graph plan [^#`]*)", line)
            if match:
                found.append((path.name, match.group(1).strip()))
    return found


@pytest.fixture
def hub(tmp_path, monkeypatch):
    rev = "0" * 40
    for size in ("2B", "4B", "8B", "32B"):
        repo = tmp_path / f"models--Qwen--Qwen3-VL-{size}-Instruct"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(rev)
        snapshot = repo / "snapshots" / rev
        snapshot.mkdir(parents=True)
        for file in (DATA / size).glob("*.json"):
            (snapshot / file.name).write_text(file.read_text())
    # huggingface_hub reads its default cache folder when imported: import it before the
    # environment points at this test's folder, or later tests would read this one
    import huggingface_hub.constants  # noqa: F401

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.chdir(ROOT)
    return tmp_path


def test_the_docs_show_plan_commands_for_every_lineup_file():
    shown = " ".join(cmd for _, cmd in commands())
    for path in LINEUPS:
        assert f"examples/lineups/{path.name}" in shown, path.name


@pytest.mark.parametrize(
    "where, command", commands(), ids=[f"{w}:{c[17:60]}" for w, c in commands()]
)
def test_every_plan_command_in_the_docs_runs_and_fits(hub, where, command, capsys):
    argv = shlex.split(command)[1:]
    assert main(argv) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "fits: yes" in out


def test_the_same_pair_without_limits_is_refused_on_16_and_24_gb(hub, capsys):
    for size in ("16GB", "24GB"):
        code = main(["plan", "--backend", "vllm", "--small", "Qwen/Qwen3-VL-2B-Instruct",
                     "--large", "Qwen/Qwen3-VL-8B-Instruct", "--gpu-memory", size])  # fmt: skip
        captured = capsys.readouterr()
        assert code == 2
        assert "fits: NO" in captured.out and "does not fit" in captured.err
    assert "fp8" in captured.out  # the 24 GB refusal lists the fixes that make it fit


def test_plan_json_and_a_hub_id_not_on_this_machine(hub, capsys):
    import json

    assert main(["plan", "--lineup", "examples/lineups/one-gpu.toml", "--gpu-memory", "80GB",
                 "--json"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] and [e["label"] for e in data["engines"]] == ["small", "large"]
    code = main(["plan", "--backend", "vllm", "--small", "Qwen/Qwen3-VL-1B-Nope", "--large",
                 "Qwen/Qwen3-VL-8B-Instruct", "--gpu-memory", "80GB"])  # fmt: skip
    assert code == 2
    assert "no config.json for 'Qwen/Qwen3-VL-1B-Nope'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--gpu-memory", "lots"], "must be a size"),
    (["--gpu-memory", "80GB", "--gpus", "0"], "--gpus must be in 1..64"),
    (["--gpu-memory", "80GB", "--images", "-1"], "--images must be >= 0"),
    (["--backend", "openai"], "no in-process vLLM engine"),
])  # fmt: skip
def test_bad_plan_flags(hub, argv, message, capsys):
    base = ["plan", "--small", "Qwen/Qwen3-VL-2B-Instruct", "--large", "Qwen/Qwen3-VL-8B-Instruct"]
    assert main([*base, *argv]) == 2
    assert message in capsys.readouterr().err
