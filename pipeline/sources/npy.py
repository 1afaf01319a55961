"""``.npy`` shards streamed in graph: rows read as fixed-length records, never whole files.

Each file's header is parsed once, in Python, with ``numpy.lib.format``
(``read_magic`` + ``read_array_header_1_0`` / ``_2_0``; never ``allow_pickle``).
The rows are then read by ``tf.data.FixedLengthRecordDataset`` (``record_bytes``
= one row, ``header_bytes`` = the header) and turned back into arrays by
``tf.io.decode_raw`` + reshape, so memory is a few read buffers plus the
shuffle buffer, whatever the shard sizes.
"""

from __future__ import annotations

import dataclasses
import glob as glob_lib
import os
from typing import List, Optional, Tuple

import numpy as np
import tensorflow as tf

from pipeline import checks
from pipeline import config
from pipeline.deliver import plan

# dtypes tf.io.decode_raw can produce.
DECODE_RAW_DTYPES = (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                     np.int64, np.uint8, np.uint16, np.complex64, np.complex128, np.bool_)


@dataclasses.dataclass(frozen=True)
class NpyInfo:
    """What a ``.npy`` header says: ``rows`` of ``row_shape`` ``dtype``, data at ``header_bytes``."""
    path: str
    rows: int
    row_shape: Tuple[int, ...]
    dtype: np.dtype
    header_bytes: int

    @property
    def record_bytes(self) -> int:
        return int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize


def read_header(path: str) -> NpyInfo:
    """Parses one ``.npy`` header (no data read, no pickle).

    Raises:
        ValueError: not a .npy file, an unsupported format version, object
            dtype (pickled), Fortran order, a 0-d array, a dtype
            ``tf.io.decode_raw`` cannot read, or a file shorter than its header
            claims; the message names the file.
    """
    fmt = np.lib.format
    with open(path, "rb") as f:
        try:
            version = fmt.read_magic(f)
        except ValueError as e:
            raise ValueError(f"{path}: not a .npy file ({e})") from None
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(f)
        else:
            raise ValueError(f"{path}: .npy format version {version} is not supported "
                             "(1.0 and 2.0 are)")
        header_bytes = f.tell()
    if dtype.hasobject:
        raise ValueError(f"{path}: object dtype {dtype} would need pickle, which is refused "
                         "(save numeric arrays)")
    if fortran and len(shape) > 1:
        raise ValueError(f"{path}: Fortran-order array; rows are not contiguous. Save it with "
                         "np.save(path, np.ascontiguousarray(a))")
    if len(shape) == 0:
        raise ValueError(f"{path}: 0-d array; shards need rows (shape [rows, ...])")
    if dtype.newbyteorder("=").type not in DECODE_RAW_DTYPES or dtype.fields is not None:
        raise ValueError(f"{path}: dtype {dtype} is not supported (numeric and bool dtypes are)")
    info = NpyInfo(path, int(shape[0]), tuple(int(s) for s in shape[1:]), dtype, header_bytes)
    size = os.path.getsize(path)
    want = header_bytes + info.rows * info.record_bytes
    if size < want:
        raise ValueError(f"{path}: truncated: {size} bytes, the header claims {want}")
    return info


def _files(arg, name) -> List[str]:
    if isinstance(arg, (str, os.PathLike)):
        arg = os.fspath(arg)
        # An existing file is itself, never a pattern (``data[1].npy``); only a
        # string naming no file is globbed (glob.escape makes [ * ? literal).
        files = ([arg] if os.path.exists(arg) or not any(c in arg for c in "*?[")
                 else sorted(glob_lib.glob(arg)))
    else:
        files = sorted(os.fspath(f) for f in arg)
    if not files:
        raise ValueError(f"`{name}` matches no files. Received: {name}={arg!r}")
    for f in files:
        if not os.path.isfile(f):
            raise FileNotFoundError(f"`{name}`: file not found: {f!r}")
    return files


