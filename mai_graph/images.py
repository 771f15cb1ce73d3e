"""Images as references: validated once, stored in state as path + pixel hash, loaded on demand.

State never holds pixels, so any checkpointer can store it. The hash is the sha256 of the decoded
RGB pixels (plus size), so the same picture saved as PNG or as a data URL gets one hash; engines use
it as the multimodal cache key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import tempfile
import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from typing_extensions import TypedDict

from mai_graph.errors import ImageError

if TYPE_CHECKING:
    from PIL import Image as PILImage

__all__ = ["DEFAULT_MAX_PIXELS", "ImageRef", "image_ref", "load_image"]

DEFAULT_MAX_PIXELS = 40_000_000
"""Images with more pixels than this are refused (decompression-bomb guard)."""

_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,", re.IGNORECASE)


class ImageRef(TypedDict):
    """A validated image: where its bytes are and what its pixels hash to."""

    path: str
    """A readable image file (the caller's file, or a copy in the image store)."""
    sha256: str
    """sha256 of the decoded RGB pixels and size; the engines' multimodal cache key."""
    width: int
    height: int


def _store_dir() -> Path:
    root = os.environ.get("MAI_GRAPH_IMAGE_DIR")
    path = Path(root) if root else Path(tempfile.gettempdir()) / "mai-graph-images"
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def _open(data: bytes | Path, source: str, max_pixels: int) -> PILImage.Image:
    """Decode and validate; returns the image in its original mode."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data) if isinstance(data, bytes) else data)
            width, height = img.size
            if width * height > max_pixels:
                raise ImageError(
                    f"image {source} has {width}x{height} = {width * height:,} pixels, "
                    f"over the limit of {max_pixels:,}",
                    parameter="image",
                    value=source,
                    fix="resize the image, or raise max_pixels if you trust the source",
                )
            img.load()
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
        raise ImageError(
            f"cannot decode image {source}: {exc}",
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


def _pixel_hash(img: PILImage.Image) -> str:
    digest = hashlib.sha256(f"{img.width}x{img.height}:".encode())
    digest.update(img.tobytes())
    return digest.hexdigest()


def _read_file(path: Path) -> bytes:
    if not path.exists():
        raise ImageError(
            f"image file not found: {path}",
            parameter="image",
            value=str(path),
            fix="pass the path of an existing image file",
        )
    if not path.is_file():
        raise ImageError(
            f"image path is not a file: {path}",
            parameter="image",
            value=str(path),
            fix="pass the path of an image file, not a directory",
        )
    data = path.read_bytes()
    if not data:
        raise ImageError(
            f"image file is empty (0 bytes): {path}",
            parameter="image",
            value=str(path),
            fix="re-export or re-download the image",
        )
    return data


def _store(img: PILImage.Image, digest: str) -> Path:
    path = _store_dir() / f"{digest}.png"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        img.save(tmp, format="PNG")
        os.replace(tmp, path)
    return path


def image_ref(source: Any, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageRef:
    """Validate an image and return its reference.

    Args:
        source: A file path (``str`` / ``Path``), a ``data:image/...;base64,`` URL, raw encoded
            bytes, a PIL image, or an existing :class:`ImageRef` (returned as is).
        max_pixels: Refuse images with more pixels than this.

    Returns:
        An :class:`ImageRef`. In-memory sources (bytes, data URLs, PIL images) are written once
        to the image store (``$MAI_GRAPH_IMAGE_DIR``, default a temp folder) by hash.

    Raises:
        ImageError: Missing, empty, corrupt, oversized or unsupported images.
    """
    from PIL import Image

    if isinstance(source, dict) and {"path", "sha256"} <= source.keys():
        return source  # type: ignore[return-value]
    if isinstance(source, Image.Image):
        img, path = _to_rgb(source, "<PIL image>"), None
    elif isinstance(source, bytes | bytearray):
        if not source:
            raise ImageError(
                "image bytes are empty", parameter="image", value=b"", fix="pass encoded bytes"
            )
        img, path = _to_rgb(_open(bytes(source), "<bytes>", max_pixels), "<bytes>"), None
    elif isinstance(source, str) and _DATA_URL.match(source):
        try:
            data = base64.b64decode(source[_DATA_URL.match(source).end() :], validate=True)  # type: ignore[union-attr]
        except (binascii.Error, ValueError) as exc:
            raise ImageError(
                "image data URL is not valid base64",
                parameter="image",
                value=source[:64],
                fix="encode the image bytes with standard base64",
            ) from exc
        img, path = _to_rgb(_open(data, "<data URL>", max_pixels), "<data URL>"), None
    elif isinstance(source, str | os.PathLike):
        file = Path(source).expanduser()
        raw = _open(_read_file(file), str(file), max_pixels)
        img = _to_rgb(raw, str(file))
        # Non-RGB files are stored converted, so every backend reads the same pixels.
        path = file.resolve() if raw.mode == "RGB" else None
    else:
        raise ImageError(
            f"unsupported image source of type {type(source).__name__}",
            parameter="image",
            value=repr(source)[:80],
            fix="pass a file path, data URL, bytes or a PIL image",
        )
    digest = _pixel_hash(img)
    if path is None:
        path = _store(img, digest)
    ref = ImageRef(path=str(path), sha256=digest, width=img.width, height=img.height)
    _cache_put(digest, img)
    return ref


_CACHE: OrderedDict[str, PILImage.Image] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 32


def _cache_put(digest: str, img: PILImage.Image) -> None:
    with _CACHE_LOCK:
        _CACHE[digest] = img
        _CACHE.move_to_end(digest)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)


def load_image(ref: ImageRef, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> PILImage.Image:
    """The RGB pixels of ``ref`` (cached by hash; re-verified when read from disk).

    Raises:
        ImageError: The file is gone, or its pixels no longer match the reference's hash.
    """
    with _CACHE_LOCK:
        img = _CACHE.get(ref["sha256"])
    if img is not None:
        return img
    path = Path(ref["path"])
    img = _to_rgb(_open(_read_file(path), str(path), max_pixels), str(path))
    if _pixel_hash(img) != ref["sha256"]:
        raise ImageError(
            f"image {path} changed after it was referenced (pixel hash differs)",
            parameter="image",
            value=str(path),
            fix="start a new run with the current image, or restore the original file",
        )
    _cache_put(ref["sha256"], img)
    return img
