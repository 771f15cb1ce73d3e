"""The CLI and the file system: typed errors for odd paths, and nothing of the user's written.

Each command that writes is pointed at a file, a folder holding someone else's files, or a
place it cannot create; each command that reads is given a folder, binary bytes or JSON nested
too deep. Every case exits 2 with the path named, and the user's files are byte for byte
unchanged.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from mai_graph.cli import main


def _digest(path):
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return sorted((p.name, _digest(p)) for p in path.iterdir())


@pytest.fixture()
def data(tmp_path):
    assert main(["synth-data", str(tmp_path / "data"), "--n", "5"]) == 0
    return tmp_path / "data"


@pytest.fixture()
def mine(tmp_path):
    """What a user owns: a file and a folder of their own."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("do not touch")
    (tmp_path / "photo.png").write_bytes(b"\x89PNG not really")
    return tmp_path / "mine", tmp_path / "photo.png"


def _refused(argv, capsys, *needles):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert "internal error" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, (argv, err)
    return err


@pytest.mark.parametrize("target", ["folder", "file", "proc"])
def test_eval_never_writes_into_what_the_user_owns(data, mine, target, capsys, tmp_path):
    folder, file = mine
    out = {"folder": folder, "file": file, "proc": tmp_path / "no" / "\0x"}[target]
    before = [_digest(folder), _digest(file)]
    argv = ["eval", "--data", str(data / "data.jsonl"), "--backend", "oracle", "--out",
            str(out).replace("\0", "") if target != "proc" else "/proc/mai-graph-x",
            "--no-progress"]  # fmt: skip
    _refused(argv, capsys, "--out")
    assert [_digest(folder), _digest(file)] == before


def test_eval_resumes_in_its_own_folder_and_writes_into_an_empty_one(data, tmp_path, capsys):
    out = tmp_path / "empty"
    out.mkdir()
    argv = ["eval", "--data", str(data / "data.jsonl"), "--backend", "oracle", "--out", str(out),
            "--no-progress", "--no-plots", "--policies", "small"]  # fmt: skip
    assert main(argv) == 0
    assert main(argv) == 0  # its own folder: resumed, nothing redone
    assert "0 runs done, 5 already recorded" in capsys.readouterr().err


def test_synth_data_and_build_tiny_refuse_files_and_foreign_folders(data, mine, capsys):
    folder, file = mine
    before = [_digest(folder), _digest(file)]
    _refused(["synth-data", str(file), "--n", "2"], capsys, "is a file", str(file))
    _refused(["synth-data", str(folder), "--n", "2"], capsys, "holds other files")
    _refused(["build-tiny", str(file)], capsys, "is a file")
    _refused(["build-tiny", str(folder)], capsys, "holds other files")
    assert [_digest(folder), _digest(file)] == before
    # its own output is redrawn in place
    assert main(["synth-data", str(data), "--n", "3"]) == 0
    assert len((data / "data.jsonl").read_text().splitlines()) == 3


def test_profile_and_calibrate_outputs(data, mine, tmp_path, capsys):
    folder, file = mine
    before = _digest(file)
    what_if = ["profile", "--what-if", "small=61.8,large=47.3"]
    _refused([*what_if, "--out", str(file)], capsys, "refusing to overwrite")
    _refused([*what_if, "--out", str(folder)], capsys, "is a folder")
    assert _digest(file) == before
    model = tmp_path / "lm.json"
    assert main([*what_if, "--out", str(model)]) == 0
    assert main([*what_if, "--out", str(model)]) == 0  # its own model is replaced
    ev = tmp_path / "ev"
    assert main(["eval", "--data", str(data / "data.jsonl"), "--backend", "simulated",
                 "--branches", "--out", str(ev), "--no-progress", "--no-plots"]) == 0  # fmt: skip
    _refused(["calibrate", "--records", str(ev), "--out", str(file),
              "--max-transfer-share", "1"], capsys, "is a file")  # fmt: skip
    assert _digest(file) == before


def test_train_pair_never_empties_a_scratch_folder_it_does_not_own(mine, tmp_path, capsys):
    folder, file = mine
    before = _digest(folder)
    _refused(["train-pair", str(tmp_path / "pair"), "--work", str(folder), "--steps", "1"],
             capsys, "--work", "holds other files")  # fmt: skip
    _refused(["train-pair", str(file), "--steps", "1"], capsys, "is a file")
    assert _digest(folder) == before


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "is a folder"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"[" * 100_000, "nests too deep"),
        (b"{", "not valid JSON"),
        (b'["keep_ratio", 0.3]', "JSON object"),
    ],
)
def test_context_files_that_are_not_context_files(tmp_path, content, needle, capsys):
    path = tmp_path / "context.json"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    _refused(["run", "Is it red?", "--backend", "fake", "--context", str(path)], capsys, needle)


def test_a_dataset_that_is_a_folder(data, capsys):
    _refused(["eval", "--data", str(data), "--backend", "oracle", "--out", str(data / "x"),
              "--no-progress"], capsys, "is a folder")  # fmt: skip
    assert not (data / "x").exists()


def test_records_of_an_existing_eval_are_never_rewritten_by_a_failed_run(data, tmp_path, capsys):
    out = tmp_path / "ev"
    base = ["eval", "--data", str(data / "data.jsonl"), "--backend", "oracle", "--out", str(out),
            "--no-progress", "--no-plots", "--policies", "small"]  # fmt: skip
    assert main(base) == 0
    records = (out / "records.jsonl").read_bytes()
    _refused([*base, "--keep-ratio", "0.5"], capsys, "other settings")
    assert (out / "records.jsonl").read_bytes() == records
    assert json.loads(records.splitlines()[0])["type"] == "session"