def _check_same(infos: List[NpyInfo], name: str):
    first = infos[0]
    for i in infos[1:]:
        if i.row_shape != first.row_shape or i.dtype != first.dtype:
            raise ValueError(
                f"{i.path}: rows of shape {i.row_shape} {i.dtype} disagree with "
                f"{first.path} ({first.row_shape} {first.dtype}); all `{name}` shards must match")


def _decoder(info: NpyInfo):
    dtype = info.dtype
    little = dtype.byteorder != ">" and not (dtype.byteorder == "=" and np.little_endian is False)
    tf_dtype = tf.as_dtype(dtype.newbyteorder("="))
    shape = list(info.row_shape)

    def decode(records):
        """string [...] of row records -> [..., *row_shape]."""
        if tf_dtype == tf.bool:
            x = tf.io.decode_raw(records, tf.uint8) > 0
        else:
            x = tf.io.decode_raw(records, tf_dtype, little_endian=little)
        x = tf.reshape(x, tf.concat([tf.shape(records), tf.constant(shape, tf.int32)], 0))
        x.set_shape(records.shape.concatenate(shape))
        return x
    return decode


@checks.known_keywords()
def from_npy_shards(inputs, labels=None, shuffle: bool = True, seed: Optional[int] = None,
                    batch_size: Optional[int] = 32, shuffle_buffer_size: int = 1024,
                    cycle_length: Optional[int] = None, drop_remainder: bool = False,
                    prefetch: int = 2, num_parallel_calls: Optional[int] = None,
                    deterministic: Optional[bool] = None) -> tf.data.Dataset:
    """Paired ``.npy`` shards (``inputs_k.npy``, ``labels_k.npy``) -> streamed rows.

    Args:
        inputs: a ``.npy`` file, a glob or a list of ``.npy`` files; sorted,
            and paired with ``labels`` by that sorted order. A path that
            exists is read literally, even with ``[ ] * ?`` in its name; a
            string that names no file is a glob (``glob.glob``), in which
            ``glob.escape`` makes such characters literal
            (``glob.escape("run[7]") + "/inputs_*.npy"``).
        labels: None, or a file, glob or list of ``.npy`` files, one per
            input file, with the same number of rows (read as ``inputs``).
        shuffle: bool; the shard order is reshuffled every epoch and rows go
            through a shuffle buffer of ``shuffle_buffer_size`` rows.
        seed: int or None; the same seed gives the same order.
        batch_size: int or None (unbatched rows).
        shuffle_buffer_size: int >= 1, rows held for shuffling (memory is about
            this many rows).
        cycle_length: shards read at once (interleaved row by row); default
            ``min(num_shards, 4)``.
        drop_remainder: bool, drop the last short batch.
        prefetch: int >= 0, batches prefetched.
        num_parallel_calls: int >= 1 or ``tf.data.AUTOTUNE``, parallel readers/decoders
            (default 2x cores).
        deterministic: None / bool, as in the image factories.

    Returns:
        ``tf.data.Dataset`` of ``(x, y)`` (or ``x`` without labels): rows with
        the files' row shape and dtype, ``[batch, *row_shape]`` when batched.
        Attributes ``file_paths`` (input files) and ``num_rows``.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: a bad argument; a file that is not .npy, pickled (object
            dtype), Fortran-ordered or truncated; row shapes or dtypes that
            disagree between shards; input / label row counts that disagree;
            each names the file.
        FileNotFoundError: a listed file does not exist.
    """
    batch_size = checks.check_int("batch_size", batch_size, allow_none=True)
    shuffle_buffer_size = checks.check_int("shuffle_buffer_size", shuffle_buffer_size)
    cycle_length = checks.check_int("cycle_length", cycle_length, allow_none=True)
    prefetch = checks.check_int("prefetch", prefetch, minimum=0)
    drop_remainder = checks.check_bool("drop_remainder", drop_remainder)
    if deterministic is not None:
        deterministic = checks.check_bool("deterministic", deterministic)
    # the image factories' option groups: their checks, their parallelism and determinism
    order = config.OrderOptions(shuffle=shuffle, seed=seed, deterministic=deterministic)
    runtime = config.RuntimeOptions(num_parallel_calls=num_parallel_calls, prefetch=prefetch)
    x_infos, y_infos = _shard_infos(inputs, labels)
    total = sum(i.rows for i in x_infos)
    if total == 0:
        raise ValueError(f"The shards hold no rows. Received: inputs={inputs!r}")
    reader = _Rows(x_infos, y_infos, order, runtime.parallelism,
                   min(len(x_infos), cycle_length or 4), min(total, shuffle_buffer_size))
    # as ``assemble.data_options``: no graph rewrite at the first iterator (no static
    # optimizations, no ``deterministic``: each stage sets its own parallelism and order)
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    ds = plan.order(reader.elements, batch_size=batch_size, drop_remainder=drop_remainder,
                    on_batches=plan.Map(reader.decode, runtime.parallelism,
                                        order.is_deterministic),
                    prefetch=prefetch, options=options)
    ds.file_paths = [i.path for i in x_infos]
    ds.num_rows = total
    return ds


