"""train-pair's run hygiene: one run per scratch folder, progress read from complete lines."""

import json
import subprocess
import sys

import pytest

from mai_graph.errors import ConfigError
from mai_graph.pair.train import _claim, _follow, train_pair


def test_a_second_run_on_the_same_scratch_folder_is_refused(tmp_path):
    work = tmp_path / "pair.work"
    held = _claim(work)
    with pytest.raises(ConfigError, match="another train-pair run is using") as e:
        train_pair(tmp_path / "pair", steps=[1], task="v4", work=work)
    assert e.value.parameter == "--work"
    assert not (tmp_path / "pair").exists() and not work.exists()  # nothing touched
    held.close()
    _claim(work).close()  # free again once the first run is over


@pytest.mark.parametrize("use_work", [False, True])
def test_a_scratch_folder_that_cannot_be_written_is_a_typed_error(tmp_path, use_work):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out, work = (tmp_path / "pair", blocker / "w") if use_work else (blocker / "pair", None)
    with pytest.raises(ConfigError, match="cannot write the scratch folder's lock") as e:
        train_pair(out, steps=[1], task="v4", work=work)
    assert e.value.parameter == ("--work" if use_work else "OUT")
    assert blocker.read_text() == "x"


def test_progress_is_read_from_complete_lines_only(tmp_path, capsys):
    entry = {"step": 3, "elapsed_s": 1.0, "loss": 0.5, "monitor_accuracy": 0.5,
             "monitor_by_template": {"reach": 0.25}}  # fmt: skip
    line = json.dumps(entry)
    (tmp_path / "small.log.jsonl").write_text(line + "\n" + line[:20])  # one being written
    (tmp_path / "large.log.jsonl").write_text("not json\n" + line + "\n")
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    _follow({"small": done, "large": done}, tmp_path)
    out = capsys.readouterr().out
    assert out.count("step      3") == 2 and "rea 25" in out
    assert "large (unreadable progress line in large.log.jsonl)" in out
