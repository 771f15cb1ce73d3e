import base64
import io

import pytest
from PIL import Image

from mai_graph import ImageError, image_ref
from mai_graph.images import load_image


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
    from mai_graph import images

    ref = image_ref(png)
    images._CACHE.clear()
    Image.new("RGB", (64, 48), (0, 0, 255)).save(png)
    with pytest.raises(ImageError, match="changed"):
        load_image(ref)
