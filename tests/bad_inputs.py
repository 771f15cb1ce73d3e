"""The table of bad inputs run on the fake backends and on the real engines.

Each case makes a run's inputs in a folder and says what must happen: a typed error whose
message names the problem (``match``) and carries a fix, raised before any backend call
(``reaches_backend=False``), or the input is converted and answered (``check`` looks at the
image reference the backends were given).
"""

import io
import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from mai_graph.backends.recording import RecordingBackend
from mai_graph.errors import ConfigError, ImageError
from mai_graph.inputs.limits import MAX_QUESTION_CHARS, MIN_IMAGE_SIDE

QUESTION = "Which colour is the large shape in the image?"
OPTIONS = ["red", "blue"]


@dataclass(frozen=True)
class Case:
    """One bad input and what it must give."""

    id: str
    make: Callable[[Path], dict[str, Any]]
    """Folder -> ``{"question", "image", "options"}`` overrides of the good input."""
    error: type[Exception] | None = None
    match: str = ""
    """A regular expression the error message must contain (the problem)."""
    fix: str = ""
    """A piece of the fix the message must carry."""
    check: Callable[[dict[str, Any]], None] | None = None
    """For converted inputs: assertions on the image reference the backends got."""
    on: tuple[str, ...] = ("fake", "vllm", "transformers")
    """Backends on which the case gives this outcome."""
    reaches_backend: bool = False
    """The error comes from a backend's own check (the engine still never sees the request)."""


def _noise(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    rng = random.Random(7)
    img = Image.new("RGB", size)
    img.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range(size[0] * size[1])])
    return img.convert(mode) if mode != "RGB" else img


def _save(folder: Path, name: str, img: Image.Image, **kw: Any) -> dict[str, Any]:
    path = folder / name
    img.save(path, **kw)
    return {"image": str(path)}


