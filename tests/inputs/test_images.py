import base64
import io
from pathlib import Path

import pytest
from PIL import Image

from mai_graph import ImageError, image_ref
from mai_graph.inputs.images import load_image


def _bytes(img, fmt="PNG"):
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def test_path_ref_keeps_the_callers_file(png):
    ref = image_ref(png)
    assert ref["path"] == str(png.resolve())
    assert (ref["width"], ref["height"]) == (64, 48)
    assert len(ref["sha256"]) == 64
    assert image_ref(ref) is ref


def test_hash_is_of_pixels_not_encoding(png, tmp_path):
    img = Image.open(png)
    as_bytes = image_ref(_bytes(img, "BMP"))
    as_url = image_ref("data:image/png;base64," + base64.b64encode(_bytes(img)).decode())
    as_pil = image_ref(img.copy())
    assert as_bytes["sha256"] == as_url["sha256"] == as_pil["sha256"] == image_ref(png)["sha256"]
    assert load_image(as_url).tobytes() == img.convert("RGB").tobytes()


def test_in_memory_images_are_stored_once(png):
    data = png.read_bytes()
    a, b = image_ref(data), image_ref(data)
    assert a["path"] == b["path"] and a["path"].endswith(".png")


def test_missing_file(tmp_path):
    with pytest.raises(ImageError, match="not found") as err:
        image_ref(tmp_path / "nope.png")
    assert err.value.parameter == "image"
    assert "Fix:" in str(err.value)


def test_directory_is_not_an_image(tmp_path):
    with pytest.raises(ImageError, match="not a file"):
        image_ref(tmp_path)


def test_zero_byte_file(tmp_path):
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(ImageError, match="0 bytes"):
        image_ref(empty)


def test_corrupt_bytes(tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 20)
    with pytest.raises(ImageError, match="cannot decode"):
        image_ref(bad)
    with pytest.raises(ImageError, match="cannot decode"):
        image_ref(b"not an image at all")


def test_truncated_file(png, tmp_path):
    cut = tmp_path / "cut.png"
    cut.write_bytes(png.read_bytes()[:60])
    with pytest.raises(ImageError):
        image_ref(cut)


def test_bad_data_url():
    with pytest.raises(ImageError, match="base64"):
        image_ref("data:image/png;base64,@@@notbase64")


def test_decompression_bomb_is_refused_before_decoding(tmp_path):
    big = tmp_path / "big.png"
    Image.new("L", (5000, 5000)).save(big)  # compresses to a few KB
    assert big.stat().st_size < 100_000
    with pytest.raises(ImageError, match="over the limit") as err:
        image_ref(big, max_pixels=1_000_000)
    assert "max_pixels" in str(err.value)


@pytest.mark.parametrize(
    ("mode", "color"),
    [("RGBA", (255, 0, 0, 0)), ("LA", (10, 255)), ("CMYK", (0, 255, 255, 0)), ("L", 7), ("1", 1)],
)
def test_modes_are_converted_to_rgb(tmp_path, mode, color):
    path = tmp_path / f"img.{'tiff' if mode == 'CMYK' else 'png'}"
    Image.new(mode, (8, 8), color).save(path)
    ref = image_ref(path)
    img = load_image(ref)
    assert img.mode == "RGB" and img.size == (8, 8)
    assert ref["path"] != str(path)  # converted pixels are stored, not the original


def test_transparent_pixels_become_white(tmp_path):
    path = tmp_path / "clear.png"
    Image.new("RGBA", (4, 4), (255, 0, 0, 0)).save(path)
    assert load_image(image_ref(path)).getpixel((0, 0)) == (255, 255, 255)


def test_palette_with_transparency(tmp_path):
    path = tmp_path / "pal.png"
    img = Image.new("P", (4, 4), 0)
    img.putpalette([10, 20, 30] * 256)
    img.info["transparency"] = 0
    img.save(path, transparency=0)
    assert load_image(image_ref(path)).getpixel((1, 1)) == (255, 255, 255)


def test_sixteen_bit_grey_is_rescaled(tmp_path):
    path = tmp_path / "deep.png"
    img = Image.new("I;16", (4, 1))
    for x, v in enumerate((0, 1000, 30000, 65535)):
        img.putpixel((x, 0), v)
    img.save(path)
    px = [load_image(image_ref(path)).getpixel((x, 0))[0] for x in range(4)]
    assert px[0] == 0 and px[-1] == 255 and px == sorted(px)


def test_unsupported_source_type():
    with pytest.raises(ImageError, match="unsupported image source"):
        image_ref(3.14)


def test_changed_file_is_detected(png):
    from mai_graph.inputs import images

    ref = image_ref(png)
    images.PIXELS.clear()
    Image.new("RGB", (64, 48), (0, 0, 255)).save(png)
    with pytest.raises(ImageError, match="changed"):
        load_image(ref)


# -- references are verified when loaded -------------------------------------------------------


