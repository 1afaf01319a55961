"""Damaged TFRecord shards: the intact shards are read whole, the damaged one up to the damage.

Every variant of the kind: a shard cut inside a record, inside a record's header, at a
record boundary; one byte flipped in a record's data or in its length field; two damaged
shards; both ``shuffle`` orders. Each damaged shard is one entry of ``pipeline.errors``
naming the shard, the record index, the cause and the records lost.
"""

import os
import re
import shutil
import struct

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from io_helpers import write_image

SHARDS, PER_SHARD = 4, 10


def _frames(path):
    """Byte offsets of the records of an intact shard (length, crc, data, crc)."""
    data = open(path, "rb").read()
    offsets, at = [], 0
    while at < len(data):
        offsets.append(at)
        (n,) = struct.unpack("<Q", data[at:at + 8])
        at += 16 + n
    return offsets, data


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """40 solid PNGs, value k+1 for img k, written to 4 shards of 10 records in order."""
    root = tmp_path_factory.mktemp("damage")
    src = str(root / "src")
    for k in range(SHARDS * PER_SHARD):
        write_image(os.path.join(src, f"c{k % 2}", f"img{k:02d}.png"), k + 1)
    out = str(root / "rec")
    pipeline.write_tfrecords(src, out, num_shards=SHARDS, shuffle=False, progress=False)
    files = sorted(f for f in os.listdir(out) if f.endswith(".tfrecord"))
    by_shard = []
    for f in files:
        vals = []
        for rec in tf.data.TFRecordDataset(os.path.join(out, f)):
            ex = tf.train.Example.FromString(rec.numpy())
            name = os.path.basename(ex.features.feature["path"].bytes_list.value[0].decode())
            vals.append(int(name[3:5]) + 1)
        by_shard.append(vals)
    assert [len(v) for v in by_shard] == [PER_SHARD] * SHARDS
    return out, files, by_shard


def _damaged_copy(written, tmp_path, damage):
    """A copy of the shards with ``damage`` = {shard number: (kind, record index)} applied.
    Returns the folder and, per damaged shard, the readable records (its first ``index``)."""
    out, files, _ = written
    dst = str(tmp_path / "copy")
    shutil.copytree(out, dst)
    for s, (kind, index) in damage.items():
        path = os.path.join(dst, files[s])
        offsets, data = _frames(path)
        at = offsets[index]
        if kind == "cut data":          # a partial copy: ends inside record `index`'s data
            data = data[:at + 16 + 3]
        elif kind == "cut header":      # ends inside record `index`'s 12-byte header
            data = data[:at + 5]
        elif kind == "cut boundary":    # ends cleanly after `index` records
            data = data[:at]
        elif kind == "flip data":       # one byte of record `index`'s data flipped
            b = bytearray(data)
            b[at + 12 + 7] ^= 0x5A
            data = bytes(b)
        elif kind == "flip length":     # one byte of record `index`'s length field flipped
            b = bytearray(data)
            b[at + 1] ^= 0x01
            data = bytes(b)
        else:
            raise AssertionError(kind)
        open(path, "wb").write(data)
    return dst


CAUSES = {"cut data": "truncated record", "cut header": "truncated record",
          "cut boundary": "shard ends early", "flip data": "CRC mismatch",
          "flip length": "CRC mismatch"}


def _delivered(ds):
    return sorted(int(v) for x, _ in ds for v in np.asarray(x)[:, 0, 0, 0])


@pytest.mark.stack  # TFRecord reading, by stack
@pytest.mark.parametrize("kind,index,shuffle", [
    ("cut data", 9, False), ("cut data", 9, True), ("cut data", 4, False),
    ("cut header", 6, False), ("cut header", 6, True), ("cut boundary", 7, False),
    ("flip data", 4, False), ("flip data", 4, True), ("flip data", 0, False),
    ("flip length", 3, False)])
def test_skip_delivers_every_intact_record_and_names_the_damage(written, tmp_path, kind,
                                                                 index, shuffle):
    _, files, by_shard = written
    out = _damaged_copy(written, tmp_path, {1: (kind, index)})
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=8, shuffle=shuffle,
                                 seed=3, on_error="skip")
    want = sorted(v for s, vals in enumerate(by_shard)
                  for v in (vals[:index] if s == 1 else vals))
    assert _delivered(ds) == want
    recs = pipeline.errors(ds)
    assert len(recs) == 1, recs
    (rec,) = recs
    assert rec.path == os.path.join(out, files[1])
    lost = PER_SHARD - index
    assert CAUSES[kind] in rec.reason
    assert f"record {index} " in rec.reason
    assert f"{lost} of its {PER_SHARD} records lost" in rec.reason
    # a second epoch: the same records, the damage recorded once
    assert _delivered(ds) == want and len(pipeline.errors(ds)) == 1


@pytest.mark.stack  # TFRecord reading, by stack
@pytest.mark.parametrize("shuffle", [False, True])
def test_two_damaged_shards_are_two_entries(written, tmp_path, shuffle):
    _, files, by_shard = written
    out = _damaged_copy(written, tmp_path, {0: ("flip data", 2), 3: ("cut data", 8)})
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=8, shuffle=shuffle,
                                 on_error="skip")
    want = sorted(by_shard[0][:2] + by_shard[1] + by_shard[2] + by_shard[3][:8])
    assert _delivered(ds) == want
    recs = {r.path: r.reason for r in pipeline.errors(ds)}
    assert set(recs) == {os.path.join(out, files[0]), os.path.join(out, files[3])}
    assert "CRC mismatch" in recs[os.path.join(out, files[0])]
    assert "8 of its 10 records lost" in recs[os.path.join(out, files[0])]
    assert "truncated record" in recs[os.path.join(out, files[3])]
    assert "2 of its 10 records lost" in recs[os.path.join(out, files[3])]


@pytest.mark.stack  # TFRecord reading, by stack
@pytest.mark.parametrize("kind,index", [("cut data", 9), ("flip data", 4)])
def test_raise_names_the_shard_the_record_and_the_cause(written, tmp_path, kind, index):
    _, files, _ = written
    out = _damaged_copy(written, tmp_path, {2: (kind, index)})
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=8, shuffle=False)
    with pytest.raises(tf.errors.OpError) as e:
        list(ds)
    msg = str(e.value)
    assert files[2] in msg and CAUSES[kind] in msg and f"record {index} " in msg
    assert f"{PER_SHARD - index} of its {PER_SHARD} records lost" in msg
    # the count of lost records is the damaged shard's, not the whole epoch's
    assert not re.search(r"\b40 element\(s\) of 40\b", msg)
    for other in files[:2] + files[3:]:
        assert other not in msg


@pytest.mark.stack  # TFRecord reading, by stack
def test_each_input_pipeline_names_only_the_damage_in_its_share(written, tmp_path):
    """Two input pipelines over four shards: pipeline 1 reads shards 1 and 3."""
    _, files, by_shard = written
    out = _damaged_copy(written, tmp_path, {1: ("flip data", 5)})
    got, recs = [], []
    for k in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=k)
        ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=8, shuffle=False,
                                     on_error="skip", input_context=ctx)
        got += _delivered(ds)
        recs.append(pipeline.errors(ds))
    assert sorted(got) == sorted(by_shard[0] + by_shard[1][:5] + by_shard[2] + by_shard[3])
    assert recs[0] == []
    assert [r.path for r in recs[1]] == [os.path.join(out, files[1])]
    assert "5 of its 10 records lost" in recs[1][0].reason
