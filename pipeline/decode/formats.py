"""Formats: the one table of image signatures, extensions and names.

Content decides the format, never the extension: ``sniff_bytes`` (Python)
and ``pipeline.decode.image.sniff`` (in graph) both match a file's first
``SIGNATURE_BYTES`` bytes against ``SIGNATURES``. Extensions only decide which
files a folder listing counts as images, and which optional decoders are
built into a graph (``hinted_formats``).

Sources: JPEG (ITU T.81, SOI marker FF D8 FF), PNG (RFC 2083 signature),
GIF87a/89a, BMP ("BM"), WebP (RIFF container, "WEBP" form type), TIFF ("II*\\0"
/ "MM\\0*"), and ISO base media files (ISO/IEC 14496-12 ``ftyp`` box) whose
major brand names HEIF (ISO/IEC 23008-12: heic, heix, hevc, hevx, heim, heis,
hevm, hevs, mif1, msf1) or AVIF (avif, avis).
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Optional, Set, Tuple

FORMATS = ("jpeg", "png", "gif", "bmp", "webp", "tiff", "heif", "avif")
NAMES = ("JPEG", "PNG", "GIF", "BMP", "WebP", "TIFF", "HEIC/HEIF", "AVIF")
JPEG, PNG, GIF, BMP, WEBP, TIFF, HEIF, AVIF = range(len(FORMATS))
UNKNOWN = len(FORMATS)
SIGNATURE_BYTES = 16

_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs",
                b"mif1", b"msf1")
_AVIF_BRANDS = (b"avif", b"avis")

# (format id, ((offset, bytes), ...)): a signature matches when every part does.
SIGNATURES = (
    (JPEG, ((0, b"\xff\xd8\xff"),)),
    (PNG, ((0, b"\x89PNG\r\n\x1a\n"),)),
    (GIF, ((0, b"GIF87a"),)),
    (GIF, ((0, b"GIF89a"),)),
    (BMP, ((0, b"BM"),)),
    (WEBP, ((0, b"RIFF"), (8, b"WEBP"))),
    (TIFF, ((0, b"II*\x00"),)),
    (TIFF, ((0, b"MM\x00*"),)),
) + tuple((AVIF, ((4, b"ftyp" + b),)) for b in _AVIF_BRANDS) + tuple(
    (HEIF, ((4, b"ftyp" + b),)) for b in _HEIF_BRANDS)

# File extensions counted as images when listing folders (matched lowercase).
EXTENSIONS = {
    ".jpg": JPEG, ".jpeg": JPEG, ".jpe": JPEG, ".jfif": JPEG,
    ".png": PNG, ".gif": GIF, ".bmp": BMP, ".dib": BMP, ".webp": WEBP,
    ".tif": TIFF, ".tiff": TIFF, ".heic": HEIF, ".heif": HEIF, ".hif": HEIF,
    ".avif": AVIF,
}
IMAGE_EXTENSIONS = tuple(EXTENSIONS)
# Formats whose decoders are not TensorFlow core ops (built into a graph only
# when some file's extension names them, see ``hinted_formats``).
OPTIONAL = (WEBP, TIFF, HEIF, AVIF)
_HINT_EXTS = tuple(e for e, f in EXTENSIONS.items() if f in OPTIONAL + (BMP,))


def sniff_bytes(head: bytes) -> Optional[str]:
    """The format name (see ``FORMATS``) that a file's first bytes show, or None."""
    for fid, parts in SIGNATURES:
        if all(head[o:o + len(b)] == b for o, b in parts):
            return FORMATS[fid]
    return None


def _byte_text(b: int) -> str:
    """One byte as ``hexdump -C`` shows it in its text column: printable ASCII as
    itself, any other byte as "."; the quote and backslash characters too, since
    TensorFlow escapes them in an error's message (``b\\'...\\'``)."""
    return chr(b) if 0x20 <= b < 0x7f and chr(b) not in "'\"\\" else "."


# Per byte value, its two hex digits, and its character in the text column (``_byte_text``):
# the graph builds the same text as ``describe_bytes`` with gathers (``pipeline.decode.image``).
BYTE_HEX = tuple(f"{b:02x}" for b in range(256))
BYTE_TEXT = tuple(_byte_text(b) for b in range(256))


def describe_bytes(head: bytes) -> str:
    """Bytes as ``hexdump -C`` shows them: hex, then the text between bars, e.g.
    "68 65 6c 6c 6f 20 74 68 |hello th|" (no quote or backslash, which TensorFlow's
    error messages would escape)."""
    head = bytes(head)
    return (" ".join(BYTE_HEX[b] for b in head) + " |"
            + "".join(BYTE_TEXT[b] for b in head) + "|")


def describe_start(head: bytes) -> str:
    """The reason for bytes that match no signature (the same words as in graph):
    its first 8 bytes (``describe_bytes``), e.g. "not an image (first bytes
    68 65 6c 6c 6f 20 74 68 |hello th|)"."""
    return f"not an image (first bytes {describe_bytes(bytes(head[:8]))})"


