"""Whether a JPEG's entropy-coded scan data is all there (ITU T.81 annex F, G).

A JPEG cut inside its scan data decodes without an error when an end-of-image
marker follows the cut (a partial copy that was "repaired", a stream cut and
closed): libjpeg meets the marker where it needs more bits, warns "Corrupt
JPEG data: premature end of data segment" (on stderr only) and fills the rest
of the image with zero coefficients (mid-gray, level 128, in a sequential
JPEG; missing refinements in a progressive one).

Two checks tell such a file from a complete one:

* ``progressive_scans_complete`` (in graph, cheap: one byte split of the
  file): a progressive JPEG's scans must bring every coefficient of every
  component to its last bit (a scan with ``Al = 0`` covering it, T.81 G.1.1);
  a cut before the last scan leaves some coefficient short.
* ``sequential_cut`` (Python, the rare path): walks the Huffman-coded data of
  a sequential (baseline or extended, Huffman) JPEG MCU by MCU, restart
  intervals included, and names the MCU where the data ends before the image
  does. The decoder asks for it only when a corner of the decoded image is
  mid-gray (``pipeline.decode.image``), the mark a cut leaves there.
* ``reads_past_end`` (in graph, two full decodes: a rare path): libjpeg's own
  answer to its warning's condition, whether its entropy decoder wants more
  bits than the scan holds. The file is decoded as it is and again with
  ``PROBE`` (entropy data, no marker) put before its final end-of-image
  marker: a complete file's decoder never reads those bytes (they follow its
  last scan's data; libjpeg skips them, warning "Corrupt JPEG data: 61
  extraneous bytes before marker 0xd9"), a cut one decodes them in place of
  the zero fill, so its pixels change. It covers what the walk does not: a
  progressive JPEG cut inside its last scan (every scan header present), and
  tf.data service workers (no Python).
* ``restarts_short`` (in graph, a few byte splits): a file with restart
  intervals holds one RSTn marker after each interval but the last; a cut
  right at an interval's end (which the probe does not see: libjpeg skips it
  while it looks for that marker) leaves fewer. Used where Python is not.
"""

from __future__ import annotations

import hashlib
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

# Sequential Huffman frames (SOF0 baseline, SOF1 extended): the walk's domain.
SEQUENTIAL_SOF = (0xC0, 0xC1)
PROGRESSIVE_SOF = (0xC2, 0xC6, 0xCA, 0xCE)
SOS_HEADER_BYTES = 14  # Ls, Ns, 4 x (Cs, Td/Ta), Ss, Se, Ah/Al

CUT_REASON = ("truncated JPEG (its scan data ends at MCU {done} of {total}; an "
              "end-of-image marker follows the cut)")
PROBE_REASON = ("truncated JPEG (its decoder needs more scan data than the file holds; an "
                "end-of-image marker follows the cut)")
SCANS_REASON = ("truncated JPEG (its progressive scans stop before every coefficient is "
                "complete; an end-of-image marker follows the cut)")


# 61 bytes of entropy data (SHA-256 bytes mod 255: no 0xFF, so never a marker nor a
# stuffed byte): ``reads_past_end``'s probe. Random bits make some coefficient of the
# blocks after a cut differ from libjpeg's zero fill, whatever the Huffman tables.
PROBE = bytes(b % 255 for b in (hashlib.sha256(b"jpegscan probe 1").digest()
                                + hashlib.sha256(b"jpegscan probe 2").digest()))[:61]
EOI = b"\xff\xd9"


class _Cut(Exception):
    pass


