"""Files that are not files, and numbers no door can use, at every door that reads them.

Files (issue 39, class 6): each door that reads a path (CLI flags, ``MAI_GRAPH_LINEUP``, the
Python functions that take a path) is given a named pipe, a link to ``/dev/zero``, a folder and
a file over the read cap. Each must refuse it at once, naming the flag and the kind of file,
never hang on the pipe nor read the device until memory runs out. Such a door, before the
fix, hangs or eats memory: the cases run in a child process with a time limit and an
address-space limit, so a regression fails the test instead of the machine.

Numbers and JSON (class 7): integers of thousands of digits, JSON nested tens of thousands
deep, NaN / Infinity / 1e300 and zero heads reach every door outside the endpoint as a
ConfigError naming the field (exit status 2 on the command line), never an internal error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mai_graph.cli import EXIT_USAGE, main
from mai_graph.errors import ConfigError
from mai_graph.files import MAX_READ_BYTES

CONFIGS = Path(__file__).parents[2] / "mai_graph" / "deploy" / "configs" / "qwen3_vl"
DIGITS = "1" * 5_000
DEEP = "[" * 50_000 + "]" * 50_000

# -- files that are not files ------------------------------------------------------------------

KINDS = {
    "fifo": "is a named pipe \\(FIFO\\), not a regular file",
    "zero": "is a character device, not a regular file \\(the path is a link to /dev/zero\\)",
    "folder": "is a folder",
    "huge": f"over the limit of {MAX_READ_BYTES / (1 << 20):,.1f} MiB",
}
"""The kinds of path, and what the refusal of each must say."""

_CHILD = r"""
import contextlib, io, json, resource, sys
limit = 3 << 30  # a read of /dev/zero fails here with MemoryError, not on the machine
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from mai_graph.cli import main
from mai_graph.errors import ConfigError

def call(door, path):
    if door == "load_settings":
        from mai_graph.context import load_settings
        load_settings(path)
    elif door == "load_lineup":
        from mai_graph.deploy.spec import load_lineup
        load_lineup(path)
    elif door == "MAI_GRAPH_LINEUP":
        from mai_graph.deploy.select import backends_from_env
        backends_from_env({"MAI_GRAPH_LINEUP": path})
    elif door == "api_keys_from":
        from mai_graph.adapters.endpoint.server import api_keys_from
        api_keys_from({}, path)
    elif door == "LatencyModel.load":
        from mai_graph.latency import LatencyModel
        LatencyModel.load(path)
    elif door == "read_records":
        from mai_graph.eval.records import read_records
        read_records(path)
    elif door == "load_dataset":
        from mai_graph.eval.datasets import load_dataset
        load_dataset(path)
    elif door == "read_shape":
        from mai_graph.deploy import read_shape
        read_shape(path)

for case in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            if case["argv"] is not None:
                status = main(case["argv"])
            else:
                call(case["door"], case["path"])
                status = "returned"
    except ConfigError as exc:
        status, text = "ConfigError", str(exc)
    except BaseException as exc:
        status, text = type(exc).__name__, str(exc)[:300]
    else:
        text = err.getvalue()[-600:]
    print(json.dumps({"kind": case["kind"], "status": status, "text": text}), flush=True)
