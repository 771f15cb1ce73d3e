"""Every bad input of tests/bad_inputs.py on the tiny vLLM and transformers pairs (the fakes,
the endpoint, the chat model, the CLI and `langgraph dev` run it too).

The session's engines serve every case; after each one a good run must answer normally.
"""

import pytest

from mai_graph.backends.steered import SteeredBackend
from tests.bad_inputs import CASES, run_case

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("engines", ["vllm", "transformers"], indirect=True)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_bad_input_on_engines(engines, case, scene, tmp_path):
    kind, small, large = engines
    agree = {"short": ["A"]}
    await run_case(case, kind, SteeredBackend(small, agree), SteeredBackend(large, agree),
                   tmp_path / "case", scene)  # fmt: skip


@pytest.mark.parametrize("engines", ["vllm"], indirect=True)
async def test_processor_limits_are_checked_before_the_engine(engines):
    """A backend used directly (no graph) still refuses what its processor would refuse."""
    from PIL import Image

    from mai_graph import GenerationRequest, ImageError
    from mai_graph.inputs.sources import image_ref

    _, small, _ = engines
    strip = image_ref(Image.new("RGB", (8000, 4)))  # the graph's limits would refuse it first
    request = GenerationRequest(
        ({"role": "user", "content": [{"type": "image", "image": strip},
                                      {"type": "text", "text": "What is this?"}]},),
        max_tokens=2,
    )  # fmt: skip
    with pytest.raises(ImageError, match="image processor refuses a 8000x4 image"):
        await small.generate(request)
    assert small.running_requests() == 0
