"""Format variants (issue #12): TIFF encodings and pages, animated WebP, and the
format variants ``scan`` lists. Each decodes to Pillow's pixels or is a named refusal."""

import os

import numpy as np
import pytest
from PIL import Image

import pipeline
from pipeline.decode import formats
from conftest import drain

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

BASE = (np.indices((37, 53)).sum(0)[..., None] * [3, 5, 7] % 256).astype(np.uint8)


def _decode(path, **kw):
    ds = pipeline.from_paths([path], image_size=None, batch_size=None, shuffle=False,
                             on_error="skip", **kw)
    out = drain(ds)
    return (out[0] if out else None), pipeline.errors(ds)


def _save(tmp_path, name, img, **kw):
    path = str(tmp_path / name)
    img.save(path, **kw)
    return path


@pytest.mark.needs_tfio
@pytest.mark.parametrize("name,kw", [
    ("raw.tif", {}), ("lzw.tif", {"compression": "tiff_lzw"}),
    ("deflate.tif", {"compression": "tiff_adobe_deflate"}),
    ("jpeg.tif", {"compression": "jpeg", "quality": 95}),
])
def test_tiff_compressions_match_pillow(tmp_path, name, kw):
    path = _save(tmp_path, name, Image.fromarray(BASE), **kw)
    got, errs = _decode(path)
    assert not errs
    ref = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert got.shape == ref.shape and np.abs(got.astype(int) - ref).max() <= 3


@pytest.mark.needs_tfio
def test_tiff_palette_16bit_multipage_and_alpha(tmp_path):
    pal = _save(tmp_path, "pal.tif", Image.fromarray(BASE).convert("P"))
    got, _ = _decode(pal)
    assert np.array_equal(got, np.asarray(Image.open(pal).convert("RGB")))
    g16 = _save(tmp_path, "g16.tif", Image.fromarray(BASE[..., 0].astype(np.uint16) * 257))
    got, _ = _decode(g16)
    assert np.array_equal(got[..., 0], BASE[..., 0])            # 16-bit -> 8-bit as v >> 8
    pages = [Image.fromarray(BASE), Image.fromarray(255 - BASE)]
    multi = str(tmp_path / "multi.tif")
    pages[0].save(multi, save_all=True, append_images=pages[1:])
    got, _ = _decode(multi)
    assert np.array_equal(got, BASE)                            # the first page
    # tensorflow-io premultiplies colour by alpha: such files take the Pillow fallback,
    # which keeps the colour stored under transparent pixels, as for PNG
    rgba = _save(tmp_path, "rgba.tif", Image.fromarray(np.concatenate([BASE, BASE[..., :1]], -1)))
    got, _ = _decode(rgba, channels=4)
    assert np.array_equal(got[..., :3], BASE) and np.array_equal(got[..., 3], BASE[..., 0])


def test_float_tiff_is_scaled_from_0_1(tmp_path):
    """Float samples are taken as 0.0-1.0 (clipped), round(v * 255), through the Pillow
    fallback, on every stack (tensorflow-io refused them: "unsupported bits 32 for fp")."""
    path = _save(tmp_path, "f.tif", Image.fromarray(BASE[..., 0].astype(np.float32) / 255))
    got, errs = _decode(path)
    assert not errs, errs
    assert np.array_equal(got, np.repeat(BASE[..., :1], 3, -1))


@pytest.mark.parametrize("name", ["anim.webp", "anim_named.jpg"])
def test_animated_webp_gives_its_first_frame(tmp_path, name):
    frames = [Image.fromarray(BASE), Image.fromarray(255 - BASE)]
    path = str(tmp_path / name)
    frames[0].save(path, "WEBP", save_all=True, append_images=frames[1:], duration=100,
                   lossless=True)
    got, errs = _decode(path)
    assert not errs, errs
    assert np.array_equal(got, BASE)