"""


def _paths(tmp: Path) -> dict[str, Path]:
    """One path of each kind in ``tmp``."""
    os.mkfifo(tmp / "fifo.json")
    (tmp / "zero.json").symlink_to("/dev/zero")
    (tmp / "folder.json").mkdir()
    with (tmp / "huge.json").open("wb") as fh:  # sparse: no disk used
        fh.truncate(MAX_READ_BYTES + 1)
    return {kind: tmp / f"{kind}.json" for kind in KINDS}


def _model(tmp: Path, kind: str, path: Path, name: str) -> Path:
    """A model folder (the shipped 2B config) whose file ``name`` is of ``kind``."""
    folder = tmp / f"model-{name}-{kind}"
    shutil.copytree(CONFIGS / "2B", folder)
    target = folder / name
    target.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "zero":
        target.symlink_to("/dev/zero")
    elif kind == "folder":
        target.mkdir()
    else:
        shutil.copy(path, target)
    return folder


def _run(cases: list[dict], timeout: float = 90) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "MAI_GRAPH_SERVE_API_KEY"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(cases)],
            capture_output=True, text=True, timeout=timeout, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"a door hung (no answer in {timeout:.0f} s); answered: {out[-800:]}")
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(cases), done.stderr[-2000:]
    return results


# (door, argv with {path} and {tmp}, the name the refusal must hold, the kinds it reads)
FILE_DOORS = [
    ("run --context", ["run", "q?", "--context", "{path}"], "--context", list(KINDS)),
    ("run --lineup", ["run", "q?", "--lineup", "{path}"], "--lineup", list(KINDS)),
    ("plan --lineup", ["plan", "--lineup", "{path}", "--gpu-memory", "80GB"], "--lineup",
     list(KINDS)),
    ("serve --api-key-file", ["serve", "--api-key-file", "{path}"], "--api-key-file",
     list(KINDS)),
    ("profile --from", ["profile", "--from", "{path}"], "latency_model", list(KINDS)),
    ("eval --data", ["eval", "--data", "{path}", "--backend", "oracle", "--out", "{tmp}/ev",
                     "--no-progress"], "data", ["fifo", "zero", "folder"]),
    ("calibrate --records", ["calibrate", "--records", "{path}", "--out", "{tmp}/cal.json",
                             "--max-transfer-share", "1"], "records", ["fifo", "zero"]),
    ("load_settings", None, "--context", list(KINDS)),
    ("load_lineup", None, "--lineup", list(KINDS)),
    ("MAI_GRAPH_LINEUP", None, "MAI_GRAPH_LINEUP", list(KINDS)),
    ("api_keys_from", None, "--api-key-file", list(KINDS)),
    ("LatencyModel.load", None, "latency_model", list(KINDS)),
    ("read_records", None, "records", ["fifo", "zero"]),
    ("load_dataset", None, "data", ["fifo", "zero"]),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("door, argv, name, kinds", FILE_DOORS, ids=[d[0] for d in FILE_DOORS])
def test_every_door_refuses_files_that_are_not_files(tmp_path, door, argv, name, kinds):
    paths = _paths(tmp_path)
    cases = [
        {
            "kind": kind,
            "door": door,
            "path": str(paths[kind]),
            "argv": None
            if argv is None
            else [
                a.replace("{path}", str(paths[kind])).replace("{tmp}", str(tmp_path)) for a in argv
            ],  # fmt: skip
        }
        for kind in kinds
    ]
    for result in _run(cases):
        kind, text = result["kind"], result["text"]
        expected = EXIT_USAGE if argv is not None else "ConfigError"
        assert result["status"] == expected, (door, kind, result)
        assert re.search(KINDS[kind], text), (door, kind, text)
        assert name in text and "Traceback" not in text and "internal error" not in text, text


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_plan_and_read_shape_refuse_model_files_that_are_not_files(tmp_path, name):
    paths = _paths(tmp_path)
    kinds = ["fifo", "zero", "folder"]
    folders = {kind: _model(tmp_path, kind, paths[kind], name) for kind in kinds}
    cases = []
    for kind, folder in folders.items():
        cases.append({"kind": kind, "door": "read_shape", "path": str(folder), "argv": None})
        argv = ["plan", "--small", str(folder), "--large", str(CONFIGS / "2B"), "--gpu-memory",
                "80GB"]  # fmt: skip
        cases.append({"kind": kind, "door": "plan", "path": str(folder), "argv": argv})
    for result in _run(cases):
        kind, text = result["kind"], result["text"]
        assert result["status"] in ("ConfigError", EXIT_USAGE), (kind, result)
        assert re.search(KINDS[kind], text), (kind, text)
        assert "model" in text and name in text and "internal error" not in text, text


def test_a_safetensors_header_length_past_the_file_is_refused(tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(CONFIGS / "2B", folder)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2**63) + b"{}")
    from mai_graph.deploy import read_shape

    with pytest.raises(ConfigError, match="header length 9,223,372,036,854,775,808 is past"):
        read_shape(str(folder))


# -- numbers and JSON no door can use ---------------------------------------------------------


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    status = main(argv)
    err = capsys.readouterr().err
    assert status == EXIT_USAGE, (status, err[-600:])
    assert "internal error" not in err and "Traceback" not in err, err[-600:]
    for needle in needles:
        assert needle in err, err[-600:]
    return err


@pytest.mark.parametrize(
    "content, needle",
    [
        (f'{{"seed": {DIGITS}}}', "an integer of 5,000 digits, over the limit of 100"),
        ('{"keep_ratio": 1e400}', "a number too large for a float"),
    ],
)
def test_context_files_with_numbers_no_door_can_use(tmp_path, capsys, content, needle):
    path = tmp_path / "context.json"
    path.write_text(content)
    _refused(["run", "q?", "--context", str(path)], capsys, "--context", needle)


@pytest.mark.parametrize(
    "suffix, content, needle",
    [
        (".json", f'{{"backend": "vllm", "small": {{"model": "s", "seed": {DIGITS}}}}}',
         "an integer of 5,000 digits"),
        (".json", '{"backend": "vllm", "small": {"model": "s", "kv_cache_gib": Infinity}}',
         "Infinity, which is not a number JSON has"),
        (".toml", f'backend = "vllm"\n[small]\nmodel = "s"\nseed = {DIGITS}\n',
         "does not parse"),
        (".toml", 'backend = "vllm"\n[small]\nmodel = "s"\nkv_cache_gib = inf\n',
         "inf is not a finite number"),
        (".toml", 'backend = "vllm"\n[small]\nmodel = "s"\nkv_cache_gib = 1e300\n',
         "kv_cache_gib must be a number of GiB > 0"),
    ],
)  # fmt: skip
def test_lineup_files_with_numbers_no_door_can_use(tmp_path, capsys, suffix, content, needle):
    path = tmp_path / f"lineup{suffix}"
    path.write_text(content)
    _refused(["plan", "--lineup", str(path), "--large", "Qwen/Qwen3-VL-2B-Instruct",
              "--gpu-memory", "80GB"], capsys, str(path), needle)  # fmt: skip


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"MAI_GRAPH_SMALL_ENGINE": f'{{"max_model_len": {DIGITS}}}'}, "5,000 digits"),
        ({"MAI_GRAPH_SMALL_ENGINE": f'{{"mm_processor_kwargs": {DEEP}}}'}, "nests too deep"),
        ({"MAI_GRAPH_SMALL_ENGINE": '{"kv_cache_gib": NaN}'}, "NaN, which is not a number"),
        ({"MAI_GRAPH_ENGINE": '{"kv_cache_gib": 1e300}'}, "kv_cache_gib must be a number of GiB"),
        ({"MAI_GRAPH_REQUEST_TIMEOUT": "1e999"}, "MAI_GRAPH_REQUEST_TIMEOUT must be a number"),
        ({"MAI_GRAPH_REQUEST_RETRIES": DIGITS}, "MAI_GRAPH_REQUEST_RETRIES must be a whole"),
    ],
)
def test_engine_variables_with_numbers_no_door_can_use(env, needle):
    from mai_graph.deploy.select import backends_from_env

    base = {"MAI_GRAPH_BACKEND": "vllm", "MAI_GRAPH_SMALL": "s", "MAI_GRAPH_LARGE": "l",
            "MAI_GRAPH_PLAN": "off"}  # fmt: skip
    with pytest.raises(ConfigError, match=needle):
        backends_from_env({**base, **env})


def test_dataset_and_record_lines_over_the_limits_are_bad_lines(tmp_path):
    from mai_graph.eval.datasets import load_dataset
    from mai_graph.eval.records import RECORDS_FILE, read_records

    data = tmp_path / "d.jsonl"
    data.write_text(
        f'{{"id": "big", "question": "How many?", "answer": {DIGITS}}}\n'
        f'{{"id": "deep", "question": "What?", "answer": "x", "meta": {DEEP}}}\n'
        '{"id": "ok", "question": "Is it?", "answer": "yes"}\n'
    )
    found = {p.location: p.message for p in load_dataset(data).problems}
    assert "an integer of 5,000 digits" in found[1] and "nests too deep" in found[2]
    (tmp_path / RECORDS_FILE).write_text(f'{{"type": "call", "sample": {DIGITS}}}\n{DEEP}\n')
    assert read_records(tmp_path).problems == ["line 1: unreadable line, ignored",
                                               "line 2: unreadable line, ignored"]  # fmt: skip


def _config(tmp: Path, text: dict | None = None, header: bytes | None = None) -> Path:
    folder = tmp / "m"
    shutil.copytree(CONFIGS / "2B", folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"].update(text or {})
    (folder / "config.json").write_text(json.dumps(config))
    if header is not None:
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return folder


@pytest.mark.parametrize(
    "text, header, needle",
    [
        ({"num_attention_heads": 0}, None, "num_attention_heads must be an integer from 1"),
        ({"num_key_value_heads": 0}, None, "num_key_value_heads must be an integer from 1"),
        ({"hidden_size": float("nan")}, None, "hidden_size must be an integer from 1 .* got nan"),
        ({"num_hidden_layers": float("inf")}, None, "num_hidden_layers .* got inf"),
        ({"vocab_size": 1e300}, None, "vocab_size .* got 1e\\+300"),
        (None, b'{"w": {"dtype": "BF16", "shape": [NaN], "data_offsets": [0, 2]}}',
         "holds NaN"),
        (None, b'{"w": {"dtype": "BF16", "shape": [1e300, 2], "data_offsets": [0, 2]}}',
         "tensor 'w' has no dtype and shape of whole sizes"),
        (None, b'{"w": {"dtype": "BF16", "shape": [100000, 100000], "data_offsets": [0, 2]}}',
         "declares 20,000,000,000 bytes of tensors, more than the file's"),
    ],
)  # fmt: skip
def test_model_folders_with_numbers_no_plan_can_use(tmp_path, capsys, text, header, needle):
    folder = _config(tmp_path, text, header)
    err = _refused(["plan", "--small", str(folder), "--large", str(CONFIGS / "2B"),
                    "--gpu-memory", "80GB"], capsys)  # fmt: skip
    assert re.search(needle, err), err[-600:]


@pytest.mark.parametrize(
    "raw", [float("inf"), float("nan"), 1e300, "9" * 400 + "GB", "1" + "0" * 400]
)
def test_sizes_with_hundreds_of_digits(raw):
    from mai_graph.deploy import parse_size

    with pytest.raises(ConfigError, match="--gpu-memory must be a"):
        parse_size(raw)


def test_engine_options_out_of_range_through_the_python_api(monkeypatch):
    from mai_graph.backends.transformers import TransformersBackend
    from mai_graph.backends.vllm import VLLMBackend
    from mai_graph.deploy import Workload, plan_memory
    from mai_graph.deploy.plan import host_device
    from mai_graph.deploy.spec import LineupSpec, ModelSpec

    with pytest.raises(ConfigError, match="threads must be an integer from 1 to"):
        TransformersBackend("x", threads=1_000_000)
    for gib in (float("inf"), float("nan"), 1e300):
        with pytest.raises(ConfigError, match="kv_cache_gib must be a number of GiB > 0"):
            VLLMBackend("x", kv_cache_gib=gib)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1" * 400)
    small = ModelSpec(model="Qwen/Qwen3-VL-2B-Instruct")
    lineup = LineupSpec(backend="vllm", small=small, large=small)
    with pytest.raises(ConfigError, match="VLLM_CPU_KVCACHE_SPACE must be a number"):
        plan_memory(lineup, [host_device()], Workload.from_context())


@pytest.mark.parametrize("spec", ["small=1e-320,large=3", "small=60,large=45,small_prefill=1e-320"])
def test_what_if_speeds_whose_inverse_overflows(capsys, spec):
    _refused(["profile", "--what-if", spec], capsys, "must be positive, 0.001 to 1e+09")


def test_a_huge_integer_setting_through_the_python_api():
    from mai_graph.context import MAIContext

    with pytest.raises(ConfigError, match="seed must be an integer .* got an integer of 5001"):
        MAIContext(seed=10**5000)
