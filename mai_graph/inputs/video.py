"""Videos and several images per question: video references, frame sampling, per-run limits.

A video is given as a file (a path, a ``file://`` URL, a ``data:video/...;base64,`` URL, plain
base64 or bytes) or as frames (a list of images, or ``{"frames": [...], "fps": 2}``). Its frames
are sampled once, when the run's first node validates the inputs: ``video_fps`` frames per
second of video, at most ``max_frames``, evenly spaced (:func:`sample_indices`). The run's state
keeps a :class:`VideoRef` (where the video is, which frames were sampled, and the sha256 of
their pixels, the engines' multimodal cache key), never pixels; backends get the sampled frames
from :func:`load_video`, verified against that hash.

Decoding: animated GIF / WebP / PNG with Pillow; other containers (MP4, WebM, MKV, AVI, MOV)
with OpenCV (the ``video`` extra; vLLM depends on it already). Videos follow the image policy
(:class:`~mai_graph.inputs.sources.ImagePolicy`) like images do: inline data, or files the
policy lets the caller name; every frame is held to the policy's pixel caps.

Everything here that reads files or decodes blocks: call it off the event loop.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

from mai_graph.errors import ConfigError, ImageError, ImageMismatchError
from mai_graph.inputs.images import PIXELS, ImageRef, load_image, read_file, store_bytes
from mai_graph.inputs.sources import (
    ImagePolicy,
    decode_base64,
    readable_path,
    resolve_image,
)

if TYPE_CHECKING:
    from PIL import Image as PILImage

__all__ = [
    "MAX_SOURCE_FRAMES",
    "VideoRef",
    "is_video_ref",
    "load_video",
    "resolve_video",
    "sample_indices",
    "processor_metadata",
    "video_input",
    "video_metadata",
]


MAX_SOURCE_FRAMES = 100_000
"""Videos with more frames than this are refused (about 55 minutes at 30 fps)."""

_DATA_URL = re.compile(r"^data:video/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,", re.IGNORECASE)
_PIL_KINDS = ("GIF", "WEBP", "PNG")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class VideoRef(TypedDict):
    """A validated video: where it is, which frames were sampled, and what they hash to."""

    path: str
    """The video file (the caller's, or a copy in the image store); ``""`` for frames."""
    frame_images: list[ImageRef]
    """A video given as frames: the sampled frames, in order (``[]`` for a file)."""
    sha256: str
    """sha256 of the sampled frames' RGB pixels, size and indices: the multimodal cache key."""
    width: int
    height: int
    fps: float
    """The source's frame rate (frames per second)."""
    total_frames: int
    """Frames in the source."""
    indices: list[int]
    """The sampled frames' positions in the source, in order."""


def sample_indices(total: int, fps: float, target_fps: float, max_frames: int) -> list[int]:
    """Evenly spaced frame positions: ``target_fps`` per second of video, at most ``max_frames``.

    At least two frames are taken when there are two (the vision encoders pair frames in time);
    the first and the last frame are always among them.

    >>> sample_indices(100, fps=25.0, target_fps=2.0, max_frames=32)  # a 4-second clip
    [0, 14, 28, 42, 57, 71, 85, 99]
    >>> sample_indices(3000, fps=30.0, target_fps=2.0, max_frames=4)
    [0, 1000, 1999, 2999]
    >>> sample_indices(1, fps=30.0, target_fps=2.0, max_frames=8)
    [0]
    """
    wanted = round(total / fps * target_fps) if fps > 0 else max_frames
    n = max(min(2, total), min(wanted, max_frames, total))
    if n <= 1:
        return [0]
    return [round(i * (total - 1) / (n - 1)) for i in range(n)]


def is_video_ref(value: Any) -> bool:
    """Whether ``value`` has the keys of a :class:`VideoRef` (a checkpointed reference)."""
    return isinstance(value, Mapping) and {"sha256", "indices", "frame_images"} <= value.keys()


def _check_ref(value: Mapping[str, Any]) -> VideoRef:
    indices = value.get("indices")
    ok = (
        isinstance(value.get("path"), str)
        and isinstance(value.get("frame_images"), list)
        and isinstance(value.get("sha256"), str)
        and bool(_SHA256.match(value["sha256"]))
        and isinstance(indices, list)
        and bool(indices)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices)
        and isinstance(value.get("fps"), int | float)
        and isinstance(value.get("total_frames"), int)
        and (bool(value["path"]) != bool(value["frame_images"]))
    )
    if not ok:
        raise ImageError(
            f"malformed video reference with keys {sorted(value)}",
            parameter="video",
            fix="pass the video itself (a file or its frames), not a hand-made reference",
        )
    return dict(value)  # type: ignore[return-value]


