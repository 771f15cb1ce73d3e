import json
import subprocess
import sys

import pytest

from mai_graph.cli import EXIT_BACKEND, EXIT_OK, EXIT_USAGE, main


def test_run_prints_route_answer_and_per_node_metrics(capsys):
    assert main(["run", "Which colour?", "--option", "red", "--option", "blue"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "route:" in out and "answer:" in out
    assert "verify   small" in out and "total:" in out


def test_run_json(capsys, png):
    code = main(["run", "Is it red?", "--image", str(png), "--json", "--policy", "large"])
    assert code == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["route"] == "large" and data["metrics"][0]["role"] == "large"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "q", "--image", "/no/such.png"], "image file not found"),
        (["run", "q", "--policy", "fastest"], "policy must be one of"),
        (["run", "q", "--keep-ratio", "2"], "keep_ratio must be in"),
        (["run", "q", "--set", "nosuch=1"], "--set needs FIELD=VALUE"),
        (["run", "q", "--backend", "vllm"], "backend vllm needs both models (--small/--large)"),
        (["run", "q", "--option", "only"], "need 2 to 26 options"),
        (["run", "q", "--options", "{A: cat}"], "--options '{A: cat}' is not valid JSON"),
        (["run", "q", "--options", '{"A": "cat", "B": null}'], "options"),
        (["run", "q", "--set", "gate=sometimes"], "gate must be one of"),
    ],
)
def test_bad_input_exits_2_with_a_fix(capsys, argv, message):
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and err.startswith("mai-graph: error:")


def test_backend_failure_exits_3(capsys, tmp_path):
    code = main(["run", "q", "--backend", "transformers", "--small", str(tmp_path / "none"),
                 "--large", str(tmp_path / "none")])  # fmt: skip
    assert code == EXIT_BACKEND
    assert "model folder not found" in capsys.readouterr().err


def test_set_parses_json_values(capsys):
    assert main(["run", "Is it?", "--set", "s2_exit=false", "--set", 'policy="small"']) == EXIT_OK
    assert "route:     small" in capsys.readouterr().out


def test_help_explains_the_flow():
    out = subprocess.run(
        [sys.executable, "-m", "mai_graph.cli", "run", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    for word in ("verify", "reason", "extract", "sparsify", "answer", "exit codes"):
        assert word in out.stdout


def test_run_takes_options_as_a_letter_mapping(capsys):
    argv = ["run", "Which colour?", "--options", '{"B": "red", "C": "blue"}', "--json"]
    assert main(argv) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["canonical"] in ("B", "C")


def test_run_with_the_confidence_gate(capsys):
    argv = ["run", "Is it red?", "--set", "gate=agree_confident", "--set", "gate_min_prob=0.1"]
    assert main(argv) == EXIT_OK
    assert "route:" in capsys.readouterr().out


def test_run_reads_a_context_file_and_flags_override_it(capsys, tmp_path):
    settings = tmp_path / "context.json"
    settings.write_text(json.dumps({"policy": "large", "keep_ratio": 0.4}))
    assert main(["run", "Is it red?", "--context", str(settings), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["route"] == "large"
    argv = ["run", "Is it red?", "--context", str(settings), "--policy", "small", "--json"]
    assert main(argv) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["route"] == "small"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "context file not found"),
        ("{policy: large}", "not valid JSON"),
        ("[1, 2]", "JSON object of MAIContext fields"),
        ('{"kep_ratio": 0.3}', "unknown context settings"),
    ],
)
def test_a_bad_context_file_exits_2(capsys, tmp_path, content, message):
    settings = tmp_path / "context.json"
    if content is not None:
        settings.write_text(content)
    assert main(["run", "q", "--context", str(settings)]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_an_internal_value_error_is_reported_as_a_bug_not_as_bad_input(monkeypatch, tmp_path,
                                                                        capsys):  # fmt: skip
    import mai_graph.eval.synthetic as synthetic
    from mai_graph.cli import EXIT_INTERNAL, main

    def broken(*args, **kwargs):
        raise ValueError("an index went wrong")

    monkeypatch.setattr(synthetic, "make_synthetic", broken)
    assert main(["synth-data", str(tmp_path / "d")]) == EXIT_INTERNAL == 70
    err = capsys.readouterr().err
    assert "internal error" in err and "a bug in mai-graph" in err
    assert "ValueError" in err and "an index went wrong" in err and "Traceback" not in err
    assert main(["-v", "synth-data", str(tmp_path / "d")]) == 70
    assert "Traceback" in capsys.readouterr().err
    # typed bad input still exits 2
    monkeypatch.undo()
    assert main(["synth-data", str(tmp_path / "e"), "--n", "0"]) == 2
    assert "n must be an integer from 1 to" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["99999", "65616", "0", "-1", "80.5", "http"])
def test_serve_refuses_a_port_that_would_wrap_or_is_not_a_port(port, capsys):
    from mai_graph.cli import main

    with pytest.raises(SystemExit) as info:
        main(["serve", "--port", port])
    assert info.value.code == 2
    assert "--port" in capsys.readouterr().err


def test_diagram_draws_a_chain_with_models(capsys):
    """docs/architecture.md documents `mai-graph diagram --models 3`."""
    from mai_graph.graph import mermaid

    assert main(["diagram", "--models", "3"]) == EXIT_OK
    drawn = capsys.readouterr().out
    assert drawn.strip() == mermaid(3).strip() and "answer_2" in drawn
    assert main(["diagram"]) == EXIT_OK and "answer_2" not in capsys.readouterr().out


@pytest.mark.parametrize("models", ["1", "9", "three", "-2", "2.5"])
def test_diagram_refuses_a_model_count_it_cannot_draw(capsys, models):
    with pytest.raises(SystemExit) as exit_:
        main(["diagram", "--models", models])
    assert exit_.value.code == EXIT_USAGE
    assert "--models: must be a whole number of models from 2 to 8" in capsys.readouterr().err