def test_scan_lists_format_variants(tmp_path):
    d = tmp_path / "a"
    d.mkdir()
    img = Image.fromarray(BASE)
    img.save(d / "base.jpg", quality=90)
    img.save(d / "prog.jpg", quality=90, progressive=True, subsampling=0)
    exif = Image.Exif()
    exif[0x0112] = 6
    img.save(d / "exif.jpg", quality=90, subsampling=1, exif=exif.tobytes())
    img.convert("P").save(d / "pal.png")
    img.convert("P").save(d / "pal8.bmp")
    report = pipeline.scan(str(tmp_path), progress=False)
    assert report.per_variant == {
        "JPEG baseline 4:2:0": 1, "JPEG progressive 4:4:4": 1, "JPEG baseline 4:2:2 EXIF": 1,
        "PNG 8-bit palette": 1, "BMP 8-bit v3": 1}, report.per_variant
    assert "format variants (from headers)" in report.table()


@pytest.mark.parametrize("head,want", [
    (b"GIF89a" + b"\x00" * 10, "GIF 89a"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8L" + b"\x00" * 16, "WebP lossless"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8X\x00\x00\x00\x00\x02" + b"\x00" * 16, "WebP animated"),
    (b"II*\x00" + b"\x00" * 12, "TIFF little-endian"),
    (b"\x00\x00\x00\x18ftypheic" + b"\x00" * 8, "HEIC/HEIF (heic)"),
    (b"\x00\x00\x00\x18ftypavif" + b"\x00" * 8, "AVIF (avif)"),
    (b"hello world" + b"\x00" * 8, "unknown"),
    # found by the atheris harness (tests/decode/fuzz_readers.py): a PNG cut inside IHDR
    (b"\x89PNG\r\n\x1a\n\x00\x00\rIHDREND\xaeB`\x82", "PNG (truncated header)"),
])
def test_variant_names(head, want):
    assert formats.variant(head) == want


def test_scan_reports_a_png_cut_inside_its_header(tmp_path):
    """Found by the atheris harness: ``variant`` indexed past the end of a 22-byte PNG, so
    ``scan`` of a folder holding one crashed; it is a bad file of a named variant."""
    (tmp_path / "cut.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\rIHDREND\xaeB`\x82")
    Image.new("RGB", (4, 4)).save(str(tmp_path / "good.png"))
    report = pipeline.scan(str(tmp_path), progress=False)
    assert report.num_ok == 1
    assert [os.path.basename(b["path"]) for b in report.bad_files] == ["cut.png"]
    assert report.per_variant.get("PNG (truncated header)") == 1, report.per_variant


# --- issue 15: a JPEG's start of frame beyond the first 4 KB; every file counted ----

def _with_appn(data: bytes, marker: int, payload_size: int, count: int) -> bytes:
    """``data`` (a JPEG) with ``count`` APPn segments of ``payload_size`` bytes after SOI."""
    import struct
    seg = struct.pack(">BBH", 0xFF, marker, payload_size + 2) + b"\x5a" * payload_size
    return data[:2] + seg * count + data[2:]


def _jpeg_bytes(**kw) -> bytes:
    """BASE as JPEG bytes. Pillow's output buffer must hold a progressive JPEG's ICC
    profile (else "Suspension not allowed here"): ``ImageFile.MAXBLOCK`` is raised."""
    import io
    from PIL import ImageFile
    buf, old = io.BytesIO(), ImageFile.MAXBLOCK
    ImageFile.MAXBLOCK = max(old, 1 << 20)
    try:
        Image.fromarray(BASE).save(buf, "JPEG", quality=90, **kw)
    finally:
        ImageFile.MAXBLOCK = old
    return buf.getvalue()