def _write(folder: Path, name: str, data: bytes) -> dict[str, Any]:
    path = folder / name
    path.write_bytes(data)
    return {"image": str(path)}


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def bomb_png(width: int = 60_000, height: int = 60_000) -> bytes:
    """A tiny PNG whose header claims ``width`` x ``height`` pixels (3.6 G by default)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _png_chunk(b"IEND", b"")
    )


def _truncated(folder: Path) -> dict[str, Any]:
    buf = io.BytesIO()
    _noise((64, 48)).save(buf, format="PNG")
    return _write(folder, "truncated.png", buf.getvalue()[: len(buf.getvalue()) // 2])


def _exif_rotated(folder: Path) -> dict[str, Any]:
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to view
    return _save(folder, "rotated.jpg", _noise((80, 40)), exif=exif.tobytes())


def _size(width: int, height: int) -> Callable[[dict[str, Any]], None]:
    def check(image: dict[str, Any]) -> None:
        assert (image["width"], image["height"]) == (width, height), image

    return check


CASES = (
    Case("missing file", lambda d: {"image": str(d / "nope.png")}, ImageError, "not found",
         "existing image file"),
    Case("empty file", lambda d: _write(d, "empty.png", b""), ImageError, "empty",
         "re-export"),
    Case("truncated file", _truncated, ImageError, "cannot decode", "valid PNG"),
    Case("not an image", lambda d: _write(d, "notes.png", b"just some text\n" * 20), ImageError,
         "cannot decode", "valid PNG"),
    Case("decompression bomb", lambda d: _write(d, "bomb.png", bomb_png()), ImageError,
         "too large to decode safely|over the limit", "resize"),
    Case("1x1 image", lambda d: _save(d, "dot.png", Image.new("RGB", (1, 1), (250, 0, 0))),
         check=_size(MIN_IMAGE_SIDE, MIN_IMAGE_SIDE)),
    Case("8000x4 image", lambda d: _save(d, "strip.png", Image.new("RGB", (8000, 4))),
         ImageError, "aspect ratio 2000:1", "pad its short side to at least 40 px"),
    Case("RGBA image", lambda d: _save(d, "rgba.png", _noise((48, 40), "RGBA")),
         check=_size(48, 40)),
    Case("CMYK image", lambda d: _save(d, "cmyk.jpg", _noise((48, 40), "CMYK")),
         check=_size(48, 40)),
    Case("palette image", lambda d: _save(d, "palette.png", _noise((48, 40), "P")),
         check=_size(48, 40)),
    Case("16-bit image", lambda d: _save(d, "deep.png", Image.new("I;16", (48, 40), 40000)),
         check=_size(48, 40)),
    Case("EXIF-rotated image", _exif_rotated, check=_size(40, 80)),
    Case("empty question", lambda d: {"question": ""}, ConfigError, "non-empty string",
         "question text"),
    Case("whitespace question", lambda d: {"question": " \n\t "}, ConfigError,
         "non-empty string", "question text"),
    Case("question over the size cap", lambda d: {"question": "x" * (MAX_QUESTION_CHARS + 1)},
         ConfigError, "over the limit", "shorten the question"),
    Case("question longer than the context", lambda d: {"question": "apples " * 6000},
         ConfigError, "does not fit the model's context of max_model_len", "larger max_model_len",
         on=("vllm", "transformers"), reaches_backend=True),
    Case("options as a string", lambda d: {"options": "red, blue"}, ConfigError,
         "options must be a list", "pass a list of option texts"),
    Case("one option", lambda d: {"options": ["red"]}, ConfigError, "need 2 to 26 options",
         "at least two"),
    Case("bad option letter", lambda d: {"options": {"AA": "red", "B": "blue"}}, ConfigError,
         "single letters", "pass a list of option texts"),
    Case("empty option", lambda d: {"options": ["red", " "]}, ConfigError, "option B", ""),
    Case("lone high surrogate in the question", lambda d: {"question": "Is it \ud800 red?"},
         ConfigError, "unpaired surrogate .U\\+D800. at character 6", "valid UTF-8"),
    Case("lone low surrogate in the question", lambda d: {"question": "\udfff"}, ConfigError,
         "unpaired surrogate", "valid UTF-8"),
    Case("lone surrogate in an option", lambda d: {"options": ["red", "bl\udc80ue"]},
         ConfigError, "option B holds an unpaired surrogate", "valid UTF-8"),
    Case("duplicate options", lambda d: {"options": ["red", "red"]}, ConfigError,
         "options A and B are the same text", "different text"),
    Case("duplicate options up to case and spaces", lambda d: {"options": ["Red ", " red"]},
         ConfigError, "options A and B are the same text", "different text"),
    Case("duplicate options under other letters",
         lambda d: {"options": {"A": "red", "C": "blue", "D": "BLUE"}}, ConfigError,
         "options C and D", "different text"),
    Case("option over the size cap", lambda d: {"options": ["red", "b" * 2001]}, ConfigError,
         "option B has 2,001 characters", "shorten"),
    Case("options as a number", lambda d: {"options": 5}, ConfigError,
         "options must be a list", "pass a list of option texts"),
    Case("options as a set", lambda d: {"options": {"red", "blue"}}, ConfigError,
         "options must be a list", "pass a list of option texts"),
    Case("27 options", lambda d: {"options": [f"o{i}" for i in range(27)]}, ConfigError,
         "need 2 to 26 options", "at most 26"),
    Case("question of another type", lambda d: {"question": ["Is it red?"]}, ConfigError,
         "non-empty string", "question text"),
    Case("an emoji in the question (valid: not a lone surrogate)",
         lambda d: {"question": "Is it \U0001F600 red?"}),
    Case("a folder as image", lambda d: {"image": str(d)}, ImageError, "not a file",
         "not a directory"),
    Case("GIF image", lambda d: _save(d, "pic.gif", _noise((48, 40), "P")), check=_size(48, 40)),
    Case("WebP image", lambda d: _save(d, "pic.webp", _noise((48, 40))), check=_size(48, 40)),
    Case("BMP image", lambda d: _save(d, "pic.bmp", _noise((48, 40))), check=_size(48, 40)),
    Case("TIFF image", lambda d: _save(d, "pic.tiff", _noise((48, 40))), check=_size(48, 40)),
    Case("grey image", lambda d: _save(d, "grey.png", _noise((48, 40), "L")),
         check=_size(48, 40)),
    Case("grey image with alpha", lambda d: _save(d, "la.png", _noise((48, 40), "LA")),
         check=_size(48, 40)),
    Case("1-bit image", lambda d: _save(d, "bits.png", _noise((48, 40), "1")),
         check=_size(48, 40)),
    Case("text bytes as image", lambda d: {"image": b"hello, world"}, ImageError,
         "cannot decode", "valid PNG"),
    Case("a number as image", lambda d: {"image": 3.5}, ImageError,
         "unsupported image source of type float", "give"),
    Case("a malformed image reference", lambda d: {"image": {"path": "x.png", "sha256": "zz"}},
         ImageError, "malformed image reference", "image_ref"),
    Case("a question of Unicode spaces", lambda d: {"question": "\u3000\u2003\u00a0"},
         ConfigError, "non-empty string", "question text"),
    Case("options naming each other's letters", lambda d: {"options": ["B", "A"]}, ConfigError,
         "could mean either", "as words"),
    Case("options the same up to punctuation", lambda d: {"options": ["red", "Red."]},
         ConfigError, "options A and B are the same text", "different text"),
    Case("options as an iterator", lambda d: {"options": iter(["red", "blue"])}, ConfigError,
         "got list_iterator. Fix", "pass a list of option texts"),
    Case("options alike but for full-width letters", lambda d: {"options": ["red", "ｒｅｄ"]},
         ConfigError, "options A and B are the same text to a reader", "different text"),
    Case("an empty (0x0) PIL image", lambda d: {"image": Image.new("RGB", (0, 0))}, ImageError,
         "is empty \\(0x0\\)", "with pixels"),
)  # fmt: skip


def inputs(case: Case, folder: Path, good_image: Path) -> dict[str, Any]:
    """The good input with the case's overrides."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"question": QUESTION, "image": str(good_image), "options": OPTIONS, **case.make(folder)}


async def run_case(case: Case, kind: str, small: Any, large: Any, folder: Path,
                   good_image: Path) -> None:  # fmt: skip
    """Run one case on a backend pair whose short answers agree; then a good run must agree."""
    import re

    import pytest

    from mai_graph import arun

    args = inputs(case, folder, good_image)
    s, big = RecordingBackend(small), RecordingBackend(large)
    run = dict(options=args["options"], small=s, large=big)
    if case.error is not None and kind in case.on:
        with pytest.raises(case.error) as err:
            await arun(args["question"], args["image"], **run)
        message = str(err.value)
        assert re.search(case.match, message), message
        assert "Fix: " in message and case.fix in message.split("Fix: ", 1)[1], message
        if not case.reaches_backend:
            assert s.requests == big.requests == [], "a bad input reached a backend"
    else:
        result = await arun(args["question"], args["image"], **run)
        assert result.route == "agree"
        if case.check is not None:
            case.check(s.requests[0].image)
    after = await arun(QUESTION, str(good_image), options=OPTIONS, small=small, large=large)
    assert after.route == "agree" and after.canonical == "A"
