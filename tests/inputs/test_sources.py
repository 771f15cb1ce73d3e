"""The image policy: what trusted and untrusted callers may give, and URL fetching."""

import base64
import http.server
import io
import os
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from mai_graph import ConfigError, ImageError
from mai_graph.errors import ImageAccessError, ImageMismatchError
from mai_graph.inputs.images import load_image
from mai_graph.inputs.sources import ImagePolicy, is_public_address, resolve_image


def png_bytes(color=(200, 20, 20), size=(16, 12)):
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def root(tmp_path):
    """An allowed root with one image, and a secret image next to it (outside the root)."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "cat.png").write_bytes(png_bytes())
    (tmp_path / "secret.png").write_bytes(png_bytes((1, 2, 3)))
    return allowed


@pytest.fixture
def untrusted(root):
    return ImagePolicy.untrusted(roots=[root])


# -- the policy object -------------------------------------------------------------------------


def test_constructors_and_defaults():
    trusted = ImagePolicy.trusted()
    assert trusted.allow_paths and not trusted.allow_urls and trusted.max_bytes is None
    server = ImagePolicy.untrusted()
    assert not server.allow_paths and server.roots == () and not server.allow_urls
    assert server.max_bytes == 20_000_000
    assert ImagePolicy.untrusted(roots="/srv/img").roots == (Path("/srv/img"),)


def test_policy_values_are_validated():
    with pytest.raises(ConfigError, match="absolute"):
        ImagePolicy.untrusted(roots=["images"])
    with pytest.raises(ConfigError, match="max_bytes"):
        ImagePolicy(max_bytes=0)
    with pytest.raises(ConfigError, match="timeout_s"):
        ImagePolicy(timeout_s=0)


def test_from_env():
    env = {"MAI_GRAPH_IMAGE_ROOTS": os.pathsep.join(["/a", "", "/b"]), "MAI_GRAPH_IMAGE_URLS": "1"}
    policy = ImagePolicy.from_env(env)
    assert [str(r) for r in policy.roots] == ["/a", "/b"]
    assert policy.allow_urls and not policy.allow_paths
    assert ImagePolicy.from_env({}) == ImagePolicy.untrusted()
    with pytest.raises(ConfigError, match="MAI_GRAPH_IMAGE_URLS"):
        ImagePolicy.from_env({"MAI_GRAPH_IMAGE_URLS": "maybe"})
    with pytest.raises(ConfigError, match="MAI_GRAPH_IMAGE_ROOTS"):
        ImagePolicy.from_env({"MAI_GRAPH_IMAGE_ROOTS": "relative/dir"})


# -- inline images: accepted under every policy ------------------------------------------------


def test_untrusted_callers_send_data_urls_base64_bytes_and_pil(untrusted):
    data = png_bytes()
    b64 = base64.b64encode(data).decode()
    refs = [
        resolve_image("data:image/png;base64," + b64, untrusted),
        resolve_image(b64, untrusted),
        resolve_image("\n".join(b64[i : i + 76] for i in range(0, len(b64), 76)), untrusted),
        resolve_image(data, untrusted),
        resolve_image(Image.open(io.BytesIO(data)), untrusted),
    ]
    assert len({r["sha256"] for r in refs}) == 1
    assert load_image(refs[1]).size == (16, 12)


def test_jpeg_gif_webp_base64_are_recognized(untrusted):
    for fmt in ("JPEG", "GIF", "WEBP", "BMP"):
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), (0, 90, 0)).save(buf, format=fmt)
        ref = resolve_image(base64.b64encode(buf.getvalue()).decode(), untrusted)
        assert (ref["width"], ref["height"]) == (8, 8), fmt


def test_inline_images_are_capped_in_bytes():
    tight = ImagePolicy.untrusted(max_bytes=100)
    data = png_bytes(size=(64, 64)) + b"\0" * 200
    for source in (data, base64.b64encode(data).decode(),
                   "data:image/png;base64," + base64.b64encode(data).decode()):  # fmt: skip
        with pytest.raises(ImageError, match="over the limit of 100"):
            resolve_image(source, tight)


def test_bad_base64_in_a_data_url():
    with pytest.raises(ImageError, match="not valid base64"):
        resolve_image("data:image/png;base64,@@@", ImagePolicy.untrusted())


# -- paths under an untrusted policy -----------------------------------------------------------


def test_files_under_a_root_are_read(untrusted, root):
    ref = resolve_image(str(root / "cat.png"), untrusted)
    assert ref["path"] == str((root / "cat.png").resolve())
    assert resolve_image((root / "cat.png").as_uri(), untrusted)["sha256"] == ref["sha256"]


def _message(source, policy):
    with pytest.raises(ImageAccessError) as err:
        resolve_image(source, policy)
    assert err.value.parameter == "image"
    shown = source if len(source) <= 80 else source[:77] + "..."
    return str(err.value).replace(shown, "<given>")


def test_one_message_for_every_refused_path(untrusted, root, tmp_path):
    """Existing or not, file or folder, escape by .., ~, symlink or file:// -- one message."""
    outside = tmp_path / "secret.png"
    (root / "link.png").symlink_to(outside)
    (root / "dangling.png").symlink_to(tmp_path / "nothing.png")
    (root / "up").symlink_to(tmp_path)
    refused = [
        str(outside),
        str(tmp_path / "nothing.png"),
        str(tmp_path),
        "/etc/shadow",
        "/etc/no-such-file",
        str(root / ".." / "secret.png"),
        str(root / ".." / "nothing.png"),
        "~/.ssh/id_rsa",
        "~/no-such-key",
        "cat.png",
        str(root / "link.png"),
        str(root / "dangling.png"),
        str(root / "up" / "secret.png"),
        outside.as_uri(),
        (tmp_path / "nothing.png").as_uri(),
        "file://otherhost/etc/passwd",
    ]
    messages = {_message(source, untrusted) for source in refused}
    assert len(messages) == 1, messages
    (message,) = messages
    assert "not allowed" in message and "data URL" in message
    assert "not found" not in message and "not a file" not in message