def from_extension(path: str) -> Optional[str]:
    """The format a file's extension names, or None."""
    fid = EXTENSIONS.get(os.path.splitext(path)[1].lower())
    return None if fid is None else FORMATS[fid]


def hinted_formats(paths: Iterable[str]) -> Set[str]:
    """The formats beyond JPEG, PNG and GIF (BMP, WebP, TIFF, HEIF, AVIF) that some
    path's extension names: which large or optional decoders a graph needs.

    One ``str.endswith`` per path (about 0.1 s per million paths).
    """
    found = set()
    for p in paths:
        if p.lower().endswith(_HINT_EXTS):
            found.add(from_extension(p))
            if len(found) == len(OPTIONAL) + 1:
                break
    return found


JPEG_EXTENSIONS = tuple(e for e, f in EXTENSIONS.items() if f == JPEG)


def all_jpeg_named(paths: Iterable[str]) -> bool:
    """Whether there is some path and every one has a JPEG extension (.jpg, .jpeg,
    .jpe, .jfif, any case): then a graph needs only the JPEG decoder in line (see
    ``pipeline.decode.image.Decoder``'s ``others_in_graph``). One ``str.endswith`` per
    path, stopping at the first other name."""
    some = False
    for p in paths:
        if not p.lower().endswith(JPEG_EXTENSIONS):
            return False
        some = True
    return some


def _be16(b: bytes, i: int) -> int:
    return int.from_bytes(b[i:i + 2], "big")


def _le(b: bytes, i: int, n: int) -> int:
    return int.from_bytes(b[i:i + n], "little")


_PNG_COLOUR = {0: "gray", 2: "RGB", 3: "palette", 4: "gray+alpha", 6: "RGBA"}
_BMP_COMPRESSION = {0: "", 1: " RLE8", 2: " RLE4", 3: " bitfields", 4: " JPEG", 5: " PNG",
                    6: " alpha-bitfields"}
_BMP_HEADERS = {12: "OS/2 1.x", 40: "v3", 52: "v3+masks", 56: "v3+alpha", 64: "OS/2 2.x",
                108: "v4", 124: "v5"}


# JPEG start-of-frame markers (ITU T.81 table B.1: SOF0-3, 5-7, 9-11, 13-15).
JPEG_SOF = (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF)


def _jpeg_variant(head: bytes, read_at: Optional[Callable[[int, int], bytes]]) -> str:
    """``variant`` of a JPEG: its segments are walked by their lengths up to the SOF.

    A segment beyond ``head`` is read with ``read_at(offset, size)`` when
    given (a few bytes per segment, wherever it lies in the file).
    """
    def at(pos: int, size: int) -> bytes:
        if pos + size <= len(head) or read_at is None:
            return head[pos:pos + size]
        return read_at(pos, size)

    out, pos, exif = ["JPEG"], 2, False
    while True:  # every step moves on by at least one byte: bounded by the file
        seg = at(pos, 20)  # marker, length, and the SOF fields (3 components: 19 bytes)
        if len(seg) < 4 or seg[0] != 0xFF:
            break
        marker = seg[1]
        if marker == 0xFF:  # a fill byte before the marker
            pos += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # no length (RSTn, TEM)
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or a scan: no frame header before it
            break
        length = _be16(seg, 2)
        if marker == 0xE1 and seg[4:10] == b"Exif\x00\x00":
            exif = True
        if marker in JPEG_SOF:
            out.append({0xC0: "baseline", 0xC1: "extended", 0xC2: "progressive"}.get(
                marker, "SOF%d" % (marker - 0xC0)))
            comps = seg[9] if len(seg) > 9 else 0
            if comps == 1:
                out.append("gray")
            elif comps == 4:
                out.append("CMYK")
            elif comps == 3 and len(seg) >= 19:
                h, v = seg[11] >> 4, seg[11] & 15
                out.append({(1, 1): "4:4:4", (2, 1): "4:2:2", (2, 2): "4:2:0",
                            (1, 2): "4:4:0", (4, 1): "4:1:1"}.get((h, v), f"{h}x{v}"))
            break
        if length < 2:  # corrupt: a segment cannot be shorter than its length field
            break
        pos += 2 + length
    if exif:
        out.append("EXIF")
    return " ".join(out)


def jpeg_frame(data: bytes) -> Optional[Tuple[int, int, bool]]:
    """A JPEG's first frame header: (SOF marker, sample precision P, hierarchical),
    from its segments walked by their lengths (``_jpeg_variant``'s rules);
    hierarchical when a DHP segment (FF DE, T.81 B.3.2) or a differential SOF
    (SOF5-7, SOF13-15) comes first. None when no frame header is found."""
    pos, n, dhp = 2, len(data), False
    while pos + 4 <= n and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            pos += 2
            continue
        if marker in (0xD9, 0xDA):
            return None
        length = _be16(data, pos + 2)
        if marker == 0xDE:
            dhp = True
        if marker in JPEG_SOF:
            precision = data[pos + 4] if pos + 4 < n else 0
            return marker, precision, dhp or marker in (0xC5, 0xC6, 0xC7, 0xCD, 0xCE, 0xCF)
        if length < 2:
            return None
        pos += 2 + length
    return None


