"""Traces of runs on real engines (vLLM CPU and transformers), received by a real OTLP receiver.

A run on the tiny pair yields run -> node -> call spans with tokens, the route and the engines'
own stage timings; the spans travel over OTLP/HTTP to a receiver process
(``tests/otlp_receiver.py``) and are read back from it.
"""

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402

from mai_graph import tracing  # noqa: E402
from tests.engines.test_graph_on_engines import steered_run  # noqa: E402
from tests.otlp_receiver import receiver  # noqa: E402

pytestmark = pytest.mark.engine


async def test_a_transfer_run_reaches_an_otlp_receiver_with_stage_timings(engines, scene, tmp_path):
    kind, small, large = engines
    with receiver(tmp_path) as otlp:
        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp.endpoint}/v1/traces"))
        )
        tracing.enable(provider)
        try:
            result, _, _ = await steered_run(small, large, "transfer", scene)
        finally:
            tracing.disable()
            provider.shutdown()
        spans = otlp.spans()
    assert result.route == "transfer"
    (root,) = [s for s in spans if s["name"] == "invoke_agent mai"]
    assert root["attributes"]["mai.route"] == "transfer"
    ids = {s["span_id"]: s for s in spans}
    calls = [s for s in spans if s["name"].startswith("chat ")]
    assert len(calls) == len(result.metrics) == 5
    for call in calls:
        a = call["attributes"]
        node = ids[call["parent_id"]]
        assert node["name"] == f"node {a['mai.node']}" and ids[node["parent_id"]] is root
        assert a["gen_ai.provider.name"] == kind
        assert a["gen_ai.usage.input_tokens"] > a["mai.image_tokens"] > 0
        assert a["gen_ai.usage.output_tokens"] >= 1
        for stage in ("mai.queue_s", "mai.prefill_s", "mai.decode_s"):
            assert a[stage] >= 0, (stage, a)
        assert a["mai.prefill_s"] > 0
        # The stages fit in the call's time (both kinds count it from the request's arrival).
        stages = a["mai.queue_s"] + a["mai.prefill_s"] + a["mai.decode_s"]
        assert stages <= a["mai.latency_s"] + 0.005, a
    for role in ("small", "large"):  # one image, the same tokens in each of a model's calls
        assert len({m["image_tokens"] for m in result.metrics if m["role"] == role}) == 1