def test_without_roots_no_path_is_read(png):
    with pytest.raises(ImageAccessError, match="not allowed"):
        resolve_image(str(png), ImagePolicy.untrusted())


def test_errors_inside_a_root_may_say_what_they_are(untrusted, root):
    (root / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"junk" * 10)
    with pytest.raises(ImageError, match="cannot decode"):
        resolve_image(str(root / "bad.png"), untrusted)
    with pytest.raises(ImageError, match="not found"):
        resolve_image(str(root / "missing.png"), untrusted)


def test_devices_and_pipes_are_never_read(untrusted, root):
    os.mkfifo(root / "pipe.png")
    with pytest.raises(ImageError, match="not a file"):  # returns at once, no writer needed
        resolve_image(str(root / "pipe.png"), untrusted)
    with pytest.raises(ImageAccessError):
        resolve_image("/dev/zero", untrusted)


def test_trusted_callers_keep_their_paths_and_messages(png, tmp_path):
    assert resolve_image(str(png))["path"] == str(png.resolve())
    assert resolve_image(png.as_uri())["path"] == str(png.resolve())
    with pytest.raises(ImageError, match="not found"):
        resolve_image(str(tmp_path / "nope.png"))


# -- image references from untrusted callers ---------------------------------------------------


def test_untrusted_reference_is_checked_like_a_path_and_by_hash(untrusted, root, tmp_path):
    good = resolve_image(str(root / "cat.png"), untrusted)
    assert resolve_image(dict(good), untrusted)["sha256"] == good["sha256"]

    forged = {**good, "sha256": "0" * 64}
    with pytest.raises(ImageMismatchError, match="stale or forged"):
        resolve_image(forged, untrusted)

    secret = resolve_image(str(tmp_path / "secret.png"))  # a trusted caller's real reference
    with pytest.raises(ImageAccessError, match="not allowed"):
        resolve_image(secret, untrusted)  # right hash, but outside the roots

    Image.new("RGB", (16, 12), (0, 0, 0)).save(root / "cat.png")  # the file changed
    with pytest.raises(ImageMismatchError):
        resolve_image(good, untrusted)


def test_malformed_reference():
    with pytest.raises(ImageError, match="malformed image reference"):
        resolve_image({"path": "/x.png", "sha256": "abc"}, ImagePolicy.untrusted())


# -- URLs ---------------------------------------------------------------------------------------


