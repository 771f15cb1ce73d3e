"""Images as references: validated once, stored in state as path + pixel hash, loaded on demand.

State never holds pixels, so any checkpointer can store it. The hash is the sha256 of the decoded
RGB pixels (plus size), so the same picture saved as PNG or as a data URL gets one hash; engines use
it as the multimodal cache key.

Where images may come from is decided by :mod:`~mai_graph.inputs.sources` (the image policy);
this module
decodes, hashes, stores and loads. Everything here that touches files or decodes pixels blocks:
call it off the event loop (the graph does; :func:`aload_image` is the async door).

The image store keeps in-memory images (data URLs, bytes, PIL images, non-RGB files) as PNG
files named by their pixel hash, in ``$MAI_GRAPH_IMAGE_DIR`` (default: a private folder of the
user in the temp directory), bounded by ``$MAI_GRAPH_IMAGE_STORE_MB`` (default 1024): the least
recently used files go first, never one used in the last :data:`STORE_KEEP_S` seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import stat
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from typing_extensions import TypedDict

from mai_graph.errors import ConfigError, ImageError, ImageMismatchError

if TYPE_CHECKING:
    from PIL import Image as PILImage

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_PIXEL_CACHE_MB",
    "MAX_ENV_MB",
    "STORE_KEEP_S",
    "ImageRef",
    "PixelBudget",
    "aload_image",
    "check_ref",
    "check_store",
    "load_image",
    "PIXELS",
    "PixelCache",
    "pixel_cache_limit",
    "store_bytes",
    "store_dir",
]

DEFAULT_MAX_PIXELS = 40_000_000
"""Images with more pixels than this are refused (decompression-bomb guard)."""

DEFAULT_STORE_MB = 1024.0
"""Default size bound of the image store, in MB (``$MAI_GRAPH_IMAGE_STORE_MB``)."""

STORE_KEEP_S = 600.0
"""Store files used within this many seconds are never evicted (running requests need them)."""

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ImageRef(TypedDict):
    """A validated image: where its bytes are and what its pixels hash to."""

    path: str
    """A readable image file (the caller's file, or a copy in the image store)."""
    sha256: str
    """sha256 of the decoded RGB pixels and size; the engines' multimodal cache key."""
    width: int
    height: int


def check_ref(value: Mapping[str, Any]) -> ImageRef:
    """``value`` if it has the shape of an :class:`ImageRef` (no file access).

    Raises:
        ImageError: A key is missing or of the wrong type, or the hash is not 64 hex digits.
    """
    ok = (
        isinstance(value.get("path"), str)
        and bool(value["path"])
        and isinstance(value.get("sha256"), str)
        and bool(_SHA256.match(value["sha256"]))
        and all(
            isinstance(value.get(k), int) and not isinstance(value.get(k), bool) and value[k] > 0
            for k in ("width", "height")
        )
    )
    if not ok:
        raise ImageError(
            f"malformed image reference with keys {sorted(value)}",
            parameter="image",
            value={k: value[k] for k in sorted(value) if k in ("width", "height")},
            fix="pass an ImageRef made by image_ref() (path, sha256, width, height), "
            "or the image itself",
        )
    return cast(ImageRef, value)


class PixelBudget:
    """The pixels one question's images may still hold (``max_total_pixels`` less those read).

    Each image takes its share from its header, before it is decoded, so a question over the
    total is refused having decoded no more than the total.
    """

    def __init__(self, total: int, count: int = 0) -> None:
        self.total, self.left, self.count, self.seen = total, total, count, 0

    def take(self, width: int, height: int, label: str) -> None:
        """Count an image of ``width`` x ``height`` against the budget.

        >>> budget = PixelBudget(100, count=2)
        >>> budget.take(5, 10, "a")
        >>> try:
        ...     budget.take(8, 8, "b")
        ... except ImageError as exc:
        ...     print(str(exc).split(" together ")[1].split(". Fix")[0])
        (image 2 of 2, b, has 64), over the limit of 100
        """
        self.seen += 1
        pixels = width * height
        if pixels > self.left:
            used = self.total - self.left
            of = f" of {self.count}" if self.count else ""
            raise ImageError(
                f"the question's images have at least {used + pixels:,} pixels together (image "
                f"{self.seen}{of}, {label}, has {pixels:,}), over the limit of {self.total:,}",
                parameter="images",
                value=used + pixels,
                fix="send fewer or smaller images (or ask the operator for a larger "
                "max_total_pixels)",
            )
        self.left -= pixels


# -- decoding ----------------------------------------------------------------------------------


def _to_rgb(img: PILImage.Image, source: str) -> PILImage.Image:
    """Convert any supported mode to 8-bit RGB; transparency is composited on white."""
    from PIL import Image

    mode = img.mode
    if mode == "RGB":
        return img
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        # 16/32-bit grey: rescale the actual range to 0..255.
        img32 = img.convert("F") if mode != "F" else img
        lo, hi = cast(tuple[float, float], img32.getextrema())
        scale = 255.0 / (hi - lo) if hi > lo else 0.0
        return img32.point(lambda v: (v - lo) * scale).convert("L").convert("RGB")
    if mode in ("1", "L", "CMYK", "YCbCr", "LAB", "HSV"):
        return img.convert("RGB")
    if mode == "P" or mode == "PA":
        img = img.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    raise ImageError(
        f"unsupported image mode {mode!r} in {source}",
        parameter="image",
        value=source,
        fix="save the image as RGB (PNG or JPEG)",
    )


def _upright(img: PILImage.Image) -> None:
    """Turn a camera image upright by its EXIF orientation tag, in place (no tag: unchanged)."""
    from PIL import ImageOps

    try:
        ImageOps.exif_transpose(img, in_place=True)
    except Exception:  # noqa: BLE001 - a malformed EXIF block leaves the pixels as stored
        pass


def _open(
    data: bytes, source: str, max_pixels: int, budget: PixelBudget | None = None
) -> PILImage.Image:
    """Decode and validate; returns the image in its original mode, upright (EXIF).

    The pixel limit and ``budget`` are checked against the header, before decoding.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            width, height = img.size
            if width * height > max_pixels:
                raise ImageError(
                    f"image {source} has {width}x{height} = {width * height:,} pixels, "
                    f"over the limit of {max_pixels:,}",
                    parameter="image",
                    value=source,
                    fix="resize the image, or raise max_pixels if you trust the source",
                )
            if budget is not None:
                budget.take(width, height, source)
            img.load()
            _upright(img)
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageError(
            f"image {source} is too large to decode safely ({exc})",
            parameter="image",
            value=source,
            fix="resize the image, or raise max_pixels if you trust the source",
        ) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        from mai_graph.text import without_reprs

        raise ImageError(
            f"cannot decode image {source}: {without_reprs(str(exc), source)}",
            parameter="image",
            value=source,
            fix="pass a valid PNG, JPEG, WebP, GIF or BMP file",
        ) from exc
    if img.width == 0 or img.height == 0:
        raise ImageError(
            f"image {source} is empty ({img.width}x{img.height})",
            parameter="image",
            value=source,
            fix="pass an image with pixels",
        )
    return img


_HASH_CHUNK_BYTES = 4 << 20


def _pixel_hash(img: PILImage.Image) -> str:
    """sha256 of ``WxH:`` and the RGB rows, read a band of rows at a time (no full copy)."""
    digest = hashlib.sha256(f"{img.width}x{img.height}:".encode())
    rows = max(1, _HASH_CHUNK_BYTES // max(1, img.width * 3))
    for top in range(0, img.height, rows):
        digest.update(img.crop((0, top, img.width, min(img.height, top + rows))).tobytes())
    return digest.hexdigest()


def read_file(path: Path, *, max_bytes: int | None = None, nofollow: bool = False) -> bytes:
    """The bytes of a regular, non-empty file (FIFOs and devices are refused without waiting).

    Args:
        path: The file.
        max_bytes: Refuse files larger than this.
        nofollow: Refuse a symbolic link as the last component.

    Raises:
        ImageError: Not found, not a regular file, empty, too large or unreadable; the message
            says which (callers that must not reveal it replace the error).
    """
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | (getattr(os, "O_NOFOLLOW", 0) if nofollow else 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise ImageError(
            f"image file not found: {path}",
            parameter="image",
            value=str(path),
            fix="pass the path of an existing image file",
        ) from exc
    except OSError as exc:
        raise ImageError(
            f"cannot open image file {path}: {exc.strerror}",
            parameter="image",
            value=str(path),
            fix="pass the path of a readable image file",
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ImageError(
                f"image path is not a file: {path}",
                parameter="image",
                value=str(path),
                fix="pass the path of an image file, not a directory or device",
            )
        if max_bytes is not None and info.st_size > max_bytes:
            raise ImageError(
                f"image file {path} has {info.st_size:,} bytes, over the limit of {max_bytes:,}",
                parameter="image",
                value=str(path),
                fix="pass a smaller image, or raise max_bytes if you trust the source",
            )
        with open(fd, "rb", closefd=False) as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if not data:
        raise ImageError(
            f"image file is empty (0 bytes): {path}",
            parameter="image",
            value=str(path),
            fix="re-export or re-download the image",
        )
    if max_bytes is not None and len(data) > max_bytes:
        raise ImageError(
            f"image file {path} grew over the limit of {max_bytes:,} bytes while being read",
            parameter="image",
            value=str(path),
        )
    return data


def make_ref(
    source: bytes | PILImage.Image,
    label: str,
    *,
    max_pixels: int,
    file: Path | None = None,
    budget: PixelBudget | None = None,
) -> ImageRef:
    """Decode, validate and hash an image into its reference (blocking).

    Args:
        source: Encoded image bytes, or a PIL image.
        label: How messages name the image (a path, ``<data URL>``, ...).
        max_pixels: Refuse images with more pixels than this.
        file: The file ``source`` was read from; the reference points at it when it holds RGB
            pixels, else (and for in-memory sources) at a PNG copy in the image store.
        budget: The question's remaining pixels, taken from before decoding.
    """
    from PIL import Image

    if isinstance(source, Image.Image):
        if source.width <= 0 or source.height <= 0:
            raise ImageError(
                f"image {label} is empty ({source.width}x{source.height})",
                parameter="image",
                value=f"{source.width}x{source.height}",
                fix="pass an image with pixels",
            )
        if source.width * source.height > max_pixels:
            raise ImageError(
                f"image {label} has {source.width}x{source.height} pixels, "
                f"over the limit of {max_pixels:,}",
                parameter="image",
                fix="resize the image, or raise max_pixels",
            )
        if budget is not None:
            budget.take(source.width, source.height, label)
        raw = source
    else:
        raw = _open(source, label, max_pixels, budget)
    img = _to_rgb(raw, label)
    digest = _pixel_hash(img)
    # Non-RGB files are stored converted, so every backend reads the same pixels.
    path = file if file is not None and raw.mode == "RGB" else _store(img, digest)
    _cache_put(digest, str(path), img)
    return ImageRef(path=str(path), sha256=digest, width=img.width, height=img.height)


# -- the image store ---------------------------------------------------------------------------


MAX_ENV_MB = 1_000_000
"""The largest size an ``*_MB`` variable may give (a terabyte): more would make the server's
stated memory bound meaningless, and no machine this runs on has it."""


def _env_bytes(name: str, default_mb: float, *, zero: bool, must: str, fix: str) -> int:
    """``$name`` in bytes: megabytes (``default_mb`` when unset), finite, above 0 or ``zero``.

    Raises:
        ConfigError: Not such a number; the message says it ``must`` be, the fix is ``fix``.
    """
    raw = os.environ.get(name)
    try:
        mb = float(raw) if raw else default_mb
    except ValueError:
        mb = -1.0
    if not ((0 <= mb) if zero else (0 < mb)) or mb > MAX_ENV_MB:
        raise ConfigError(
            f"{name} must be {must} (at most {MAX_ENV_MB:,} MB), got {raw!r:.40}",
            parameter=name,
            value=str(raw)[:40],
            fix=fix,
        )
    return int(mb * 1_000_000)


def _store_limit() -> int:
    return _env_bytes("MAI_GRAPH_IMAGE_STORE_MB", DEFAULT_STORE_MB, zero=False,
                      must="a positive number of MB",
                      fix="set it to e.g. 1024, or unset it")  # fmt: skip


def store_dir() -> Path:
    """The image store's folder, created private (mode 0700) if missing (blocking).

    ``$MAI_GRAPH_IMAGE_DIR`` if set, else ``mai-graph-images-<uid>`` in the temp directory
    (which must then be a directory of this user, not a link).

    Raises:
        ImageError: The default folder exists but is not this user's private directory.
    """
    configured = os.environ.get("MAI_GRAPH_IMAGE_DIR")
    if configured:
        path = Path(configured).expanduser()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path
    uid = os.getuid() if hasattr(os, "getuid") else None
    path = Path(tempfile.gettempdir()) / f"mai-graph-images-{uid if uid is not None else 'user'}"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or (uid is not None and info.st_uid != uid):
        raise ImageError(
            f"the image store {path} is not a private directory of this user",
            parameter="MAI_GRAPH_IMAGE_DIR",
            value=str(path),
            fix="remove it, or set MAI_GRAPH_IMAGE_DIR to a folder only this user can write",
        )
    return path


def check_store() -> Path:
    """The image store's folder, checked as a server checks it at start-up (blocking).

    Its size bound (``$MAI_GRAPH_IMAGE_STORE_MB``) must be a positive number, and its folder
    (:func:`store_dir`) a private directory this user can write a file in.

    Raises:
        ConfigError: Either is not, naming the variable and its value.
    """
    _store_limit()
    where = os.environ.get("MAI_GRAPH_IMAGE_DIR") or None
    fix = "set MAI_GRAPH_IMAGE_DIR to a folder only this user can write, or unset it"
    try:
        path = store_dir()
        probe = path / f".check.{os.getpid()}.{threading.get_ident()}.tmp"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except ImageError as exc:  # the default folder is not this user's private directory
        raise ConfigError(
            f"the image store {exc.value} is not a private directory of this user",
            parameter="MAI_GRAPH_IMAGE_DIR",
            value=exc.value,
            fix=fix,
        ) from None
    except OSError as exc:
        shown = where or exc.filename
        raise ConfigError(
            f"the image store {shown} is not a writable folder: {exc.strerror or exc}",
            parameter="MAI_GRAPH_IMAGE_DIR",
            value=shown,
            fix=fix,
        ) from None
    return path


def _store(img: PILImage.Image, digest: str) -> Path:
    """The store's copy of ``img`` (written once, named by its hash); marks it recently used."""
    path = store_dir() / f"{digest}.png"
    try:
        os.utime(path)  # already stored: keep it from eviction
        return path
    except FileNotFoundError:
        pass
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return store_bytes(buf.getvalue(), path.name)


def store_bytes(data: bytes, name: str) -> Path:
    """Keep ``data`` in the image store as ``name``; marks it recently used (blocking).

    ``name`` is a content hash with a ``.png`` or ``.vid`` suffix; the file is written once and
    evicted like the store's images.

    Videos given inline are kept here so decoders can read them as files (blocking).
    """
    directory = store_dir()
    path = directory / name
    try:
        os.utime(path)  # already stored: keep it from eviction
        return path
    except FileNotFoundError:
        pass
    _prune(directory, need=len(data))
    tmp = directory / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)
        with open(os.open(tmp, flags, 0o600), "wb", closefd=True) as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        _unlink(str(tmp))
        raise ImageError(
            f"cannot write to the image store {directory}: {exc.strerror}",
            parameter="MAI_GRAPH_IMAGE_DIR",
            value=str(directory),
            fix="free disk space, or set MAI_GRAPH_IMAGE_DIR to a writable folder",
        ) from exc
    return path