# The JPEG processes TensorFlow's libjpeg decodes: 8-bit baseline, extended and
# progressive, Huffman or arithmetic coded (SOF0-2, SOF9-10).
_TF_JPEG_SOF = (0xC0, 0xC1, 0xC2, 0xC9, 0xCA)
JPEG_PROCESS = {0xC0: "baseline", 0xC1: "extended sequential", 0xC2: "progressive",
                 0xC3: "lossless", 0xC5: "differential sequential",
                 0xC6: "differential progressive", 0xC7: "differential lossless",
                 0xC9: "arithmetic-coded extended sequential",
                 0xCA: "arithmetic-coded progressive", 0xCB: "arithmetic-coded lossless",
                 0xCD: "arithmetic-coded differential sequential",
                 0xCE: "arithmetic-coded differential progressive",
                 0xCF: "arithmetic-coded differential lossless"}


def jpeg_unsupported(data: bytes) -> str:
    """"" or the name of a valid JPEG variant TensorFlow's decoder does not read:
    a precision other than 8 bits (12-bit extended or progressive, SOF1/2/9/10
    with P=12), lossless (SOF3, SOF11; ITU T.81 annex H) or hierarchical
    (a DHP segment, SOF5-7, SOF13-15; annex J), e.g. "12-bit extended
    sequential JPEG (SOF1, P=12)". The process and precision are read from
    the frame header (``jpeg_frame``)."""
    frame = jpeg_frame(data)
    if frame is None:
        return ""
    marker, precision, hierarchical = frame
    name = JPEG_PROCESS.get(marker, "SOF%d" % (marker - 0xC0))
    label = f"SOF{marker - 0xC0}, P={precision}"
    if hierarchical:
        return f"hierarchical JPEG ({name} frame, {label})"
    if marker in (0xC3, 0xCB):
        return f"{precision}-bit {name} JPEG ({label})"
    if marker in _TF_JPEG_SOF and precision not in (8, 0) and marker != 0xC0:
        return f"{precision}-bit {name} JPEG ({label})"
    return ""


def variant(head: bytes, read_at: Optional[Callable[[int, int], bytes]] = None) -> str:
    """A short description of a file's format variant from its first bytes (4 KB).

    E.g. "JPEG baseline 4:2:0 EXIF", "JPEG progressive 4:4:4", "PNG 8-bit
    palette", "BMP 8-bit v3 top-down", "WebP lossless", "WebP animated",
    "TIFF little-endian", "HEIC/HEIF (heic)"; "unknown" for bytes of no
    known format. Parses headers only (JPEG markers up to the first SOF, PNG
    IHDR, BMP info header, WebP chunk).

    Args:
        head: the file's first bytes (or all of them).
        read_at: optional ``f(offset, size) -> bytes`` reading the file at
            any offset. A JPEG's segments are walked by their lengths up to
            its start of frame (however many there are), so that
            segments before it (a large ICC profile in APP2, an EXIF
            thumbnail) do not hide its variant: those beyond ``head`` are
            read with ``read_at`` (a few bytes each). Without it, a JPEG
            whose start of frame lies beyond ``head`` is described as
            "JPEG" (plus "EXIF" when seen).
    """
    fmt = sniff_bytes(head)
    if fmt is None:
        return "unknown"
    if fmt == "jpeg":
        return _jpeg_variant(head, read_at)
    if fmt == "png":
        if len(head) < 26:  # cut inside its IHDR chunk
            return "PNG (truncated header)"
        return f"PNG {head[24]}-bit {_PNG_COLOUR.get(head[25], 'colour type %d' % head[25])}" \
            + (" interlaced" if len(head) > 28 and head[28] else "")
    if fmt == "bmp":
        size = _le(head, 14, 4)
        bpp = _le(head, 24, 2) if size == 12 else _le(head, 28, 2)
        comp = 0 if size == 12 else _le(head, 30, 4)
        top_down = size != 12 and _le(head, 22, 4) >= 2 ** 31
        return (f"BMP {bpp}-bit{_BMP_COMPRESSION.get(comp, ' compression %d' % comp)} "
                f"{_BMP_HEADERS.get(size, 'header %d' % size)}" + (" top-down" if top_down else ""))
    if fmt == "webp":
        chunk = head[12:16]
        if chunk == b"VP8X":
            return "WebP animated" if len(head) > 20 and head[20] & 2 else "WebP extended"
        return "WebP lossless" if chunk == b"VP8L" else "WebP lossy"
    if fmt == "tiff":
        return "TIFF " + ("little-endian" if head[:2] == b"II" else "big-endian")
    if fmt == "gif":
        return "GIF " + head[3:6].decode("ascii", "replace")
    return f"{NAMES[FORMATS.index(fmt)]} ({head[8:12].decode('ascii', 'replace')})"
