"""``pipeline.scan``: one parallel pass that reports what a dataset holds.

Run it before a long training job: it decodes every file with the same
in-graph decoder the factories use (so what it calls bad is exactly what
``on_error`` would meet), in parallel, with a progress bar.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import os
import sys
from typing import Dict, List, Optional

import tensorflow as tf

from pipeline import assemble
from pipeline import checks
from pipeline import config
from pipeline.decode import image as decode_lib
from pipeline.decode import formats
from pipeline.decode import guard
from pipeline.sources import index as index_lib
from pipeline.sources import manifest as manifest_lib
from pipeline import native_stderr
from pipeline.sources import read
from pipeline import stack

# Bucket upper bounds: file sizes in bytes, image sides in pixels.
BYTE_BUCKETS = (0, 1 << 10, 10 << 10, 100 << 10, 1 << 20, 10 << 20)
SIDE_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096)


# The bytes of each file that scan keeps (its format variant is read from them):
# the first HEAD_BYTES, or a JPEG's bytes up to its frame header, at most
# MAX_HEAD_BYTES (beyond, the few bytes needed are read from the file).
HEAD_BYTES = 4096
MAX_HEAD_BYTES = 1 << 20
# ``ScanReport.per_variant``'s rows for files with no format variant, so that
# every file is counted once.
UNREADABLE = "unreadable (cannot be read)"
EMPTY = "empty file (0 bytes)"
NOT_AN_IMAGE = "not an image (no known format)"
# Appended to the variant of a file that the Pillow fallback decodes (the slow path).
FALLBACK_MARK = " (Pillow fallback)"


def _variant_row(head: bytes, read_at=None) -> str:
    """The ``per_variant`` row of a file from its first bytes (``formats.variant``)."""
    if not head:
        return EMPTY
    found = formats.variant(head, read_at)
    return NOT_AN_IMAGE if found == "unknown" else found


def _human(b: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if b < 1024 or unit == "GB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.0f} {unit}"
        b /= 1024
    return str(b)


def _range_labels(bounds, fmt):
    """Bin labels that read as ranges: the first bin is "<= a", then "a-b"
    (above a, up to b), the last "> z"."""
    labels = ["0 B (empty)" if bounds[0] == 0 else f"<= {fmt(bounds[0])}"]
    # after "0 B (empty)" the next bin starts at 1 B (no two bins share a size)
    labels += [f"{fmt(lo + (lo == 0))}-{fmt(hi)}" for lo, hi in zip(bounds, bounds[1:])]
    return labels + [f"> {fmt(bounds[-1])}"]


# ``file_bytes_histogram``'s row of the files with no size (missing or unreadable).
NO_SIZE = "no size (missing or unreadable)"


def _bucket(value, bounds, labels) -> str:
    for hi, label in zip(bounds, labels):
        if value <= hi:
            return label
    return labels[-1]


BYTE_LABELS = _range_labels(BYTE_BUCKETS, lambda b: _human(b))
SIDE_LABELS = _range_labels(SIDE_BUCKETS, lambda s: f"{s}px")


def _bucket_label_bytes(b: int) -> str:
    return _bucket(b, BYTE_BUCKETS, BYTE_LABELS)


def _bucket_label_side(s: int) -> str:
    return _bucket(s, SIDE_BUCKETS, SIDE_LABELS)


@dataclasses.dataclass
class ScanReport:
    """What ``scan`` found.

    Attributes:
        num_files: int, files indexed.
        num_ok: int, files that decode.
        per_class: {class name: number of files} (or {} without classes).
        per_format: {format (sniffed from content): number of files}.
        file_bytes_histogram: {bin label: count}, file sizes; the bins are
            ranges: "0 B (empty)", "1 B-1 KB", "1 KB-10 KB" (above 1 KB, up to
            10 KB), ..., "> 10 MB"; a file with no size (missing or
            unreadable: it is a bad file) under "no size (missing or
            unreadable)", last. Each file is counted in one bin.
        max_side_histogram: {bin label: count}, the larger image side in
            pixels (decodable files only), bins "<= 64px", "64px-128px", ...,
            "> 4096px".
        extension_mismatches: list of {"path", "extension", "format"}.
        bad_files: list of {"path", "reason"}.
        total_bytes: int, sum of file sizes.
        per_variant: {format variant from the header (``formats.variant``,
            e.g. "JPEG progressive 4:2:0 EXIF", "BMP 8-bit RLE8 v3"): count;
            a variant that the slow Pillow fallback decodes here is marked,
            e.g. "HEIC/HEIF (heic) (Pillow fallback)"};
            every file is counted once, the counts add up to ``num_files``:
            a file with no variant is counted under "unreadable (cannot be
            read)", "empty file (0 bytes)" or "not an image (no known
            format)".
        left_out: paths the listing left out (not an image extension).
        in_no_class: image files directly under a class-folder root, left
            out (in no class folder, they have no class).
        stack: one line on the optional decoders here (tensorflow-io).
        duplicates: list of {"path", "lines"}: files a manifest lists on
            more than one line (the factories deliver every row; the file
            is counted once per row in the other fields).
        unlistable_folders: list of {"path", "reason"}: folders that could
            not be listed (their images are not counted anywhere else).
        links_not_read: list of {"path", "reason"}: symbolic links left out:
            links to folders not followed (``follow_links=False``), dangling
            links and link loops without an image extension.
        fallback_files: int, files that the slow Pillow fallback decodes here
            (the variants marked in ``per_variant``).
        fallback_ms_per_file: float or None, the fallback's mean wall time per
            file in this scan's decode, milliseconds (measured around the
            Python call: reading the header, Pillow's decode, conversion);
            None when no file took it.
    """
    num_files: int
    num_ok: int
    per_class: Dict[str, int]
    per_format: Dict[str, int]
    file_bytes_histogram: Dict[str, int]
    max_side_histogram: Dict[str, int]
    extension_mismatches: List[dict]
    bad_files: List[dict]
    total_bytes: int
    per_variant: Dict[str, int] = dataclasses.field(default_factory=dict)
    left_out: List[str] = dataclasses.field(default_factory=list)
    stack: str = ""
    duplicates: List[dict] = dataclasses.field(default_factory=list)
    in_no_class: List[str] = dataclasses.field(default_factory=list)
    unlistable_folders: List[dict] = dataclasses.field(default_factory=list)
    links_not_read: List[dict] = dataclasses.field(default_factory=list)
    fallback_files: int = 0
    fallback_ms_per_file: Optional[float] = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, **kw) -> str:
        # A name that is not UTF-8 holds surrogate escapes (os.fsdecode): written as
        # JSON's \\udcXX, so json.loads gives the same str back (os.fsencode: its bytes).
        return re.sub("[\udc80-\udcff]", lambda m: f"\\u{ord(m.group()):04x}",
                      json.dumps(self.to_dict(), ensure_ascii=False, **kw))

    def table(self) -> str:
        """A readable multi-section text report."""
        out = [self.stack] if self.stack else []
        out.append(f"files: {self.num_files}  decodable: {self.num_ok}  "
                   f"bad: {len(self.bad_files)}  total size: {_human(self.total_bytes)}")

        def section(title, mapping):
            if not mapping:
                return
            out.append(f"\n{title}")
            width = max(len(str(k)) for k in mapping)
            for k, v in mapping.items():
                out.append(f"  {str(k):<{width}}  {v:>7}")

        section("per class", self.per_class)
        section("per format (by content)", self.per_format)
        section("format variants (from headers)", self.per_variant)
        if self.fallback_files:
            cost = (f"; measured {self.fallback_ms_per_file:.1f} ms per file in this scan"
                    if self.fallback_ms_per_file is not None else "")
            out.append(f"\nslow path: {self.fallback_files} file(s) decoded by the Pillow "
                       f"fallback (Python in a py_function, holds the GIL{cost}); converting "
                       "them to JPEG or PNG avoids it")
        section("file size", self.file_bytes_histogram)
        section("larger side", self.max_side_histogram)
        if self.extension_mismatches:
            out.append(f"\nextension mismatches ({len(self.extension_mismatches)}; decoded by content)")
            for m in self.extension_mismatches:
                out.append(f"  {m['path']}: named {m['extension']}, is {m['format']}")
        if self.left_out:
            out.append(f"\nleft out: not an image extension ({len(self.left_out)})")
            for p in self.left_out[:50]:
                out.append(f"  {p}")
            if len(self.left_out) > 50:
                out.append(f"  ... and {len(self.left_out) - 50} more")
        if self.in_no_class:
            out.append(f"\nleft out: in no class folder ({len(self.in_no_class)}; directly "
                       "under the root)")
            for p in self.in_no_class[:50]:
                out.append(f"  {p}")
            if len(self.in_no_class) > 50:
                out.append(f"  ... and {len(self.in_no_class) - 50} more")
        if self.duplicates:
            out.append(f"\nlisted more than once ({len(self.duplicates)}; each row is "
                       "delivered)")
            for d in self.duplicates:
                out.append(f"  {d['path']}: lines {', '.join(map(str, d['lines']))}")
        if self.unlistable_folders:
            out.append(f"\nfolders that cannot be listed ({len(self.unlistable_folders)}; "
                       "their images are not read)")
            for u in self.unlistable_folders:
                out.append(f"  {u['path']}: {u['reason']}")
        if self.links_not_read:
            out.append(f"\nsymbolic links left out ({len(self.links_not_read)})")
            for u in self.links_not_read:
                out.append(f"  {u['path']}: {u['reason']}")
        if self.bad_files:
            out.append(f"\nbad files ({len(self.bad_files)})")
            for b in self.bad_files:
                out.append(f"  {b['path']}: {b['reason']}")
        return read.shown("\n".join(out))  # names that are not UTF-8, escaped

    def __str__(self):
        return self.table()

    def _repr_html_(self):
        import html
        return "<pre>" + html.escape(self.table()) + "</pre>"


def _index_for(source, follow_links=False, allow_outside_root=False, manifest_kw=None):
    manifest_kw = manifest_kw or {}
    checks.check_manifest_options(source, manifest_kw)
    is_manifest = not isinstance(source, (list, tuple)) and manifest_lib.is_manifest(source)
    if isinstance(source, (list, tuple)):
        return index_lib.index_paths(list(source))
    source = os.fspath(source)
    if os.path.isfile(source) and is_manifest:
        return manifest_lib.index_manifest(source, allow_outside_root=allow_outside_root,
                                           missing_ok=True, **manifest_kw)[0]
    if os.path.isdir(source):
        has_dirs = any(e.is_dir() and not e.name.startswith(".") for e in os.scandir(source))
        return index_lib.index_directory(source, "inferred" if has_dirs else None,
                                         follow_links=follow_links, on_error="skip")
    return index_lib.index_directory(source)  # raises the not-found error


def _takes_fallback(decoder, head: bytes, path: str) -> bool:
    """``Decoder.takes_fallback`` of a file whose first bytes are ``head``; a TIFF
    whose IFD0 lies past them (libtiff writes it last) is read there."""
    if head[:4] not in (b"II*\x00", b"MM\x00*"):
        return decoder.takes_fallback(head)
    with read.RangeReader(path) as more:
        return decoder.takes_fallback(head, lambda o, n: head[o:o + n] if o + n <= len(head)
                                      else more(o, n))


def stack_line() -> str:
    """One line on the optional decoders and file systems this installation has."""
    st = stack.tfio_status()
    webp = "WebP: TensorFlow" if stack.core_webp() else (
        "WebP: tensorflow-io" if st.available else "WebP: Pillow fallback")
    if st.available:
        tfio = f"tensorflow-io {st.version}: TIFF, AVIF, s3://"
    else:
        s3 = ("s3:// through fsspec" if stack.fsspec_available("s3") else
              "s3:// needs pip install -e '.[s3]' (in pipeline's checkout)")
        tfio = (f"tensorflow-io's ops do not load here: TIFF and AVIF through the Pillow "
                f"fallback (slow path), {s3}")
    return f"stack: TensorFlow {tf.__version__}; {webp}; {tfio}"


@checks.known_keywords()
def scan(source, max_pixels: Optional[int] = None, num_parallel_calls: Optional[int] = None,
         follow_links: bool = False, progress: bool = True,
         allow_outside_root: bool = False, path_column: Optional[str] = None,
         label_columns=None, root: Optional[str] = None) -> ScanReport:
    """Scans a folder, a manifest or a list of paths in one parallel pass.

    Every file is read and decoded with the factories' in-graph decoder
    (``pipeline.decode.image.Decoder``, header guard included), in parallel
    (``num_parallel_calls``, default 2x the cores); nothing is kept but its
    shape and its first 4 KB, which give its format variant (a JPEG's
    segments are walked by their lengths, so that its bytes up to its frame
    header are kept when that lies further, e.g. after a large ICC profile
    or an EXIF thumbnail). A full pass: on the sample photos it reads about
    as fast as a training epoch decodes.

    Args:
        source: a class-folder directory (or a flat folder), a manifest
            (.csv / .jsonl) or a list of paths.
        max_pixels: int, header limit (default 178,956,970, Pillow's
            decompression-bomb limit, as the factories').
        num_parallel_calls: decode parallelism (default 2x the cores).
        follow_links: follow linked folders (loop-safe).
        progress: show a tqdm progress bar.
        allow_outside_root: a manifest may name files outside its folder
            (absolute paths, ``..``), as in ``from_manifest``.
        path_column: str, a manifest's column of image paths (default
            "path"), as in ``from_manifest``.
        label_columns: a manifest's label column (str) or columns (list of
            str); default the column "label" when there is one. Its classes
            give ``per_class``.
        root: str, the folder a manifest's relative paths resolve against
            (default the manifest's folder).

    Returns:
        A ``ScanReport``.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        FileNotFoundError: ``source`` does not exist.
        ValueError: ``source`` holds no image files; a bad ``max_pixels``;
            ``path_column``, ``label_columns`` or ``root`` given for a source
            that is not a manifest, or not a column name; a manifest column
            that is not there (the message names the columns found).
    """
    manifest_kw = {k: v for k, v in (("path_column", path_column),
                                     ("label_columns", label_columns), ("root", root))
                   if v is not None}
    idx = _index_for(source, follow_links, allow_outside_root, manifest_kw)
    return scan_index(idx, max_pixels=max_pixels, num_parallel_calls=num_parallel_calls,
                      progress=progress)


def scan_index(idx: index_lib.Index, max_pixels: Optional[int] = None,
               num_parallel_calls: Optional[int] = None, progress: bool = True,
               desc: str = "scan") -> ScanReport:
    """``scan`` of an ``Index`` (the files a factory or ``write_tfrecords`` would read).

    Args:
        idx: a ``pipeline.sources.index.Index``.
        max_pixels, num_parallel_calls, progress: as ``scan``.
        desc: the progress bar's label.

    Returns:
        A ``ScanReport``; ``bad_files`` lists every file the factories'
        decoder refuses or fails on, in index order, with its reason.

    While it decodes, the lines libjpeg and TensorFlow write to stderr for a
    truncated JPEG (``pipeline.native_stderr.TRUNCATED_JPEG``: "Improper call
    to JPEG library in state 201", ...) are dropped: the report names each such
    file "truncated JPEG (no end-of-image marker)".
    """
    opts = config.make_options(
        "scan", max_pixels=config.DEFAULT_MAX_PIXELS if max_pixels is None else max_pixels,
        num_parallel_calls=num_parallel_calls, image_size=None, batch_size=None)
    decoder, _ = assemble.make_stages(idx, opts, full_graph=True)
    rows = _ScanRows(idx, decoder)
    rows.read(_probe_dataset(idx, decoder, opts), progress, desc)
    return rows.report()


def _head_size(contents):
    """The first 4 KB; a JPEG's bytes up to its frame header when that lies further
    (after a large ICC profile or EXIF thumbnail), at most MAX_HEAD_BYTES."""
    jpeg = tf.equal(tf.strings.substr(contents, 0, 3), b"\xff\xd8\xff")
    sof = tf.cond(jpeg, lambda: decode_lib.jpeg_sof_offset(contents),
                  lambda: tf.constant(-1, tf.int64))
    return tf.clip_by_value(sof + 20, HEAD_BYTES, MAX_HEAD_BYTES)


def _probe_dataset(idx: index_lib.Index, decoder, opts) -> tf.data.Dataset:
    """(row, decoded [height, width], reason or "", the file's head bytes) of each file
    of ``idx`` the decoder does not raise on, in index order, in graph."""
    pre = [idx.errors.get(k, "") for k in range(len(idx))]
    fetch = bool(read.needs_fetch(idx.paths))  # fsspec: fetched before, many at a time

    def probe(k, path, pre_error, fetched):
        def load():
            contents = fetched if fetch else tf.io.read_file(path)
            image, reason = decoder.decode(contents)
            head = tf.strings.substr(contents, tf.constant(0, tf.int64), _head_size(contents))
            return tf.shape(image)[:2], reason, head
        return (k,) + tf.cond(tf.strings.length(pre_error) > 0,
                              lambda: (tf.constant([0, 0]), pre_error, tf.constant(b"")), load)

    ds = tf.data.Dataset.from_tensor_slices((tf.range(len(idx), dtype=tf.int64),
                                             read.path_bytes(idx.paths), pre,
                                             [b""] * len(idx)))
    if fetch:
        def fill(k, path, pre_error, _):
            todo = tf.strings.length(pre_error) == 0
            data, why = read.fetch_tensors(path, todo)
            return k, path, tf.where(todo, why, pre_error), data
        ds = ds.batch(read.FETCH_BATCH).map(
            tf.autograph.experimental.do_not_convert(fill),
            num_parallel_calls=read.FETCH_PARALLEL, deterministic=True).unbatch()
    ds = ds.map(tf.autograph.experimental.do_not_convert(probe),
                num_parallel_calls=opts.parallelism, deterministic=True)
    # A decoder that raises (e.g. a truncated JPEG) drops its element here; the
    # missing rows are diagnosed from their bytes after the pass.
    ds = ds.ignore_errors()
    o = tf.data.Options()
    o.autotune.enabled = False
    return ds.prefetch(16).with_options(o)


def _elements(ds, limit: int):
    """``ds``'s elements as numpy values, leaving out those that end in a
    ``tf.errors.CancelledError`` (at most ``limit`` of them; one more is raised).

    ``ignore_errors`` drops an element whose decoder raised, but not a cancellation: when
    a decode op fails while a loop of the same element's function runs beside it (the
    header walk), TensorFlow may report the loop's "Loop execution was cancelled" first.
    That element is the decoder's failure: it is left out here as ``ignore_errors``
    leaves the others, and diagnosed from its bytes after the pass."""
    it, cancelled = iter(ds), 0
    while True:
        try:
            element = next(it)
        except StopIteration:
            return
        except tf.errors.CancelledError:
            cancelled += 1
            if cancelled > limit:
                raise
            continue
        yield tuple(t.numpy() for t in element)


class _ScanRows:
    """What ``scan_index`` learns of each row: ``bad`` ((row, reason)), ``sides``
    (a Counter of the good images' longer sides, by bucket), ``row_fmt`` (row ->
    sniffed format or None) and ``row_variant`` (row -> encoding variant)."""

    def __init__(self, idx: index_lib.Index, decoder):
        self.idx, self.decoder = idx, decoder
        self.bad, self.sides, self.row_fmt, self.row_variant = [], collections.Counter(), {}, {}

    def read(self, ds: tf.data.Dataset, progress: bool, desc: str) -> None:
        """Records every element of ``_probe_dataset``, then diagnoses the rows that
        never arrived (their decoder raised) from their bytes."""
        from tqdm.auto import tqdm  # pylint: disable=import-outside-toplevel

        idx = self.idx
        # The bar advances by rows, not by elements: an element whose decoder raised
        # (a truncated JPEG) never arrives, and is counted when the next one does
        # (or at the end), so the bar reaches the file count.
        bar = tqdm(total=len(idx), unit="file", desc=desc, disable=not progress,
                   file=sys.stderr)
        done = -1
        with bar, native_stderr.dropping(native_stderr.TRUNCATED_JPEG):
            for k, shape, reason, head in _elements(ds, len(idx)):
                bar.update(int(k) - done)
                done = int(k)
                self._record(int(k), shape, reason.decode("utf-8", "replace"), head)
            bar.update(len(idx) - 1 - done)
            self.bad += [(k, self._why(k)) for k in range(len(idx)) if k not in self.row_fmt]
        for k in range(len(idx)):
            if k not in self.row_variant:  # refused before reading (e.g. missing), or empty
                with read.RangeReader(idx.paths[k]) as more:
                    head = more(0, HEAD_BYTES)
                    self.row_variant[k] = (UNREADABLE if more.failed else
                                           _variant_row(head, more))

    def _record(self, k: int, shape, reason: str, head: bytes) -> None:
        self.row_fmt[k] = formats.sniff_bytes(head) if head else None
        if len(head) >= MAX_HEAD_BYTES:  # a JPEG's frame header may lie further still
            with read.RangeReader(self.idx.paths[k]) as more:
                self.row_variant[k] = _variant_row(head, more)
        elif head:
            self.row_variant[k] = _variant_row(head)
        if head and _takes_fallback(self.decoder, head, self.idx.paths[k]):
            self.row_variant[k] += FALLBACK_MARK
        if reason:
            self.bad.append((k, reason))
        else:
            self.sides[_bucket_label_side(int(max(shape)))] += 1

    def _why(self, k: int) -> str:
        """The reason row ``k``'s decoder raised, from its bytes (the rare path)."""
        contents, err = read.try_read(self.idx.paths[k])
        self.row_fmt[k] = formats.sniff_bytes(contents[:16]) if contents else None
        self.row_variant[k] = UNREADABLE if err else _variant_row(contents)
        if contents and self.decoder.takes_fallback(contents[:HEAD_BYTES],
                                                    lambda o, n: contents[o:o + n]):
            self.row_variant[k] += FALLBACK_MARK
        return guard.diagnose(contents, err, self.decoder.decode, lambda img: img)

    def report(self) -> ScanReport:
        """The ``ScanReport`` of the rows read."""
        idx, row_fmt, row_variant = self.idx, self.row_fmt, self.row_variant
        variants = collections.Counter(row_variant.values())
        slow_n, slow_s = self.decoder.fallback_stats
        bad = [{"path": idx.paths[k], "reason": reason} for k, reason in sorted(self.bad)]
        per_class = {}
        if idx.class_names and idx.label_kind == "int":
            counts = collections.Counter(idx.labels.tolist())
            per_class = {c: counts.get(i, 0) for i, c in enumerate(idx.class_names)}
        sizes = idx.sizes()
        byte_hist = collections.Counter(_bucket_label_bytes(int(b)) if b >= 0 else NO_SIZE
                                        for b in sizes)
        fmts = collections.Counter(f or "unknown" for f in row_fmt.values())
        mism = [{"path": p, "extension": os.path.splitext(p)[1], "format": row_fmt[k]}
                for k, p in enumerate(idx.paths)
                if row_fmt.get(k) and formats.from_extension(p) not in (None, row_fmt[k])]
        return ScanReport(
            num_files=len(idx), num_ok=len(idx) - len(bad), per_class=per_class,
            per_format=dict(fmts.most_common()),
            file_bytes_histogram={k: byte_hist[k] for k in BYTE_LABELS + [NO_SIZE]
                                  if byte_hist[k]},
            max_side_histogram={k: self.sides[k] for k in SIDE_LABELS if self.sides[k]},
            extension_mismatches=mism, bad_files=bad,
            total_bytes=int(sizes.clip(0).sum()), per_variant=dict(variants.most_common()),
            left_out=list(idx.left_out), in_no_class=list(idx.in_no_class),
            stack=stack_line(),
            duplicates=[{"path": p, "lines": list(ls)} for p, ls in idx.duplicates.items()],
            unlistable_folders=[{"path": p, "reason": r} for p, r in idx.unlisted.items()],
            links_not_read=[{"path": p, "reason": r} for p, r in idx.links.items()],
            fallback_files=sum(1 for v in row_variant.values() if v.endswith(FALLBACK_MARK)),
            fallback_ms_per_file=round(1000 * slow_s / slow_n, 2) if slow_n else None)

