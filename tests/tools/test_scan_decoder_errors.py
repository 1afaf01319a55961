"""pipeline.scan survives files whose decoder raises (truncated JPEG) and names them."""

import numpy as np
from PIL import Image

import pipeline
import pytest

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack


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


# --- issue 15: libjpeg's lines about a truncated JPEG --------------------------------

def _truncated_jpegs(folder):
    """Good JPEGs and four truncations, each making libjpeg / TensorFlow write its own line."""
    import os
    os.makedirs(folder / "a")
    rs = np.random.RandomState(0)
    Image.fromarray(rs.randint(0, 255, (40, 50, 3)).astype(np.uint8)).save(folder / "a" / "good.jpg")
    Image.fromarray(rs.randint(0, 255, (80, 64, 3)).astype(np.uint8)).save(
        folder / "a" / "prog.jpg", progressive=True)
    base = (folder / "a" / "good.jpg").read_bytes()
    prog = (folder / "a" / "prog.jpg").read_bytes()
    cuts = {"in_header.jpg": base[:20],          # "Input file read error"
            "before_scan.jpg": base[:300],       # "Improper call to JPEG library in state 201"
            "in_scan.jpg": base[:1500],          # "Premature end of JPEG data. Stopped at line"
            "progressive.jpg": prog[:700]}       # "Improper call to JPEG library in state 203"
    for name, data in cuts.items():
        (folder / "a" / name).write_bytes(data)
    return sorted(cuts)


def test_scan_shows_its_own_reason_not_libjpegs_lines(tmp_path):
    """`python -m pipeline scan` printed "Improper call to JPEG library in state 201" (and the
    other lines a truncated JPEG makes libjpeg and TensorFlow write), unattributed, beside
    the report's "truncated JPEG" line naming the file."""
    import os
    import subprocess
    import sys
    names = _truncated_jpegs(tmp_path / "d")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # pipeline's 2
    proc = subprocess.run([sys.executable, "-m", "pipeline", "scan", str(tmp_path / "d"),
                           "--noprogress"], capture_output=True, text=True, timeout=300,
                          cwd=repo, env=env)
    assert proc.returncode == 1, proc.stderr[-2000:]
    for line in ("Improper call to JPEG library", "Input file read error",
                 "Premature end of JPEG data"):
        assert line not in proc.stderr and line not in proc.stdout, proc.stderr[-2000:]
    for name in names:
        assert f"/{name}: truncated JPEG (no end-of-image marker)\n" in proc.stdout + "\n"
    assert "files: 6  decodable: 2  bad: 4" in proc.stdout


def test_dropping_keeps_every_other_line(capfd):
    """Only the known lines go; other writers' lines and unfinished lines stay, in order."""
    import os
    from pipeline import native_stderr
    with native_stderr.dropping(native_stderr.TRUNCATED_JPEG) as dropped:
        os.write(2, b"keep 1\nImproper call to JPEG library in state 201\n")
        os.write(2, b"\rscan:  10%|#   | 1/10")            # a progress bar's update ...
        os.write(2, b"Improper call to JPEG library in state 203\n")   # ... then libjpeg
        os.write(2, b"2026-12-01 00:03:33.912549: E tensorflow/core/lib/jpeg/jpeg_mem.cc:327] "
                    b"Premature end of JPEG data. Stopped at line 14/40\n")
        os.write(2, b"E0000 00:00:1796084130.938829    2256 jpeg_mem.cc:331] Premature end of "
                    b"JPEG data. Stopped at line 0/40\nInput file read error\n")
        os.write(2, b"Bogus Huffman table definition\nImproper call to JPEG library in state "
                    b"201 and more\nkeep 2")
    os.write(2, b"\nafter\n")
    err = capfd.readouterr().err
    assert err == ("keep 1\n\rscan:  10%|#   | 1/10Bogus Huffman table definition\n"
                   "Improper call to JPEG library in state 201 and more\nkeep 2\nafter\n")
    assert len(dropped) == 5
