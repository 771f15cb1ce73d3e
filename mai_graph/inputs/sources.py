"""Where images may come from: the image policy, and one function from a source to an ImageRef.

Python callers are trusted with their own machine: :meth:`ImagePolicy.trusted` (the default of
:func:`~mai_graph.graph.create_mai_graph`, :func:`~mai_graph.api.run` and the CLI) reads any
local path. Entry points that take input from others (the Studio / ``langgraph dev`` graph, the
chat adapter) use :meth:`ImagePolicy.untrusted` / :meth:`ImagePolicy.from_env`: images arrive as
data URLs or base64, and files are read only under configured roots. Every path outside the
policy is refused with one :class:`~mai_graph.errors.ImageAccessError` message, whether or not
a file exists there. http(s) URLs are off unless the policy enables them; then fetches have size,
time and content-type caps, and no host that resolves to a loopback, private, link-local or
otherwise non-public address is contacted (redirects included).

The fetch is deliberately its own (``http.client`` on a socket whose peer address was checked):
the usual clients resolve a host again when they connect, so a check before the request cannot
stop a name that resolves to a public address once and to a private one the next time (DNS
rebinding); here the address that was checked is the one connected to, on every redirect.

:func:`resolve_image` blocks (file reads, fetches, decoding, the image store): call it off the
event loop, as the graph's first node does.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import ipaddress
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

from mai_graph.errors import ConfigError, ImageAccessError, ImageError, ImageMismatchError
from mai_graph.inputs.images import (
    DEFAULT_MAX_PIXELS,
    ImageRef,
    PixelBudget,
    check_ref,
    make_ref,
    read_file,
)

__all__ = [
    "check_image_count",
    "image_ref",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_IMAGES",
    "DEFAULT_MAX_TOTAL_PIXELS",
    "ImagePolicy",
    "decode_base64",
    "is_public_address",
    "readable_path",
    "resolve_image",
    "resolve_images",
]

DEFAULT_MAX_BYTES = 20_000_000
"""Largest encoded image an untrusted caller may send or a URL may return (20 MB)."""

DEFAULT_MAX_IMAGES = 16
"""Most images one question may carry (``ImagePolicy.max_images``)."""

DEFAULT_MAX_TOTAL_PIXELS = 100_000_000
"""Most pixels of all images and sampled video frames of one question together."""

MAX_REDIRECTS = 3
"""Redirects followed per URL fetch; each target is checked like the first URL."""

_DATA_URL = re.compile(r"^data:image/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,", re.IGNORECASE)
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_WHITESPACE = re.compile(r"\s+")
_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"II*\x00",
               b"MM\x00*")  # fmt: skip
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


@dataclass(frozen=True, slots=True)
class ImagePolicy:
    """Which image sources a graph accepts, and the caps on what it reads.

    Data URLs, base64, bytes and PIL images are always accepted (they carry the image itself).
    Build one with :meth:`trusted`, :meth:`untrusted` or :meth:`from_env`.

    Example:
        >>> policy = ImagePolicy.untrusted(roots=["/srv/images"])
        >>> policy.allow_paths, policy.roots, policy.allow_urls
        (False, (PosixPath('/srv/images'),), False)
    """

    allow_paths: bool = True
    """True: any local path is read (a trusted caller). False: only files under ``roots``."""
    roots: tuple[Path, ...] = ()
    """Folders whose files (after resolving symlinks) untrusted callers may name; absolute."""
    allow_urls: bool = False
    """Fetch ``http://`` / ``https://`` images (with the caps below)."""
    allow_private_addresses: bool = False
    """Let URL fetches reach loopback / private / link-local hosts. For tests and closed
    networks only: it opens the server's own network to whoever sends the URL."""
    max_bytes: int | None = None
    """Largest encoded image read from a file, data URL, base64 or bytes (None: no cap).
    URL fetches are capped at this or :data:`DEFAULT_MAX_BYTES`."""
    timeout_s: float = 10.0
    """Whole-fetch time limit for a URL (connect, redirects, body)."""
    max_pixels: int = DEFAULT_MAX_PIXELS
    """Refuse images with more pixels than this (decompression-bomb guard)."""
    max_images: int = DEFAULT_MAX_IMAGES
    """Most images one question may carry."""
    max_total_pixels: int = DEFAULT_MAX_TOTAL_PIXELS
    """Most pixels of one question's images and sampled video frames together."""

    def __post_init__(self) -> None:
        roots = tuple(Path(r) for r in ([self.roots] if isinstance(self.roots, str | Path)
                                        else self.roots))  # fmt: skip
        relative = [str(r) for r in roots if not r.is_absolute()]
        if relative:
            raise ConfigError(
                f"image roots must be absolute paths, got {relative}",
                parameter="roots",
                value=relative,
                fix="give absolute folders (MAI_GRAPH_IMAGE_ROOTS=/srv/images:/data/pics)",
            )
        if self.max_bytes is not None and not self.max_bytes > 0:
            raise ConfigError(
                f"max_bytes must be > 0 or None, got {self.max_bytes}", parameter="max_bytes"
            )
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout_s must be > 0, got {self.timeout_s}", parameter="timeout_s")
        for name in ("max_pixels", "max_images", "max_total_pixels"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}", parameter=name)
        object.__setattr__(self, "roots", roots)

    @classmethod
    def trusted(cls, **overrides: Any) -> ImagePolicy:
        """The Python caller's policy: any local path, no byte cap, URLs off."""
        return cls(**{"allow_paths": True, **overrides})

    @classmethod
    def untrusted(cls, roots: Any = (), **overrides: Any) -> ImagePolicy:
        """For input from others: images inline, files only under ``roots``, URLs off, 20 MB."""
        settings = {"max_bytes": DEFAULT_MAX_BYTES, **overrides}
        return cls(allow_paths=False, roots=roots, **settings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ImagePolicy:
        """The untrusted policy configured by environment variables (servers).

        ``MAI_GRAPH_IMAGE_ROOTS``: allowed folders, separated by ``os.pathsep``;
        ``MAI_GRAPH_IMAGE_URLS``: ``1`` to fetch http(s) URLs.

        Example:
            >>> ImagePolicy.from_env({"MAI_GRAPH_IMAGE_URLS": "1"}).allow_urls
            True
        """
        env = os.environ if env is None else env
        roots = [r for r in env.get("MAI_GRAPH_IMAGE_ROOTS", "").split(os.pathsep) if r.strip()]
        urls = env.get("MAI_GRAPH_IMAGE_URLS", "").strip().lower()
        if urls not in _TRUE + _FALSE:
            raise ConfigError(
                f"MAI_GRAPH_IMAGE_URLS must be 1 or 0, got {urls!r}",
                parameter="MAI_GRAPH_IMAGE_URLS",
                value=urls,
            )
        try:
            return cls.untrusted(roots=roots, allow_urls=urls in _TRUE)
        except ConfigError as exc:
            raise ConfigError(
                f"MAI_GRAPH_IMAGE_ROOTS: {exc}", parameter="MAI_GRAPH_IMAGE_ROOTS", value=roots
            ) from None

    def allowed(self) -> str:
        """What this policy accepts, in words (for messages and forms)."""
        kinds = ["a data URL or base64 of an image file"]
        if self.allow_urls:
            kinds.append("an http(s) URL")
        if self.allow_paths:
            kinds.append("a file path")
        elif self.roots:
            kinds.append("a file under the allowed image roots")
        return ", ".join(kinds[:-1]) + (", or " if len(kinds) > 1 else "") + kinds[-1]


def image_ref(source: Any, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageRef:
    """Validate an image from a trusted caller and return its reference (blocking).

    This is the Python caller's door: any local path is read. Inputs from others go through
    :func:`resolve_image` with an untrusted :class:`ImagePolicy`.

    Args:
        source: A file path (``str`` / ``Path``, ``~`` expanded, ``file://``), a
            ``data:image/...;base64,`` URL or plain base64 of an image file, raw encoded bytes,
            a PIL image, or an existing :class:`ImageRef` (returned as is; checked when loaded).
        max_pixels: Refuse images with more pixels than this.

    Returns:
        An :class:`ImageRef`. In-memory sources (bytes, data URLs, PIL images) are written once
        to the image store by hash.

    Raises:
        ImageError: Missing, empty, corrupt, oversized or unsupported images.
    """
    return resolve_image(source, ImagePolicy.trusted(max_pixels=max_pixels))


def check_image_count(count: int, policy: ImagePolicy | None) -> None:
    """Refuse more images than ``policy.max_images`` (checked before any is decoded).

    Raises:
        ImageError: Too many images.
    """
    limit = DEFAULT_MAX_IMAGES if policy is None else policy.max_images
    if count > limit:
        raise ImageError(
            f"the question has {count} images, over the limit of {limit}",
            parameter="images",
            value=count,
            fix="send fewer images (e.g. several combined into one), or raise "
            "ImagePolicy.max_images",
        )


def resolve_images(sources: Sequence[Any], policy: ImagePolicy | None = None) -> list[ImageRef]:
    """Resolve one question's images in order, holding them to the policy's total (blocking).

    The count is checked before any image is read, and each image's pixel count (from its
    header) against what the images before it left of ``policy.max_total_pixels`` before it
    is decoded: a request over the total is refused having decoded no more than the total.

    Raises:
        ImageError: Too many images, or more pixels together than ``max_total_pixels``;
            and everything :func:`resolve_image` raises.
    """
    policy = ImagePolicy.trusted() if policy is None else policy
    check_image_count(len(sources), policy)
    budget = PixelBudget(policy.max_total_pixels, len(sources))
    return [resolve_image(source, policy, budget=budget) for source in sources]


def resolve_image(
    source: Any, policy: ImagePolicy | None = None, *, budget: PixelBudget | None = None
) -> ImageRef:
    """Validate an image source under a policy and return its reference (blocking).

    Args:
        source: A ``data:image/...;base64,`` URL, plain base64 of an image file, a file path
            (``str`` / ``Path``, ``file://``), an http(s) URL, encoded bytes, a PIL image, or
            an :class:`~mai_graph.inputs.images.ImageRef` (trusted: returned as is and verified when
            loaded; untrusted: treated as a path and its pixel hash checked now).
        policy: The policy; ``None`` is :meth:`ImagePolicy.trusted`.
        budget: The pixels the question's images may still hold (:func:`resolve_images`);
            checked against the image's header before it is decoded.

    Raises:
        ImageAccessError: The policy refuses the source (one message for every refused path).
        ImageMismatchError: An untrusted reference's pixels differ from its hash.
        ImageError: The image is empty, corrupt, too large or of an unsupported kind.
    """
    from PIL import Image

    policy = ImagePolicy.trusted() if policy is None else policy
    if isinstance(source, Image.Image):
        return make_ref(source, "<PIL image>", max_pixels=policy.max_pixels, budget=budget)
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        if not data:
            raise ImageError(
                "image bytes are empty", parameter="image", value=b"", fix="pass encoded bytes"
            )
        return make_ref(
            _capped(data, "<bytes>", policy), "<bytes>", max_pixels=policy.max_pixels, budget=budget
        )
    if isinstance(source, Mapping) and {"path", "sha256"} <= source.keys():
        return _reference(check_ref(source), policy, budget)
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str):
        raise ImageError(
            f"unsupported image source of type {type(source).__name__}",
            parameter="image",
            value=repr(source)[:80],
            fix=f"give {policy.allowed()}",
        )
    if match := _DATA_URL.match(source):
        data = _decode_base64(source[match.end() :], "<data URL>", policy)
        return make_ref(data, "<data URL>", max_pixels=policy.max_pixels, budget=budget)
    scheme = source[: source.find(":")].lower() if ":" in source else ""
    if scheme in ("http", "https"):
        if not policy.allow_urls:
            raise ImageAccessError(
                f"image URLs are not fetched here: {_shown(source)}",
                parameter="image",
                value=_shown(source),
                fix=f"download the image and give {policy.allowed()}",
            )
        data = fetch_image(source, policy)
        return make_ref(data, _shown(source), max_pixels=policy.max_pixels, budget=budget)
    if scheme == "file":
        path = _file_url_path(source, policy)
        return _from_path(path, source, policy, budget)
    if _looks_base64(source):
        data = _decode_base64(source, "<base64>", policy)
        return make_ref(data, "<base64>", max_pixels=policy.max_pixels, budget=budget)
    return _from_path(source, source, policy, budget)


# -- inline images -----------------------------------------------------------------------------


def _looks_base64(text: str) -> bool:
    """Whether ``text`` is base64 of an image file (by its first bytes).

    >>> _looks_base64("iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB")
    True
    >>> _looks_base64("photos/cat.png"), _looks_base64("QkFCQ")
    (False, False)
    """
    compact = _WHITESPACE.sub("", text[:64])
    if len(compact) < 16 or not _BASE64.match(compact[:16]):
        return False
    head = base64.b64decode(compact[:16])
    return head.startswith(_SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def _decode_base64(text: str, label: str, policy: ImagePolicy) -> bytes:
    body = _WHITESPACE.sub("", text)
    if policy.max_bytes is not None and len(body) // 4 * 3 > policy.max_bytes + 3:
        raise ImageError(
            f"image {label} holds about {len(body) // 4 * 3:,} bytes, over the limit of "
            f"{policy.max_bytes:,}",
            parameter="image",
            value=label,
            fix="send a smaller image (resize or compress it)",
        )
    try:
        data = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(
            f"image {label} is not valid base64",
            parameter="image",
            value=text[:64],
            fix="encode the image bytes with standard base64",
        ) from exc
    if not data:
        raise ImageError(f"image {label} is empty", parameter="image", fix="send the image bytes")
    return _capped(data, label, policy)


def _capped(data: bytes, label: str, policy: ImagePolicy) -> bytes:
    if policy.max_bytes is not None and len(data) > policy.max_bytes:
        raise ImageError(
            f"image {label} has {len(data):,} bytes, over the limit of {policy.max_bytes:,}",
            parameter="image",
            value=label,
            fix="send a smaller image (resize or compress it)",
        )
    return data


# -- files -------------------------------------------------------------------------------------


def _shown(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _refused(given: str, policy: ImagePolicy) -> ImageAccessError:
    """The one message for every path the policy refuses (it never says whether a file exists)."""
    return ImageAccessError(
        f"image {_shown(given)!r} is not allowed: give {policy.allowed()}",
        parameter="image",
        value=_shown(given),
        fix="send the image itself as data:image/png;base64,...; the server's operator can "
        "allow folders with MAI_GRAPH_IMAGE_ROOTS",
    )


def _file_url_path(url: str, policy: ImagePolicy) -> str:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        if not policy.allow_paths:
            raise _refused(url, policy)
        raise ImageError(
            f"file URL names another host: {_shown(url)}",
            parameter="image",
            value=_shown(url),
            fix="use file:///absolute/path for a local file",
        )
    return url2pathname(unquote(parts.path))


def _confined(path: str, given: str, policy: ImagePolicy) -> Path:
    """``path`` resolved, if it lies under one of the policy's roots (no I/O beyond lstat)."""
    candidate = Path(path)
    if "\x00" in path or not candidate.is_absolute() or ".." in candidate.parts:
        raise _refused(given, policy)
    real = Path(os.path.realpath(candidate))
    for root in policy.roots:
        if real.is_relative_to(os.path.realpath(root)):
            return real
    raise _refused(given, policy)


def _from_path(
    path: str, given: str, policy: ImagePolicy, budget: PixelBudget | None = None
) -> ImageRef:
    if policy.allow_paths:
        file = Path(path).expanduser()
        data = read_file(file, max_bytes=policy.max_bytes)
        return make_ref(
            data, str(file), max_pixels=policy.max_pixels, file=file.resolve(), budget=budget
        )
    real = _confined(path, given, policy)
    # Inside a root every error may say what it is: those files are the caller's to read.
    data = read_file(real, max_bytes=policy.max_bytes, nofollow=True)
    return make_ref(data, path, max_pixels=policy.max_pixels, file=real, budget=budget)


def readable_path(source: str, policy: ImagePolicy) -> tuple[Path, bool]:
    """The file a path or ``file://`` URL names, if ``policy`` lets the caller read it.

    For media other than single images (videos) that are read the same way; nothing is read.

    Returns:
        The path, and whether a symbolic link as its last component must be refused (files
        under the allowed roots of an untrusted policy).

    Raises:
        ImageAccessError: The policy refuses the path (one message for every refused path).
    """
    given = source
    if source[:5].lower() == "file:":
        source = _file_url_path(source, policy)
    if policy.allow_paths:
        return Path(source).expanduser(), False
    return _confined(source, given, policy), True


def decode_base64(text: str, label: str, policy: ImagePolicy) -> bytes:
    """Base64 text (whitespace allowed) as bytes, held to the policy's byte cap.

    Raises:
        ImageError: Not valid base64, empty, or over ``policy.max_bytes``.
    """
    return _decode_base64(text, label, policy)


def _reference(ref: ImageRef, policy: ImagePolicy, budget: PixelBudget | None = None) -> ImageRef:
    if policy.allow_paths:
        if budget is not None:
            budget.take(ref["width"], ref["height"], "<image reference>")
        return ref  # checked against its hash when loaded (load_image)
    real = _confined(ref["path"], ref["path"], policy)
    data = read_file(real, max_bytes=policy.max_bytes, nofollow=True)
    fresh = make_ref(data, ref["path"], max_pixels=policy.max_pixels, file=real, budget=budget)
    if fresh["sha256"] != ref["sha256"]:
        raise ImageMismatchError(
            f"image reference {ref['sha256'][:12]}... does not match the pixels of "
            f"{_shown(ref['path'])!r} (stale or forged)",
            parameter="image",
            value=_shown(ref["path"]),
            fix="send the image itself, or a reference made from the current file",
        )
    return fresh


# -- URLs --------------------------------------------------------------------------------------


def is_public_address(address: str) -> bool:
    """Whether an IP address is globally routable (not loopback, private, link-local, ...).

    IPv6 forms that embed an IPv4 address (mapped, 6to4, Teredo, NAT64) are judged by it.

    >>> [is_public_address(a) for a in ("93.184.216.34", "127.0.0.1", "10.1.2.3")]
    [True, False, False]
    >>> [is_public_address(a) for a in ("169.254.169.254", "::ffff:192.168.0.1", "fe80::1%2")]
    [False, False, False]
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None and not is_public_address(str(embedded)):
            return False
    return ip.is_global and not ip.is_multicast


def _address(host: str, port: int, url: str, policy: ImagePolicy) -> str:
    """The address to connect to; every address the host resolves to must be public."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        infos = []
    addresses = [str(info[4][0]) for info in infos]
    if not addresses or not (
        policy.allow_private_addresses or all(is_public_address(a) for a in addresses)
    ):
        raise ImageAccessError(
            f"image URL {_shown(url)} is not allowed: its host does not resolve to public "
            "addresses only",
            parameter="image",
            value=_shown(url),
            fix="use a public http(s) URL, or send the image as a data URL",
        )
    return addresses[0]


def _too_slow(url: str, policy: ImagePolicy) -> ImageError:
    return ImageError(
        f"image URL {_shown(url)} took longer than {policy.timeout_s:g} s",
        parameter="image",
        value=_shown(url),
        fix="use a faster host, or send the image as a data URL",
    )


def _remaining(deadline: float, url: str, policy: ImagePolicy) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _too_slow(url, policy)
    return left


def fetch_image(url: str, policy: ImagePolicy) -> bytes:
    """The bytes of an image URL under the policy's caps (blocking).

    Connects to the address it checked (no second DNS lookup), follows up to
    :data:`MAX_REDIRECTS` redirects (each checked again), and needs status 200, an ``image/*``
    content type and at most ``max_bytes`` (default :data:`DEFAULT_MAX_BYTES`) within
    ``timeout_s`` (a watchdog cuts the connection at the deadline, however slowly the server
    sends). Proxy settings are not used.

    Raises:
        ImageAccessError: URLs are off, or the host is not public.
        ImageError: The fetch failed, timed out, or returned something that is not an image.
    """
    if not policy.allow_urls:
        raise ImageAccessError(
            f"image URLs are not fetched here: {_shown(url)}", parameter="image", value=url
        )
    limit = policy.max_bytes or DEFAULT_MAX_BYTES
    deadline = time.monotonic() + policy.timeout_s
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port < 0:
            raise ImageError(
                f"not an http(s) image URL: {_shown(url)}", parameter="image", value=_shown(url)
            )
        if parts.username is not None or parts.password is not None:
            raise ImageAccessError(
                "image URLs with credentials are not fetched",
                parameter="image",
                fix="use a URL without user:password@",
            )
        address = _address(parts.hostname, port, url, policy)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn: http.client.HTTPConnection | None = None
        sock: socket.socket | None = None
        watchdog: threading.Timer | None = None
        try:
            sock = socket.create_connection((address, port), _remaining(deadline, url, policy))
            watchdog = threading.Timer(_remaining(deadline, url, policy), _cut, (sock,))
            watchdog.daemon = True
            watchdog.start()
            if parts.scheme == "https":
                tls = ssl.create_default_context()
                sock = tls.wrap_socket(sock, server_hostname=parts.hostname)
                conn = http.client.HTTPSConnection(parts.hostname, port, context=tls)
            else:
                conn = http.client.HTTPConnection(parts.hostname, port)
            conn.sock = sock  # already connected to the checked address
            conn.request("GET", target, headers={"Accept": "image/*", "User-Agent": "mai-graph",
                                                 "Accept-Encoding": "identity"})  # fmt: skip
            sock.settimeout(_remaining(deadline, url, policy))
            resp = conn.getresponse()
            location = resp.getheader("Location")
            if resp.status in (301, 302, 303, 307, 308) and location:
                url = urljoin(url, location)
                continue
            data = _body(resp, url, limit)
            _remaining(deadline, url, policy)  # cut off by the watchdog: the body is partial
            return data
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, TimeoutError) or time.monotonic() >= deadline:
                raise _too_slow(url, policy) from exc
            raise ImageError(
                f"cannot fetch image URL {_shown(url)}: {exc}",
                parameter="image",
                value=_shown(url),
                fix="check the URL, or send the image as a data URL",
            ) from exc
        finally:
            if watchdog is not None:
                watchdog.cancel()
            if conn is not None:
                conn.close()
            if sock is not None:
                sock.close()
    raise ImageError(
        f"image URL {_shown(url)} redirected more than {MAX_REDIRECTS} times",
        parameter="image",
        value=_shown(url),
    )


def _cut(sock: socket.socket) -> None:
    """End a fetch that ran out of time (its pending read returns at once)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _body(resp: http.client.HTTPResponse, url: str, limit: int) -> bytes:
    shown = _shown(url)
    if resp.status != 200:
        raise ImageError(
            f"image URL {shown} answered HTTP {resp.status}", parameter="image", value=shown
        )
    ctype = (resp.getheader("Content-Type") or "").split(";")[0].strip().lower()
    if not ctype.startswith("image/"):
        raise ImageError(
            f"image URL {shown} is not an image (content type {ctype or 'missing'!r})",
            parameter="image",
            value=shown,
            fix="give the URL of the image file itself",
        )
    length = resp.getheader("Content-Length")
    if length and length.isdigit() and int(length) > limit:
        raise ImageError(
            f"image URL {shown} has {int(length):,} bytes, over the limit of {limit:,}",
            parameter="image",
            value=shown,
        )
    chunks: list[bytes] = []
    size = 0
    while chunk := resp.read1(min(65536, limit + 1 - size)):
        size += len(chunk)
        if size > limit:
            raise ImageError(
                f"image URL {shown} sent more than {limit:,} bytes", parameter="image", value=shown
            )
        chunks.append(chunk)
    if not size:
        raise ImageError(f"image URL {shown} sent no bytes", parameter="image", value=shown)
    return b"".join(chunks)