def test_forged_reference_cannot_read_a_cached_image_or_probe_files(png, tmp_path):
    from mai_graph.errors import ImageMismatchError

    ref = image_ref(png)  # its pixels are now cached
    other = tmp_path / "other.png"
    Image.new("RGB", (64, 48), (0, 0, 255)).save(other)
    messages = []
    for path in (other, tmp_path / "missing.png", tmp_path):
        forged = {**ref, "path": str(path)}  # right hash, another file
        with pytest.raises(ImageMismatchError) as err:
            load_image(forged)
        messages.append(str(err.value).replace(str(path), "<path>"))
    assert len(set(messages)) == 1  # changed, missing or a folder: one message
    assert load_image(ref).getpixel((0, 0)) == (200, 20, 20)


def test_reference_is_verified_after_a_restart(png):
    from mai_graph.inputs import images

    ref = image_ref(png)
    images.PIXELS.clear()  # as in a new process resuming from a checkpoint
    assert load_image(ref).size == (64, 48)


def test_malformed_reference_is_refused():
    with pytest.raises(ImageError, match="malformed"):
        image_ref({"path": "x.png", "sha256": "not-a-hash", "width": 1, "height": 1})


async def test_aload_image_reads_in_a_thread(png):
    from mai_graph.inputs import images
    from mai_graph.inputs.images import aload_image

    ref = image_ref(png)
    images.PIXELS.clear()
    assert (await aload_image(ref)).size == (64, 48)
    assert (await aload_image(ref)) is load_image(ref)  # cached now


# -- the image store ---------------------------------------------------------------------------


def test_store_files_are_named_by_content_hash_and_private(png):
    import os
    import stat

    from mai_graph.inputs.images import store_dir

    ref = image_ref(png.read_bytes())
    path = Path(ref["path"])
    assert path.parent == store_dir() and path.name == f"{ref['sha256']}.png"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_default_store_is_a_private_folder_of_the_user(tmp_path, monkeypatch):
    import os
    import stat
    import tempfile

    from mai_graph.inputs.images import store_dir

    monkeypatch.delenv("MAI_GRAPH_IMAGE_DIR")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = store_dir()
    assert folder.parent == tmp_path and str(os.getuid()) in folder.name
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    folder.rmdir()
    (tmp_path / "elsewhere").mkdir()
    folder.symlink_to(tmp_path / "elsewhere")  # planted by someone else
    with pytest.raises(ImageError, match="not a private directory"):
        store_dir()


def _stored(color):
    return Path(image_ref(Image.new("RGB", (200, 200), color))["path"])


def test_store_evicts_least_recently_used_files_over_its_bound(tmp_path, monkeypatch):
    import os
    import time

    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path / "store"))
    first = _stored((1, 1, 1))
    size = first.stat().st_size
    monkeypatch.setenv("MAI_GRAPH_IMAGE_STORE_MB", str(2.5 * size / 1e6))
    second = _stored((2, 2, 2))
    old = time.time() - 3600
    os.utime(first, (old - 10, old - 10))
    os.utime(second, (old, old))
    _stored((1, 1, 1))  # used again: now the most recent
    stale_tmp = tmp_path / "store" / ".abc.1.2.tmp"
    stale_tmp.write_bytes(b"x")
    os.utime(stale_tmp, (old, old))
    third = _stored((3, 3, 3))
    assert first.exists() and third.exists()
    assert not second.exists() and not stale_tmp.exists()


def test_store_never_evicts_recently_used_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path / "store"))
    first = _stored((1, 1, 1))
    monkeypatch.setenv("MAI_GRAPH_IMAGE_STORE_MB", str(1.5 * first.stat().st_size / 1e6))
    with pytest.raises(ImageError, match="image store is full"):
        _stored((2, 2, 2))
    assert first.exists()


def test_an_image_larger_than_the_whole_store_is_the_callers_problem(tmp_path, monkeypatch):
    """Retrying cannot help: the error names the image, not the server's setting."""
    from mai_graph.adapters.endpoint.schema import as_endpoint_error

    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path / "store"))
    monkeypatch.setenv("MAI_GRAPH_IMAGE_STORE_MB", "0.00001")
    with pytest.raises(ImageError, match="more than the whole store") as caught:
        _stored((3, 3, 3))
    assert caught.value.parameter == "image"
    assert as_endpoint_error(caught.value).status == 400


@pytest.mark.parametrize("raw", ["lots", "nan", "inf", "-1", "0", "9" * 30, "1e300"])
def test_store_bound_is_validated(tmp_path, monkeypatch, raw):
    """A bound the machine cannot have would make the server's stated memory bound meaningless."""
    from mai_graph import ConfigError

    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path / "store"))
    monkeypatch.setenv("MAI_GRAPH_IMAGE_STORE_MB", raw)
    with pytest.raises(ConfigError, match="MAI_GRAPH_IMAGE_STORE_MB"):
        _stored((9, 9, 9))


@pytest.mark.parametrize("size", [(0, 0), (0, 12), (12, 0)])
def test_an_empty_pil_image_is_refused_naming_it(size):
    from mai_graph import ScriptedBackend, run

    with pytest.raises(ImageError, match=rf"is empty \({size[0]}x{size[1]}\)") as err:
        image_ref(Image.new("RGB", size))
    assert err.value.fix == "pass an image with pixels"
    small, large = ScriptedBackend("yes"), ScriptedBackend("yes")
    with pytest.raises(ImageError, match="is empty"):
        run("Is it red?", Image.new("RGB", size), small=small, large=large)
