"""Ctrl-C: any command stops with one line on stderr and exit status 130; ``bench``
prints the medians of the rounds every candidate finished."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import solid
from pipeline.tools.bench import harness as bench


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _figures(name, rate):
    return {"name": name, "images_per_sec": rate, "images_per_cpu_sec": rate / 2,
            "steady_images_per_cpu_sec": rate / 2, "num_images": 8}


def _two_candidates(monkeypatch, run):
    """Two registered names whose runs ``run`` answers (in this process)."""
    monkeypatch.setattr(bench, "CANDIDATES", {"pipeline": None, "keras": None})
    monkeypatch.setattr(bench, "PRECHECKS", {})
    monkeypatch.setattr(bench, "run_candidate", run)


def test_bench_interrupted_keeps_the_rounds_every_candidate_finished(monkeypatch):
    calls = []

    def fake_run(spec, timeout=None, progress=True):
        calls.append(spec["name"])
        if len(calls) == 4:  # Ctrl-C while keras runs its second round
            raise KeyboardInterrupt
        return _figures(spec["name"], 100.0 * len(calls))

    _two_candidates(monkeypatch, fake_run)
    with pytest.raises(bench.Interrupted) as e:
        bench.run_candidates(["pipeline", "keras"], {"seed": 0}, repeats=5, progress=False)
    assert calls == ["pipeline", "keras", "pipeline", "keras"]
    assert e.value.rounds == 1
    # pipeline's second run (call 3) is left out: keras never finished a second round
    assert e.value.results["pipeline"]["images_per_sec"] == 100.0
    assert e.value.results["keras"]["images_per_sec"] == 200.0
    assert [len(r["runs"]) for r in e.value.results.values()] == [1, 1]


def test_bench_interrupted_before_any_round_has_no_results(monkeypatch):
    def fake_run(spec, timeout=None, progress=True):
        raise KeyboardInterrupt

    _two_candidates(monkeypatch, fake_run)
    with pytest.raises(bench.Interrupted) as e:
        bench.run_candidates(["pipeline", "keras"], {"seed": 0}, repeats=3, progress=False)
    assert e.value.rounds == 0 and e.value.results == {}


def _as_in_a_terminal():
    """SIGINT's default action in the child, as a terminal's foreground command has it: a
    test run started in the background (``cmd &`` without job control: nohup, CI runners)
    passes SIGINT on ignored, and Python then installs no Ctrl-C handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_bench_is_one_line_and_exit_130(tmp_path):
    for c in ("a", "b"):
        for i in range(8):
            solid(str(tmp_path / "photos" / c / f"{i}.jpg"), 30 * i, size=(40, 30), fmt="JPEG")
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "bench", f"--data_dir={tmp_path / 'photos'}",
         "--repeats=50", "--epochs=1", "--batch_size=4", "--image_size=16", "--noprogress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # its own process group: the terminal's Ctrl-C reaches all
        preexec_fn=_as_in_a_terminal)
    out, err = [], []
    readers = [threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True),
               threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + 240
    while not any("files in" in line for line in out) and time.monotonic() < deadline:
        time.sleep(0.2)  # the header: the candidates' rounds have begun
    assert any("files in" in line for line in out), "".join(out + err)[-3000:]
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    rc = proc.wait(timeout=60)
    stopped_in = time.monotonic() - t0
    for t in readers:
        t.join(10)
    text = "".join(err)
    assert rc == 130, text[-3000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    stopped = [line for line in err if line.startswith("pipeline: stopped (Ctrl-C")]
    assert len(stopped) == 1, text[-3000:]
    assert "round(s) finished" in stopped[0]
    assert stopped_in < 10, stopped_in