def test_address_check():
    public = ["93.184.216.34", "2606:4700::1111", "8.8.8.8"]
    private = [
        "127.0.0.1", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
        "fe80::1", "fc00::1", "0.0.0.0", "100.64.0.1", "224.0.0.1", "::ffff:127.0.0.1",
        "2002:7f00:1::", "64:ff9b::a00:1", "198.18.0.1", "240.0.0.1",
    ]  # fmt: skip
    assert all(is_public_address(a) for a in public)
    assert not any(is_public_address(a) for a in private)


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict = {}

    def do_GET(self):  # noqa: N802
        status, headers, body, delay = self.routes[self.path.split("?")[0]]
        time.sleep(delay)
        try:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v.replace("{port}", str(self.server.server_port)))
            self.end_headers()
            if self.path == "/drip":  # a slow sender: one byte at a time
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.05)
            elif body:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout tests cut slow answers): nothing to tell

    def log_message(self, *args):
        pass


@pytest.fixture
def image_server():
    data = png_bytes()
    _Handler.routes = {
        "/cat.png": (200, {"Content-Type": "image/png", "Content-Length": str(len(data))},
                     data, 0),
        "/page": (200, {"Content-Type": "text/html"}, b"<html></html>", 0),
        "/big": (200, {"Content-Type": "image/png"}, data + b"\0" * 5000, 0),
        "/slow": (200, {"Content-Type": "image/png"}, data, 0.6),
        "/drip": (200, {"Content-Type": "image/png"}, data, 0),
        "/moved": (302, {"Location": "/cat.png", "Content-Length": "0"}, b"", 0),
        "/away": (302, {"Location": "http://127.0.0.2:{port}/cat.png", "Content-Length": "0"},
                  b"", 0),
        "/loop": (302, {"Location": "/loop", "Content-Length": "0"}, b"", 0),
        "/gone": (404, {"Content-Length": "0"}, b"", 0),
    }  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = False  # server_close() waits for every handler: none outlives the test
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.mark.server
def test_urls_are_off_by_default(image_server):
    with pytest.raises(ImageAccessError, match="not fetched"):
        resolve_image(f"{image_server}/cat.png", ImagePolicy.untrusted())
    with pytest.raises(ImageAccessError, match="not fetched"):
        resolve_image(f"{image_server}/cat.png")  # trusted callers too


@pytest.mark.server
def test_urls_never_reach_local_addresses(image_server):
    policy = ImagePolicy.untrusted(allow_urls=True)
    for url in (f"{image_server}/cat.png", "http://localhost:9/x.png", "http://[::1]:9/x.png",
                "http://169.254.169.254/latest/meta-data", "http://2130706433/x.png",
                "http://no-such-host.invalid/x.png"):  # fmt: skip
        with pytest.raises(ImageAccessError, match="public addresses only"):
            resolve_image(url, policy)
    with pytest.raises(ImageAccessError, match="credentials"):
        resolve_image("http://user:pw@93.184.216.34/x.png", policy)


@pytest.mark.server
def test_url_fetch_with_caps(image_server):
    # Loopback is opened by the test-only knob; the caps are what is checked here.
    policy = ImagePolicy.untrusted(
        allow_urls=True, allow_private_addresses=True, max_bytes=1000, timeout_s=1.0
    )
    ref = resolve_image(f"{image_server}/cat.png", policy)
    assert ref["sha256"] == resolve_image(png_bytes())["sha256"]
    assert resolve_image(f"{image_server}/moved", policy)["sha256"] == ref["sha256"]
    for path, match in (("/page", "not an image"), ("/big", "more than 1,000 bytes"),
                        ("/loop", "redirected more than"), ("/gone", "HTTP 404")):  # fmt: skip
        with pytest.raises(ImageError, match=match):
            resolve_image(f"{image_server}{path}", policy)
    hurried = ImagePolicy.untrusted(allow_urls=True, allow_private_addresses=True, timeout_s=0.2)
    for path in ("/slow", "/drip"):  # late headers, or a body that never quite stops
        start = time.monotonic()
        with pytest.raises(ImageError, match="longer than 0.2 s"):
            resolve_image(f"{image_server}{path}", hurried)
        assert time.monotonic() - start < 0.5


@pytest.mark.server
def test_redirects_are_checked_again(image_server, monkeypatch):
    import mai_graph.inputs.sources as sources

    # Pretend 127.0.0.1 is a public host; its redirect to 127.0.0.2 must still be refused.
    monkeypatch.setattr(sources, "is_public_address", lambda a: a == "127.0.0.1")
    policy = ImagePolicy.untrusted(allow_urls=True)
    assert resolve_image(f"{image_server}/moved", policy)["width"] == 16
    with pytest.raises(ImageAccessError, match="public addresses only"):
        resolve_image(f"{image_server}/away", policy)