def _prune(directory: Path, *, need: int = 0) -> None:
    """Evict least recently used store files until ``need`` more bytes fit under the bound.

    Files used within :data:`STORE_KEEP_S` are kept; stale temp files of crashed writers are
    removed.

    Raises:
        ImageError: The store is full of recently used images.
    """
    limit = _store_limit()
    if need > limit:  # no wait can help: the caller's image, not the server, is the problem
        raise ImageError(
            f"the image needs {need:,} bytes in the server's image store, more than the whole "
            f"store holds ({limit:,} bytes)",
            parameter="image",
            value=need,
            fix="send a smaller image (fewer pixels)",
        )
    now = time.time()
    total = 0
    files: list[tuple[float, int, str]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if entry.name.endswith(".tmp") and now - info.st_mtime > STORE_KEEP_S:
                _unlink(entry.path)
                continue
            total += info.st_size
            if entry.name.endswith((".png", ".vid")):
                files.append((info.st_mtime, info.st_size, entry.path))
    if total + need <= limit:
        return
    for mtime, size, path in sorted(files):
        if total + need <= limit or now - mtime < STORE_KEEP_S:
            break
        _unlink(path)
        total -= size
    if total + need > limit:
        raise ImageError(
            f"the image store is full ({total:,} bytes of recently used images; the bound is "
            f"{limit:,} bytes)",
            parameter="MAI_GRAPH_IMAGE_STORE_MB",
            value=limit,
            fix="retry in a few minutes, or raise MAI_GRAPH_IMAGE_STORE_MB",
        )


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# -- loading -----------------------------------------------------------------------------------

DEFAULT_PIXEL_CACHE_MB = 256.0
"""Default bound of the decoded-pixel cache, in MB (``$MAI_GRAPH_PIXEL_CACHE_MB``)."""


def pixel_cache_limit() -> int:
    """The pixel cache's bound in bytes: ``$MAI_GRAPH_PIXEL_CACHE_MB`` (0 turns it off).

    Raises:
        ConfigError: The variable is not a number >= 0.
    """
    return _env_bytes("MAI_GRAPH_PIXEL_CACHE_MB", DEFAULT_PIXEL_CACHE_MB, zero=True,
                      must="a number of MB >= 0",
                      fix="set it to e.g. 256 (0: no cache), or unset it")  # fmt: skip


def pixel_bytes(value: PILImage.Image | list[PILImage.Image]) -> int:
    """Bytes of decoded pixels in an image or a list of frames (Pillow: RGB in 4 a pixel)."""
    items = value if isinstance(value, list) else [value]
    return sum(img.width * img.height * _PIXEL_BYTES.get(img.mode, 4) for img in items)


_PIXEL_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}