def resolve_video(
    source: Any,
    policy: ImagePolicy | None = None,
    *,
    video_fps: float = 2.0,
    max_frames: int = 32,
) -> VideoRef:
    """Validate a video under the image policy, sample its frames, return its reference.

    Args:
        source: A video file (path, ``file://`` URL, ``data:video/...;base64,`` URL, plain
            base64, encoded bytes), its frames (a list of image sources, or a mapping with
            ``frames`` and optionally ``fps``, default ``video_fps``: the frames are taken as
            shot at that rate), or a :class:`VideoRef` (trusted: returned as is; untrusted:
            decoded again and checked against its hash).
        policy: Which sources are accepted (None: a trusted caller's, any local path).
        video_fps: Frames sampled per second of video.
        max_frames: At most this many frames are sampled.

    Raises:
        ImageAccessError: The policy refuses the source.
        ImageError: The video cannot be decoded, is empty, or its frames break a limit.
        ConfigError: OpenCV is missing for a container Pillow cannot read.
    """
    policy = ImagePolicy.trusted() if policy is None else policy
    if is_video_ref(source):
        return _reference(_check_ref(source), policy)
    if isinstance(source, Mapping) and "frames" in source:
        fps = source.get("fps", video_fps)
        if isinstance(fps, bool) or not isinstance(fps, int | float) or not fps > 0:
            raise ImageError(
                f"video fps must be a positive number, got {fps!r}",
                parameter="video",
                value=fps,
                fix='give {"frames": [...], "fps": 2}',
            )
        return _from_frames(source["frames"], float(fps), policy, video_fps, max_frames)
    if isinstance(source, list | tuple):
        return _from_frames(source, video_fps, policy, video_fps, max_frames)
    data, label, file = _video_bytes(source, policy)
    if file is None:
        file = store_bytes(data, f"{hashlib.sha256(data).hexdigest()}.vid")
    pick = _picker(video_fps, max_frames)
    frames, fps, total, indices = _decode(data, file, label, policy, pick)
    return _file_ref(file, frames, fps, total, indices)


def _picker(video_fps: float, max_frames: int) -> Any:
    if not video_fps > 0 or isinstance(max_frames, bool) or not max_frames >= 1:
        raise ConfigError(
            f"need video_fps > 0 and max_frames >= 1, got {video_fps!r} and {max_frames!r}",
            parameter="video_fps",
            value=(video_fps, max_frames),
        )
    return lambda total, fps: sample_indices(total, fps, video_fps, max_frames)


