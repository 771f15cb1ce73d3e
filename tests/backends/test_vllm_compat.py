"""Every vLLM internal mai-graph uses is in one module, checked against the installed vLLM."""

import pytest

from mai_graph.backends.vllm import compat

pytest.importorskip("vllm")


def test_the_installed_vllm_has_every_internal_mai_graph_uses():
    assert compat.missing_names() == []


def test_the_installed_vllm_is_in_the_tested_range():
    assert compat.check_version() is None


def test_a_removed_internal_is_named(monkeypatch):
    from vllm.v1.engine.output_processor import OutputProcessor

    monkeypatch.delattr(OutputProcessor, "propagate_error")
    assert compat.missing_names() == ["OutputProcessor.propagate_error"]


def test_a_moved_module_is_named(monkeypatch):
    import vllm.v1.engine.core_client as client

    monkeypatch.delattr(client, "BackgroundResources")
    missing = compat.missing_names()
    assert "BackgroundResources.ctx" in missing
    assert "BackgroundResources.engine_manager" in missing


@pytest.mark.parametrize(
    "version, ok",
    [
        ("0.32.0", True),
        ("0.32.5+cpu", True),
        ("0.31.9", False),
        ("0.33.0", True),
        ("0.34.2", True),
        ("0.35.0", False),
        ("1.0", False),
    ],
)
def test_version_range(version, ok):
    assert (compat.check_version(version) is None) is ok


def test_the_pyproject_pins_the_tested_range():
    import tomllib
    from pathlib import Path

    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = [d for d in data["project"]["optional-dependencies"]["vllm"] if d.startswith("vllm")]
    low, high = compat.TESTED_VLLM
    assert pins == [f"vllm>={low},<{high}"]


def test_no_other_module_names_a_vllm_internal():
    """The backend and teardown reach engine internals only through the compatibility module."""
    import re
    from pathlib import Path

    root = Path(__file__).parents[2] / "mai_graph"
    internals = ("output_processor", "engine_core", "output_handler", "call_utility_async",
                 "_get_num_multimodal_tokens", "current_platform", "try_get_generation_config",
                 "abort_requests_async", "engine_manager")  # fmt: skip
    for path in root.rglob("*.py"):
        if path.name == "compat.py":
            continue
        text = path.read_text()
        for name in internals:
            found = re.search(rf"(?<!compat)\.{name}\b|[\"']{name}[\"']", text)
            assert found is None, f"{path.relative_to(root)} names vLLM's {name}"
