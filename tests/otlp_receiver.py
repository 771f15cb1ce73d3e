"""A real OTLP/HTTP trace receiver, as a process: ``python -m tests.otlp_receiver OUT``.

It decodes each ``POST /v1/traces`` body with OpenTelemetry's own protobuf classes
(``opentelemetry-proto``: ``ExportTraceServiceRequest``), writes one JSON line per span to
``OUT`` and answers as a collector does. It prints its port on the first line of stdout.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def spans_of(body: bytes) -> list[dict[str, Any]]:
    """The spans of one OTLP export request, flattened to JSON-able dicts."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest.FromString(body)
    out = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for span in ss.spans:
                out.append({
                    "name": span.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_id": span.parent_span_id.hex() or None,
                    "kind": span.kind,
                    "status": span.status.code,
                    "scope": ss.scope.name,
                    "service": resource.get("service.name"),
                    "attributes": {a.key: _value(a.value) for a in span.attributes},
                })  # fmt: skip
    return out


def serve(out: Path) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            spans = spans_of(body)
            with lock, out.open("a") as f:
                f.writelines(json.dumps(s) + "\n" for s in spans)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


class Receiver:
    """A running receiver: its OTLP endpoint and the spans it has received so far."""

    def __init__(self, endpoint: str, out: Path) -> None:
        self.endpoint = endpoint
        self.out = out

    def spans(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]


@contextlib.contextmanager
def receiver(tmp: Path) -> Iterator[Receiver]:
    """Start the receiver process for the block; it is killed at the end."""
    out = tmp / "spans.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.otlp_receiver", str(out)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield Receiver(f"http://127.0.0.1:{port}", out)
    finally:
        proc.kill()
        proc.wait(timeout=10)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