def _segments(data: bytes, pos: int) -> Tuple[List[bytes], int]:
    """The entropy-coded bytes from ``pos`` (unstuffed), split at RSTn markers,
    and the offset of the marker that ends them."""
    out, cur, n = [], bytearray(), len(data)
    while True:
        j = data.find(b"\xff", pos)
        if j < 0 or j + 1 >= n:
            cur += data[pos:]
            out.append(bytes(cur))
            return out, n
        cur += data[pos:j]
        nxt = data[j + 1]
        if nxt == 0x00:
            cur.append(0xFF)
            pos = j + 2
        elif nxt == 0xFF:  # fill bytes before a marker
            pos = j + 1
        elif 0xD0 <= nxt <= 0xD7:
            out.append(bytes(cur))
            cur = bytearray()
            pos = j + 2
        else:
            out.append(bytes(cur))
            return out, j


def _table(counts, symbols) -> Dict[Tuple[int, int], int]:
    table, code, k = {}, 0, 0
    for length in range(1, 17):
        for _ in range(counts[length - 1]):
            if k < len(symbols):
                table[(length, code)] = symbols[k]
            k += 1
            code += 1
        code <<= 1
    return table


class _Bits:
    def __init__(self, seg: bytes):
        self.bits = "".join(format(b, "08b") for b in seg) if seg else ""
        self.n = len(self.bits)
        self.pos = 0

    def read(self, k: int) -> None:
        self.pos += k
        if self.pos > self.n:
            raise _Cut()

    def symbol(self, table) -> int:
        bits, pos, code = self.bits, self.pos, 0
        for length in range(1, 17):
            if pos + length > self.n:
                raise _Cut()
            code = (code << 1) | (bits[pos + length - 1] == "1")
            s = table.get((length, code))
            if s is not None:
                self.pos = pos + length
                return s
        self.pos = pos + 16  # a bad code: libjpeg goes on with zeros; so does the walk
        return 0


def sequential_cut(data: bytes) -> str:
    """"" or ``CUT_REASON``: whether a sequential Huffman JPEG's scans hold every
    MCU before the marker that ends them (Python, rare path; about a second per
    megapixel).

    Args:
        data: the file's bytes.

    Returns:
        ``CUT_REASON`` filled in (the MCU where the data of the first short
        scan ends, and the scan's MCU count) when a scan's data ends before
        its last MCU; "" when every scan is whole, and for every JPEG this
        walk does not cover (progressive, arithmetic, lossless, hierarchical,
        12-bit) or whose headers it cannot read.
    """
    try:
        return _walk(data)
    except (IndexError, KeyError, ValueError, ZeroDivisionError):
        return ""


def _walk(data: bytes) -> str:
    pos, n = 2, len(data)
    frame, dc, ac, interval = None, {}, {}, 0
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return ""
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker == 0xD9:
            return ""
        length = data[pos + 2] * 256 + data[pos + 3]
        body = data[pos + 4:pos + 2 + length]
        if marker in (0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF, 0xC2):
            return ""
        if marker in SEQUENTIAL_SOF:
            if body[0] != 8:
                return ""
            height, width, nf = body[1] * 256 + body[2], body[3] * 256 + body[4], body[5]
            comps = {}
            for i in range(nf):
                cid, hv = body[6 + 3 * i], body[7 + 3 * i]
                comps[cid] = (hv >> 4, hv & 15)
            frame = (height, width, comps)
        elif marker == 0xC4:
            k = 0
            while k < len(body):
                tc, th = body[k] >> 4, body[k] & 15
                counts = body[k + 1:k + 17]
                total = sum(counts)
                (dc if tc == 0 else ac)[th] = _table(counts, body[k + 17:k + 17 + total])
                k += 17 + total
        elif marker == 0xDD:
            interval = body[0] * 256 + body[1]
        elif marker == 0xDA:
            if frame is None:
                return ""
            why = _scan(data, pos + 2 + length, body, frame, dc, ac, interval)
            if why:
                return why
            pos = _segments(data, pos + 2 + length)[1]
            continue
        pos += 2 + length
    return ""