class PixelCache:
    """Decoded pixels by key, least recently used dropped first, bounded in entries and bytes.

    The byte bound is :func:`pixel_cache_limit`, read at each insert. Thread-safe.

    One cache holds the images and the sampled video frames of every run in the process, so
    its bound is the process's whole bound for pixels kept between loads.
    """

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._items: OrderedDict[tuple[str, ...], Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """Bytes of pixels held now."""
        with self._lock:
            return self._bytes

    def get(self, key: tuple[str, ...]) -> Any:
        """The value under ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: tuple[str, ...], value: Any) -> None:
        """Keep ``value`` (an image or a list of frames), dropping the oldest over the bound."""
        limit, size = pixel_cache_limit(), pixel_bytes(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= pixel_bytes(old)
            if size > limit:
                return  # larger than the whole bound: not kept
            self._items[key] = value
            self._bytes += size
            while len(self._items) > self.entries or self._bytes > limit:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= pixel_bytes(dropped)

    def clear(self) -> None:
        """Drop everything."""
        with self._lock:
            self._items.clear()
            self._bytes = 0


PIXELS = PixelCache(entries=64)
"""The process's pixel cache (images by pixel hash and path; video frames under ``video``)."""


def _cache_put(digest: str, path: str, img: PILImage.Image) -> None:
    PIXELS.put(("image", digest, path), img)


def _cached(ref: ImageRef) -> PILImage.Image | None:
    # Keyed by hash *and* path: a reference naming another file misses and is verified on disk.
    return cast("PILImage.Image | None", PIXELS.get(("image", ref["sha256"], ref["path"])))


def load_image(ref: ImageRef, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> PILImage.Image:
    """The RGB pixels of ``ref``, verified against its hash (blocking when not cached).

    Pixels are cached by hash and path, as validated; anything read from disk is hashed again.

    Raises:
        ImageMismatchError: The file is gone, unreadable, or its pixels do not match the
            reference's hash (a stale or forged reference); one message for all of these.
    """
    img = _cached(ref)
    if img is not None:
        return img
    path = Path(ref["path"])
    try:
        img = _to_rgb(_open(read_file(path), str(path), max_pixels), str(path))
        matches = _pixel_hash(img) == ref["sha256"]
    except ImageError:
        matches = False
    if not matches:
        raise ImageMismatchError(
            f"image reference {ref['sha256'][:12]}... does not match a readable file at {path} "
            "(changed or missing since it was referenced, or forged)",
            parameter="image",
            value=str(path),
            fix="start a new run with the image itself, or restore the original file",
        )
    _cache_put(ref["sha256"], ref["path"], cast("PILImage.Image", img))
    return cast("PILImage.Image", img)


async def aload_image(ref: ImageRef, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> PILImage.Image:
    """:func:`load_image` for async code: cached pixels at once, else read in a thread."""
    img = _cached(ref)
    if img is not None:
        return img
    return await asyncio.to_thread(load_image, ref, max_pixels=max_pixels)