def _big_header_jpegs(folder):
    """Baseline 4:2:0 and progressive 4:4:4 JPEGs whose SOF lies ~100 KB in: a 100 KB ICC
    profile (Pillow splits it over two APP2 segments), or two inserted 50 KB APP13s."""
    folder.mkdir(parents=True, exist_ok=True)
    icc = b"ICCP" * 25_000
    files = {
        "icc_base.jpg": (_jpeg_bytes(icc_profile=icc), "JPEG baseline 4:2:0"),
        "icc_prog.jpg": (_jpeg_bytes(progressive=True, subsampling=0, icc_profile=icc),
                         "JPEG progressive 4:4:4"),
        "app13_base.jpg": (_with_appn(_jpeg_bytes(), 0xED, 50_000, 2), "JPEG baseline 4:2:0"),
        "app13_prog.jpg": (_with_appn(_jpeg_bytes(progressive=True, subsampling=0), 0xED,
                                      50_000, 2), "JPEG progressive 4:4:4"),
    }
    for name, (data, _) in files.items():
        (folder / name).write_bytes(data)
    return {name: v for name, (_, v) in files.items()}


def test_variant_walks_jpeg_segments_past_the_head(tmp_path):
    """A JPEG whose SOF came after a large ICC (APP2) segment was listed as plain "JPEG":
    the segments are walked by their lengths, reading beyond the head with ``read_at``."""
    from pipeline.sources import read
    want = _big_header_jpegs(tmp_path)
    for name, variant in want.items():
        data = (tmp_path / name).read_bytes()
        sof = data.find(b"\xff\xc0" if "base" in name else b"\xff\xc2")
        assert sof > 100_000, (name, sof)
        head = data[:4096]
        assert formats.variant(head) == "JPEG"  # the head alone cannot tell
        assert formats.variant(data) == variant
        with read.RangeReader(str(tmp_path / name)) as more:
            assert formats.variant(head, more) == variant, name
    # an EXIF block beyond the head is seen too
    exif = Image.Exif()
    exif[0x0112] = 1
    data = _with_appn(_jpeg_bytes(exif=exif.tobytes()), 0xEC, 60_000, 1)
    assert data.find(b"Exif\x00\x00") > 60_000
    assert formats.variant(data[:4096], lambda o, n: data[o:o + n]) == \
        "JPEG baseline 4:2:0 EXIF"
    # a JPEG cut before its frame header: the walk stops at the end of the file
    cut = _with_appn(_jpeg_bytes(), 0xED, 50_000, 2)[:90_000]
    assert formats.variant(cut[:4096], lambda o, n: cut[o:o + n]) == "JPEG"


def test_scan_names_the_variant_of_a_jpeg_with_a_large_icc_profile(tmp_path):
    want = _big_header_jpegs(tmp_path / "a")
    report = pipeline.scan(str(tmp_path), progress=False)
    assert report.num_ok == 4 and not report.bad_files
    assert report.per_variant == {"JPEG baseline 4:2:0": 2, "JPEG progressive 4:4:4": 2}, \
        report.per_variant
    assert sorted(want.values()) == sorted(
        v for v, n in report.per_variant.items() for _ in range(n))


def test_scan_variant_table_counts_every_file(tmp_path):
    """The variant table left out files it could not read: its counts did not add up to the
    file count. Each file is counted once: unreadable, empty and not-an-image rows too."""
    d = tmp_path / "a"
    d.mkdir()
    img = Image.fromarray(BASE)
    img.save(d / "good.jpg", quality=90)
    img.save(d / "good.png")
    data = (d / "good.jpg").read_bytes()
    (d / "truncated.jpg").write_bytes(data[:len(data) // 2])  # the decoder raises
    (d / "empty.jpg").write_bytes(b"")
    (d / "text.png").write_bytes(b"hello, not an image at all")
    os.symlink(str(d / "gone.jpg"), str(d / "dangling.jpg"))  # cannot be read
    report = pipeline.scan(str(tmp_path), progress=False)
    assert report.num_files == 6 and report.num_ok == 2
    assert sum(report.per_variant.values()) == report.num_files == 6, report.per_variant
    assert report.per_variant == {
        "JPEG baseline 4:2:0": 2, "PNG 8-bit RGB": 1, "empty file (0 bytes)": 1,
        "not an image (no known format)": 1, "unreadable (cannot be read)": 1}, \
        report.per_variant
    table = report.table()
    section = table.split("format variants (from headers)\n", 1)[1].split("\n\n", 1)[0]
    assert sum(int(line.split()[-1]) for line in section.splitlines()) == 6, table