def _scan(data, start, body, frame, dc, ac, interval) -> str:
    height, width, comps = frame
    hmax = max(h for h, _ in comps.values())
    vmax = max(v for _, v in comps.values())
    ns = body[0]
    members = []
    for i in range(ns):
        cid, t = body[1 + 2 * i], body[2 + 2 * i]
        h, v = comps[cid]
        members.append((h, v, dc[t >> 4], ac[t & 15]))
    if ns == 1:
        h, v = members[0][:2]
        cw = -(-width * h // hmax)
        chh = -(-height * v // vmax)
        total = (-(-cw // 8)) * (-(-chh // 8))
        blocks = [(members[0][2], members[0][3])]
    else:
        total = (-(-width // (8 * hmax))) * (-(-height // (8 * vmax)))
        blocks = [(d, a) for h, v, d, a in members for _ in range(h * v)]
    segments, _ = _segments(data, start)
    per = interval or total
    done = 0
    for seg in segments:
        bits = _Bits(seg)
        todo = min(per, total - done)
        try:
            for _ in range(todo):
                for dct, act in blocks:
                    bits.read(bits.symbol(dct))  # the DC difference's size, then its bits
                    k = 1
                    while k < 64:
                        rs = bits.symbol(act)
                        r, s = rs >> 4, rs & 15
                        if s == 0:
                            if r != 15:
                                break
                            k += 16
                            continue
                        bits.read(s)
                        k += r + 1
                done += 1
        except _Cut:
            return CUT_REASON.format(done=done, total=total)
        if done >= total:
            return ""
    return CUT_REASON.format(done=done, total=total) if done < total else ""


def progressive_short(data: bytes) -> bool:
    """In Python, ``progressive_scans_complete``'s test, negated: True for a
    progressive JPEG whose scans (walked by their segments and entropy data)
    leave some coefficient of some component without its last bit (``Al = 0``).
    False for every other file, and for headers it cannot read."""
    try:
        pos, n, comps, cover = 2, len(data), None, None
        while pos + 4 <= n:
            if data[pos] != 0xFF:
                break
            marker = data[pos + 1]
            if marker == 0xFF:
                pos += 1
                continue
            if marker == 0xD9:
                break
            length = data[pos + 2] * 256 + data[pos + 3]
            body = data[pos + 4:pos + 2 + length]
            if marker in PROGRESSIVE_SOF and comps is None:
                comps = [body[6 + 3 * i] for i in range(body[5])]
                cover = {c: np.zeros(64, bool) for c in comps}
            elif marker in SEQUENTIAL_SOF + (0xC3, 0xC5, 0xC7, 0xC9, 0xCB, 0xCD, 0xCF):
                return False
            elif marker == 0xDA and comps is not None:
                ns = body[0]
                ss, se, al = body[1 + 2 * ns], body[2 + 2 * ns], body[3 + 2 * ns] & 15
                if al == 0:
                    for i in range(ns):
                        if body[1 + 2 * i] in cover:
                            cover[body[1 + 2 * i]][ss:se + 1] = True
                pos = _segments(data, pos + 2 + length)[1]
                continue
            pos += 2 + length
        return comps is not None and not all(c.all() for c in cover.values())
    except IndexError:
        return False


def cut_reason(data: bytes) -> str:
    """"" or why a JPEG that ends with an end-of-image marker was cut inside its
    scan data (``SCANS_REASON`` for a progressive one, ``CUT_REASON`` for a
    sequential one): for a file whose decoder failed, or that the graph's
    checks flagged (Python, rare path)."""
    if progressive_short(data):
        return SCANS_REASON
    return sequential_cut(data)


# ---------------------------------------------------------------- in graph

def progressive_scans_complete(contents, sof):
    """In graph: whether a progressive JPEG's scans complete every coefficient.

    Args:
        contents: tf.string scalar, the file.
        sof: int64 scalar, the offset of its SOF marker (``decode.jpeg_sof_offset``).

    Returns:
        bool scalar: True when, for every component of the frame, each of the
        64 coefficients is covered by some scan (SOS after the SOF) with
        ``Al = 0``, its last bit (T.81 G.1.1.1); False when a scan is missing,
        as after a cut between or inside the early scans.
    """
    size = tf.cast(tf.strings.length(contents), tf.int64)
    sof = tf.clip_by_value(sof, 0, size)
    frame = tf.cast(tf.io.decode_raw(tf.strings.substr(contents, sof, 22), tf.uint8,
                                     fixed_length=22), tf.int32)
    nf = tf.minimum(frame[9], 4)
    ids = tf.stack([frame[10 + 3 * i] for i in range(4)])
    ids = tf.where(tf.range(4) < nf, ids, -1)
    pieces = tf.strings.split(tf.strings.substr(contents, sof, size - sof), sep=b"\xff\xda")[1:]
    hdr = tf.cast(tf.io.decode_raw(pieces, tf.uint8, fixed_length=SOS_HEADER_BYTES), tf.int32)
    ns = tf.minimum(hdr[:, 2], 4)  # [S]
    at = 3 + 2 * ns
    rows = tf.range(tf.shape(hdr)[0])
    pick = lambda off: tf.gather_nd(hdr, tf.stack([rows, tf.minimum(at + off, 13)], 1))
    ss, se, al = pick(0), pick(1), tf.bitwise.bitwise_and(pick(2), 15)
    cs = tf.stack([hdr[:, 3 + 2 * i] for i in range(4)], 1)  # [S, 4]
    cs = tf.where(tf.range(4)[None] < ns[:, None], cs, -2)
    k = tf.range(64)[None]
    band = (k >= ss[:, None]) & (k <= se[:, None]) & tf.equal(al, 0)[:, None]  # [S, 64]
    has = tf.reduce_any(tf.equal(cs[:, :, None], ids[None, None]), axis=1)  # [S, 4]
    cover = tf.reduce_any(has[:, :, None] & band[:, None, :], axis=0)  # [4, 64]
    cover = cover | (ids < 0)[:, None]
    return tf.reduce_all(cover) & (nf > 0)


def reads_past_end(contents, decoded=None, whole=None):
    """In graph: whether libjpeg's entropy decoder needs more data than a JPEG holds
    (ITU T.81 F.2.2.5: the decoder meets a marker before a scan's last MCU; libjpeg
    then warns "premature end of data segment" and decodes the rest as zeros).

    The file is decoded twice (``tf.io.decode_jpeg``, full scale, RGB): as it is, and
    with ``PROBE`` inserted before its last two bytes. When those are the end-of-image
    marker that closes the last scan's data, a cut file's decoder reads the probe as
    the data after the cut, so some pixels change; a complete file's decoder has
    finished its last MCU before the probe (libjpeg skips it with an "extraneous
    bytes" warning on stderr), so its pixels are the same. A rare path: some 2.2x
    a decode.

    Args:
        contents: tf.string scalar, a JPEG that decodes without error.
        decoded: optional uint8 ``[h, w, 3]``: the pixels the caller already has, used
            as the file's first decode where ``whole`` says they are it.
        whole: bool scalar, with ``decoded``: True when ``decoded`` is exactly
            ``tf.io.decode_jpeg(contents, channels=3)`` (full scale, whole, as stored);
            the probe then costs one decode instead of two.

    Returns:
        bool scalar: True when the pixels differ. False for a file that does not end
        with an end-of-image marker (a cut without one fails to decode instead).
    """
    size = tf.strings.length(contents)
    ends = tf.equal(tf.strings.substr(contents, tf.maximum(size - 2, 0), 2), EOI)

    def probe():
        probed = tf.strings.join([tf.strings.substr(contents, 0, size - 2), PROBE, EOI])
        if decoded is None:
            a = tf.io.decode_jpeg(contents, channels=3)
        else:
            a = tf.cond(whole, lambda: decoded,
                        lambda: tf.io.decode_jpeg(contents, channels=3))
        b = tf.io.decode_jpeg(probed, channels=3)
        return tf.reduce_any(tf.not_equal(a, b))

    return tf.cond(ends, probe, lambda: tf.constant(False))


def restarts_short(contents, sof):
    """In graph: whether a single-scan sequential JPEG with restart intervals has fewer
    RSTn markers than its MCUs need (T.81 B.2.4.4, E.1.4: one marker after every
    interval but the last): a cut at an interval's end, which ``reads_past_end`` does
    not see (libjpeg then skips the probe while it looks for the next RSTn).

    Args:
        contents: tf.string scalar, the file.
        sof: int64 scalar, the offset of its SOF marker (``decode.jpeg_sof_offset``).

    Returns:
        bool scalar: True when a restart interval (DRI before the scan) is set and the
        markers after the scan header are fewer than ceil(MCUs / interval) - 1; False
        otherwise (no interval, no scan, headers it cannot read).
    """
    size = tf.cast(tf.strings.length(contents), tf.int64)
    sof = tf.clip_by_value(sof, 0, size)
    padded = tf.strings.join([contents, bytes(32)])  # reads past the end give zeros
    raw = lambda pos, n: tf.cast(tf.io.decode_raw(
        tf.strings.substr(padded, pos, n), tf.uint8, fixed_length=n), tf.int64)
    frame = raw(sof, 22)
    height, width, nf = frame[5] * 256 + frame[6], frame[7] * 256 + frame[8], frame[9]
    hv = tf.stack([frame[11 + 3 * i] for i in range(4)])
    used = tf.range(4, dtype=tf.int64) < tf.minimum(nf, 4)
    hs = tf.where(used, tf.bitwise.right_shift(hv, 4), 1)
    vs = tf.where(used, tf.bitwise.bitwise_and(hv, 15), 1)
    hmax, vmax = tf.maximum(tf.reduce_max(hs), 1), tf.maximum(tf.reduce_max(vs), 1)
    after = tf.strings.split(tf.strings.substr(contents, sof, size - sof), sep=b"\xff\xda",
                             maxsplit=1)
    sos = sof + tf.cast(tf.strings.length(after[0]), tf.int64)  # the frame's first scan
    scan = raw(sos, 6)
    ns, first = scan[4], scan[5]
    # its DRI: after any embedded JPEG (an EXIF thumbnail's EOI), before the scan
    head = tf.strings.substr(contents, tf.constant(0, tf.int64), sos)
    start = sos - tf.cast(tf.strings.length(tf.strings.split(head, sep=EOI)[-1]), tf.int64)
    dri = tf.strings.split(tf.strings.substr(contents, start, sos - start), sep=b"\xff\xdd")
    ri = tf.cast(tf.io.decode_raw(tf.strings.substr(tf.strings.join([dri[-1], bytes(4)]), 2, 2), tf.uint8, fixed_length=2),
                 tf.int64)
    interval = tf.where(tf.size(dri) > 1, ri[0] * 256 + ri[1], 0)
    # one component: its own blocks (A.2.2); several: the MCU grid (A.2.3)
    ids = tf.stack([frame[10 + 3 * i] for i in range(4)])
    one = tf.reduce_max(tf.where(used & tf.equal(ids, first), tf.range(4, dtype=tf.int64), 0))
    cw = (width * tf.gather(hs, one) + hmax - 1) // hmax
    ch = (height * tf.gather(vs, one) + vmax - 1) // vmax
    mcus = tf.where(tf.equal(ns, 1), ((cw + 7) // 8) * ((ch + 7) // 8),
                    ((width + 8 * hmax - 1) // (8 * hmax)) * ((height + 8 * vmax - 1) // (8 * vmax)))
    data = tf.strings.substr(contents, sos, size - sos)[None]
    markers = tf.add_n([tf.size(tf.raw_ops.StringSplitV2(input=data, sep=bytes([0xFF, m])).values)
                        - 1 for m in range(0xD0, 0xD8)])
    need = (mcus + tf.maximum(interval, 1) - 1) // tf.maximum(interval, 1) - 1
    return (interval > 0) & (sof > 0) & (tf.cast(markers, tf.int64) < need)