def _shard_infos(inputs, labels):
    """The headers of the input shards and of their label shards (or None), checked
    to agree (row shapes and dtypes between shards, row counts between pairs)."""
    x_files = _files(inputs, "inputs")
    x_infos = [read_header(f) for f in x_files]
    _check_same(x_infos, "inputs")
    if labels is None:
        return x_infos, None
    y_files = _files(labels, "labels")
    if len(y_files) != len(x_files):
        raise ValueError(f"{len(x_files)} input file(s) but {len(y_files)} label file(s); "
                         f"they pair by sorted order. Received: labels={labels!r}")
    y_infos = [read_header(f) for f in y_files]
    _check_same(y_infos, "labels")
    for xi, yi in zip(x_infos, y_infos):
        if xi.rows != yi.rows:
            raise ValueError(f"{yi.path} has {yi.rows} rows but its input file "
                             f"{xi.path} has {xi.rows}")
    return x_infos, y_infos


class _Rows:
    """The rows of the shards: files shuffled, read row by row (interleaved), rows
    shuffled in a buffer (``elements``), decoded on batches (``decode``)."""

    def __init__(self, x_infos, y_infos, order, parallel: int, cycle: int, buffer: int):
        self.x_infos, self.y_infos, self.order = x_infos, y_infos, order
        self.parallel, self.cycle, self.buffer = parallel, cycle, buffer
        self.cols = [tf.constant([i.path for i in x_infos]),
                     tf.constant([i.header_bytes for i in x_infos], tf.int64)]
        if y_infos:
            self.cols += [tf.constant([i.path for i in y_infos]),
                          tf.constant([i.header_bytes for i in y_infos], tf.int64)]
        self.x_dec = _decoder(x_infos[0])
        self.y_dec = _decoder(y_infos[0]) if y_infos else None

    def rows(self, *c):
        x = tf.data.FixedLengthRecordDataset(c[0], self.x_infos[0].record_bytes,
                                             header_bytes=c[1])
        if not self.y_infos:
            return x
        return tf.data.Dataset.zip((x, tf.data.FixedLengthRecordDataset(
            c[2], self.y_infos[0].record_bytes, header_bytes=c[3])))

    def elements(self, _):
        """Files shuffled, read row by row (interleaved), rows shuffled in a buffer."""
        order = self.order
        files = tf.data.Dataset.from_tensor_slices(tuple(self.cols))
        if order.shuffle:
            files = plan.shuffle(files, len(self.x_infos), order.seed)
        ds = files.interleave(self.rows, cycle_length=self.cycle, block_length=1,
                              num_parallel_calls=min(self.cycle, self.parallel),
                              deterministic=order.is_deterministic)
        if order.shuffle:
            ds = plan.shuffle(ds, self.buffer, order.seed)
        return ds, None

    def decode(self, *records):
        """Decoded on batches: one decode_raw per batch, not per row."""
        if self.y_infos:
            return self.x_dec(records[0]), self.y_dec(records[1])
        return self.x_dec(records[0])