def _video_bytes(source: Any, policy: ImagePolicy) -> tuple[bytes, str, Path | None]:
    """The encoded video and how to name it; ``file`` when it is a file the policy allows."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        if not data:
            raise ImageError("video bytes are empty", parameter="video", fix="pass encoded bytes")
        _capped(data, "<bytes>", policy)
        return data, "<bytes>", None
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str) or not source:
        raise ImageError(
            f"unsupported video source of type {type(source).__name__}",
            parameter="video",
            value=repr(source)[:80],
            fix="give a video file, a data:video/...;base64 URL, or a list of frames",
        )
    if match := _DATA_URL.match(source):
        return decode_base64(source[match.end() :], "<video data URL>", policy), "<data URL>", None
    scheme = source[: source.find(":")].lower() if ":" in source else ""
    if scheme in ("http", "https"):
        raise ImageError(
            "video URLs are not fetched",
            parameter="video",
            value=source[:80],
            fix="download the video and give it as a data:video/...;base64 URL or a file",
        )
    if _looks_base64_video(source):
        return decode_base64(source, "<base64 video>", policy), "<base64>", None
    path, nofollow = readable_path(source, policy)
    data = read_file(path, max_bytes=policy.max_bytes, nofollow=nofollow)
    return data, source, path.resolve()


def _capped(data: bytes, label: str, policy: ImagePolicy) -> None:
    if policy.max_bytes is not None and len(data) > policy.max_bytes:
        raise ImageError(
            f"video {label} has {len(data):,} bytes, over the limit of {policy.max_bytes:,}",
            parameter="video",
            value=label,
            fix="send a shorter or smaller video, or its sampled frames",
        )


def _looks_base64_video(text: str) -> bool:
    """Whether ``text`` is base64 of a video file (MP4/MOV, WebM/MKV, AVI, GIF), by its head.

    >>> _looks_base64_video("AAAAIGZ0eXBpc29tAAACAGlzb21pc28y"), _looks_base64_video("a.mp4")
    (True, False)
    """
    import base64
    import binascii

    head = "".join(text[:32].split())
    if len(head) < 16:
        return False
    try:
        raw = base64.b64decode(head[:16], validate=True)
    except (binascii.Error, ValueError):
        return False
    return (
        raw[4:8] == b"ftyp"
        or raw.startswith(b"\x1a\x45\xdf\xa3")
        or (raw[:4] == b"RIFF" and raw[8:11] == b"AVI")
        or raw.startswith((b"GIF87a", b"GIF89a"))
    )


# -- decoding ----------------------------------------------------------------------------------


def _decode(
    data: bytes | None, file: Path, label: str, policy: ImagePolicy, pick: Any
) -> tuple[list[PILImage.Image], float, int, list[int]]:
    """Sampled RGB frames, source fps, source frame count and the sampled indices (blocking)."""
    from PIL import Image, UnidentifiedImageError

    if data is not None:
        try:
            with Image.open(io.BytesIO(data)) as probe:
                kind = probe.format
        except (UnidentifiedImageError, OSError, ValueError):
            kind = None
        if kind in _PIL_KINDS:
            return _decode_pil(data, label, policy, pick)
    elif file.suffix.lower() in (".gif", ".webp", ".png"):
        return _decode_pil(read_file(file), label, policy, pick)
    return _decode_cv2(file, label, policy, pick)


def _frame_guard(width: int, height: int, label: str, policy: ImagePolicy) -> None:
    from mai_graph.inputs.limits import MAX_ASPECT_RATIO, MIN_IMAGE_SIDE

    if width <= 0 or height <= 0:
        raise ImageError(f"video {label} has no pixels", parameter="video", value=label)
    if width * height > policy.max_pixels:
        raise ImageError(
            f"video {label} has {width}x{height} frames, over the limit of "
            f"{policy.max_pixels:,} pixels",
            parameter="video",
            value=label,
            fix="scale the video down",
        )
    if min(width, height) < MIN_IMAGE_SIDE or max(width, height) > MAX_ASPECT_RATIO * min(
        width, height
    ):
        raise ImageError(
            f"video {label} has {width}x{height} frames: vision models need a short side of at "
            f"least {MIN_IMAGE_SIDE} px and an aspect ratio up to {MAX_ASPECT_RATIO:.0f}:1",
            parameter="video",
            value=f"{width}x{height}",
            fix="scale or pad the video",
        )


def _check_total(total: int, label: str) -> None:
    if total < 1:
        raise ImageError(
            f"video {label} has no frames", parameter="video", value=label, fix="send a video"
        )
    if total > MAX_SOURCE_FRAMES:
        raise ImageError(
            f"video {label} has {total:,} frames, over the limit of {MAX_SOURCE_FRAMES:,}",
            parameter="video",
            value=label,
            fix="cut the clip to the part the question is about, or send sampled frames",
        )


def _decode_pil(
    data: bytes, label: str, policy: ImagePolicy, pick: Any
) -> tuple[list[PILImage.Image], float, int, list[int]]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        _frame_guard(img.width, img.height, label, policy)
        total = int(getattr(img, "n_frames", 1))
        _check_total(total, label)
        durations = []
        for i in range(min(total, 64)):
            img.seek(i)
            durations.append(float(img.info.get("duration") or 0))
        mean_ms = sum(durations) / len(durations) if durations else 0.0
        fps = 1000.0 / mean_ms if mean_ms > 0 else 10.0
        indices = pick(total, fps)
        frames = []
        for i in indices:
            img.seek(i)
            frames.append(img.convert("RGB"))
    return frames, fps, total, indices


def _decode_cv2(
    file: Path, label: str, policy: ImagePolicy, pick: Any
) -> tuple[list[PILImage.Image], float, int, list[int]]:
    try:
        import cv2
    except ImportError as exc:
        raise ConfigError(
            "decoding this video needs OpenCV",
            parameter="video",
            value=label,
            fix="pip install 'mai-graph[video]' (opencv-python-headless), or send the video's "
            "frames as images",
        ) from exc
    from PIL import Image

    cap = cv2.VideoCapture(str(file))
    try:
        if not cap.isOpened():
            raise ImageError(
                f"cannot decode video {label}",
                parameter="video",
                value=label,
                fix="send an MP4, WebM, MKV, AVI, MOV, GIF or WebP video",
            )
        total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        fps = float(cap.get(cv2.CAP_PROP_FPS)) or 25.0
        width, height = (
            int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)),
            int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        )
        _check_total(total, label)
        _frame_guard(width, height, label, policy)
        indices = pick(total, fps)
        frames = []
        wanted = set(indices)
        if indices[-1] < 2000:  # read through: deterministic for every codec
            for i in range(indices[-1] + 1):
                if not cap.grab():
                    break
                if i in wanted:
                    ok, bgr = cap.retrieve()
                    if not ok:
                        break
                    frames.append(bgr)
        else:  # long videos: seek to each sampled frame
            for i in indices:
                cap.set(cv2.CAP_PROP_POS_FRAMES, i)
                ok, bgr = cap.read()
                if not ok:
                    break
                frames.append(bgr)
    finally:
        cap.release()
    if len(frames) != len(indices):
        raise ImageError(
            f"video {label} ended after fewer frames than its header says ({total})",
            parameter="video",
            value=label,
            fix="re-encode the video (e.g. ffmpeg -i in.mp4 out.mp4)",
        )
    return [Image.fromarray(bgr[:, :, ::-1].copy()) for bgr in frames], fps, total, indices


def _frames_hash(frames: Sequence[PILImage.Image], indices: Sequence[int]) -> str:
    digest = hashlib.sha256(f"video:{frames[0].width}x{frames[0].height}:{list(indices)}:".encode())
    for frame in frames:
        digest.update(frame.tobytes())
    return digest.hexdigest()


def _file_ref(
    file: Path, frames: list[PILImage.Image], fps: float, total: int, indices: list[int]
) -> VideoRef:
    ref = VideoRef(
        path=str(file),
        frame_images=[],
        sha256=_frames_hash(frames, indices),
        width=frames[0].width,
        height=frames[0].height,
        fps=fps,
        total_frames=total,
        indices=list(indices),
    )
    _cache_put(ref, frames)
    return ref


def _from_frames(
    sources: Any, fps: float, policy: ImagePolicy, video_fps: float, max_frames: int
) -> VideoRef:
    from mai_graph.inputs.limits import fit_image

    if not isinstance(sources, list | tuple) or not sources:
        raise ImageError(
            "a video given as frames needs a non-empty list of images",
            parameter="video",
            fix='give {"frames": [image, image, ...], "fps": 2}',
        )
    _check_total(len(sources), "<frames>")
    indices = _picker(video_fps, max_frames)(len(sources), fps)
    refs = [fit_image(resolve_image(sources[i], policy)) for i in indices]
    sizes = {(r["width"], r["height"]) for r in refs}
    if len(sizes) > 1:
        raise ImageError(
            f"a video's frames must share one size, got {sorted(sizes)}",
            parameter="video",
            value=sorted(sizes),
            fix="resize the frames to one size",
        )
    frames = [load_image(r) for r in refs]
    ref = VideoRef(
        path="",
        frame_images=refs,
        sha256=_frames_hash(frames, indices),
        width=refs[0]["width"],
        height=refs[0]["height"],
        fps=fps,
        total_frames=len(sources),
        indices=list(indices),
    )
    _cache_put(ref, frames)
    return ref


def _reference(ref: VideoRef, policy: ImagePolicy) -> VideoRef:
    """A checkpointed reference: trusted as is (verified on load), else decoded and checked."""
    if policy.allow_paths:
        return ref
    if ref["frame_images"]:
        frames = [resolve_image(r, policy) for r in ref["frame_images"]]
        pixels = [load_image(r) for r in frames]
        fresh = {**ref, "frame_images": frames, "sha256": _frames_hash(pixels, ref["indices"])}
    else:
        path, nofollow = readable_path(ref["path"], policy)
        data = read_file(path, max_bytes=policy.max_bytes, nofollow=nofollow)
        pixels, fps, total, indices = _decode(data, path, ref["path"], policy,
                                              lambda total, fps: list(ref["indices"]))  # fmt: skip
        fresh = {**ref, "sha256": _frames_hash(pixels, indices), "fps": fps, "total_frames": total}
    if fresh["sha256"] != ref["sha256"]:
        raise ImageMismatchError(
            f"video reference {ref['sha256'][:12]}... does not match its frames (stale or forged)",
            parameter="video",
            fix="send the video itself",
        )
    _cache_put(fresh, pixels)  # type: ignore[arg-type]
    return fresh  # type: ignore[return-value]


# -- loading -----------------------------------------------------------------------------------


def _cache_put(ref: VideoRef, frames: list[Any]) -> None:
    PIXELS.put(("video", ref["sha256"], ref["path"]), frames)


def load_video(ref: VideoRef) -> list[PILImage.Image]:
    """The sampled RGB frames of ``ref``, verified against its hash (blocking when not cached).

    Raises:
        ImageMismatchError: The file is gone, unreadable, or its frames do not match the
            reference (changed since it was referenced, or forged).
    """
    cached = PIXELS.get(("video", ref["sha256"], ref["path"]))
    if cached is not None:
        return cached
    try:
        if ref["frame_images"]:
            frames = [load_image(r) for r in ref["frame_images"]]
        else:
            path = Path(ref["path"])
            frames, _, _, _ = _decode(
                None, path, str(path), ImagePolicy.trusted(), lambda *_: list(ref["indices"])
            )
        matches = _frames_hash(frames, ref["indices"]) == ref["sha256"]
    except ImageError:
        matches = False
    if not matches:
        raise ImageMismatchError(
            f"video reference {ref['sha256'][:12]}... does not match a readable video at "
            f"{ref['path'] or 'its frames'} (changed or missing since it was referenced, or "
            "forged)",
            parameter="video",
            value=ref["path"],
            fix="start a new run with the video itself",
        )
    _cache_put(ref, frames)
    return frames


def video_metadata(ref: VideoRef) -> dict[str, Any]:
    """What vision processors need to place the frames in time (vLLM's video metadata keys).

    >>> video_metadata({"fps": 25.0, "total_frames": 100, "indices": [0, 50, 99]})["duration"]
    4.0
    """
    return {
        "fps": float(ref["fps"]),
        "duration": ref["total_frames"] / ref["fps"] if ref["fps"] else 0.0,
        "total_num_frames": ref["total_frames"],
        "frames_indices": list(ref["indices"]),
        "video_backend": "opencv",
        "do_sample_frames": False,
    }


def processor_metadata(ref: VideoRef) -> dict[str, Any]:
    """:func:`video_metadata` as Hugging Face video processors take it (``VideoMetadata``)."""
    meta = video_metadata(ref)
    del meta["do_sample_frames"]
    return {**meta, "width": ref["width"], "height": ref["height"]}


def video_input(ref: VideoRef) -> tuple[Any, dict[str, Any]]:
    """A video as vLLM's Qwen-VL processors take it: ``(frames, metadata)`` (blocking).

    The frames are one ``uint8`` array of shape (frames, height, width, 3), already sampled.
    """
    import numpy as np

    frames = load_video(ref)
    return np.stack([np.asarray(f) for f in frames]), video_metadata(ref)
