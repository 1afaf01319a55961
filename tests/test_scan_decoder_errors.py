"""pipeline.scan survives files whose decoder raises (truncated JPEG) and names them."""

import numpy as np
from PIL import Image

import pipeline


def test_scan_reports_truncated_jpeg(tmp_path):
    for k in range(3):
        Image.fromarray(np.full((40, 50, 3), 60 * k, np.uint8)).save(tmp_path / f"f{k}.jpg")
    data = (tmp_path / "f1.jpg").read_bytes()
    (tmp_path / "f1.jpg").write_bytes(data[: len(data) * 6 // 10])
    (tmp_path / "f3.jpg").write_bytes(b"")
    report = pipeline.scan(str(tmp_path), progress=False)
    assert report.num_files == 4 and report.num_ok == 2
    assert [b["path"].rsplit("/", 1)[-1] for b in report.bad_files] == ["f1.jpg", "f3.jpg"]
    assert "truncated" in report.bad_files[0]["reason"]
    assert report.max_side_histogram and sum(report.max_side_histogram.values()) == 2
