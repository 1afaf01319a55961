"""The surface a user meets: CLI help and exit codes, the bench headline's spread line,
scan's histogram labels, the default data folder, the candidate registry and the
generated API reference. Most run in-process (no timings are asserted)."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import run_cli
from pipeline import cli
from pipeline.tools import sample
from pipeline.tools.bench import harness as bench

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- command line ------------------------------------------------------------

def test_help_exits_0_and_lists_commands():
    code, out, _ = run_cli("--help")
    assert code == 0
    for name in ("bench", "scan", "convert", "service", "doctor"):
        assert f"\n  {name} " in out
    assert run_cli("-h")[0] == 0


@pytest.mark.parametrize("name, positionals, own, foreign", [
    ("bench", [], ["--data_dir", "--repeats", "--compare", "--max_spread"],
     ["--num_shards", "--port", "--max_pixels"]),
    ("scan", ["SOURCE"], ["--max_pixels", "--follow_links", "--json_out"],
     ["--num_shards", "--port", "--repeats"]),
    ("convert", ["SRC", "OUT"], ["--num_shards", "--path_column", "--on_error", "--max_pixels"],
     ["--port", "--repeats", "--follow_links"]),
    ("service", ["ROLE"], ["--port", "--dispatcher_address", "--worker_addresses"],
     ["--num_shards", "--repeats", "--json_out"]),
    ("doctor", [], ["--json_out"], ["--num_shards", "--port", "--repeats"]),
])
def test_command_help_shows_its_usage_and_only_its_flags(name, positionals, own, foreign):
    for args in ((name, "--help"), ("--help", name), (name, "-h")):
        code, out, _ = run_cli(*args)
        assert code == 0, args
        assert out.startswith(f"usage: python -m pipeline {name}")
        for p in positionals:
            assert f"\n  {p}  " in out
        for f in own:
            assert (f"  {f}" in out or f"  --[no]{f[2:]}" in out) and "[default: " in out
        for f in foreign:
            assert f not in out, (name, f)
    # every flag of the command is listed with its default
    code, out, _ = run_cli(name, "--help")
    for f in cli.command_flags(name):
        assert f"{f}" in out
    if name == "convert":
        assert "--num_shards N" in out and "Shards to write" in out and "[default: none]" in out
    if name == "bench":
        assert "[default: 5]" in out  # repeats


def test_helpfull_is_absls_full_list():
    code, out, _ = run_cli("--helpfull")
    assert code == 0
    assert "--[no]logtostderr" in out and all(f"\n  {c} " in out for c in cli.COMMANDS)
    code, out, _ = run_cli("convert", "--helpfull")
    assert code == 0 and "--num_shards" in out and "--[no]logtostderr" in out


def test_every_flag_belongs_to_a_command():
    for name in cli.COMMANDS:
        names = cli.command_flags(name)
        assert names or name == "service", name
        text = cli.command_help(name)
        assert all(f"--{f}" in text for f in names), name


@pytest.mark.parametrize("args, says", [
    ((), "expected a command"),
    (("nope",), "unknown command 'nope'"),
    (("nope", "--help"), "unknown command"),
    (("--nope",), "unrecognized arguments: --nope"),
    (("bench", "--nope"), "unrecognized arguments: --nope"),
    (("bench", "--batch_size=abc"), "--batch_size=abc"),
    (("bench", "--epochs=0"), "--epochs must be an integer >= 1"),
    (("bench", "--image_size=1,2,3"), "--image_size"),
    (("bench", "--on_error=ignore"), "--on_error"),
    (("bench", "--compare=nope"), "--compare: unknown candidate(s) nope; known: "),
    (("bench", "extra"), "unrecognized arguments: extra"),
    (("scan",), "the following arguments are required: SOURCE"),
    (("scan", "a", "b"), "unrecognized arguments: b"),
    (("convert", "only_src"), "the following arguments are required: OUT"),
    (("convert", "README.md", "b", "--num_shards=0"), "SRC must be a folder or a manifest"),
    (("service",), "the following arguments are required: ROLE"),
    (("service", "boss"), "invalid choice: 'boss' (choose from 'dispatcher', 'worker')"),
    (("service", "worker"), "--dispatcher_address"),
    (("doctor", "extra"), "unrecognized arguments: extra"),
])
def test_usage_errors_exit_2_with_the_usage_line(args, says):
    code, out, err = run_cli(*args)
    assert code == 2, (args, out, err)
    assert says in err and "usage: python -m pipeline" in err
    assert "Traceback" not in err and "--heartbeat_interval_ms" not in err


def test_usage_errors_show_lists_as_typed_not_as_python_lists():
    """`--compare=keras,nope` was echoed as `['keras', 'nope']`, a Python list the user never
    typed (issue #15): list flags read back comma-separated, positionals as on the shell."""
    from pipeline.tools.bench import candidates  # noqa: F401  registers them, as the command does
    known = ", ".join(sorted(bench.CANDIDATES))
    cases = [
        (("bench", "--compare=keras,nope,nada"),
         f"--compare: unknown candidate(s) nope,nada; known: {known}. "
         "Received: --compare=keras,nope,nada"),
        (("bench", "--image_size=1,2,3"),
         "--image_size must be (height, width) of positive integers or None. "
         "Received: --image_size=(1, 2, 3)"),
        (("scan", "a", "b c"), "unrecognized arguments: 'b c'"),
        (("service", "dispatcher", "x"), "unrecognized arguments: x"),
        (("doctor", "extra"), "unrecognized arguments: extra"),
        (("bench", "extra"), "unrecognized arguments: extra"),
    ]
    for args, says in cases:
        code, out, err = run_cli(*args)
        assert code == 2, (args, out, err)
        assert err.splitlines()[0] == f"pipeline {args[0]}: error: {says}", (args, err)
        assert "[" not in err.splitlines()[0].split(": error:")[1], err
    code, _, err = run_cli("nope")
    assert code == 2 and err.splitlines()[0] == (
        "pipeline: error: unknown command 'nope' (commands: bench, scan, convert, service, "
        "doctor). Received: nope")
    code, _, err = run_cli()
    assert code == 2 and err.splitlines()[0] == (
        "pipeline: error: expected a command, one of bench, scan, convert, service, doctor. "
        "Received: none")


def test_missing_source_exits_2(tmp_path):
    code, _, err = run_cli("scan", str(tmp_path / "nope"), "--noprogress")
    assert code == 2 and "nope" in err
    code, _, err = run_cli("convert", str(tmp_path / "nope"), str(tmp_path / "out"))
    assert code == 2 and "pipeline convert: error:" in err


def test_doctor_prints_the_stack(tmp_path, monkeypatch):
    import json
    import numpy as np
    import tensorflow as tf
    code, out, _ = run_cli("doctor", f"--json_out={tmp_path / 'd.json'}")
    assert code == 0
    info = json.loads((tmp_path / "d.json").read_text())
    text = json.dumps(info)
    assert tf.__version__ in text and np.__version__ in text


def test_python_dash_m_pipeline_help_exits_0():
    """The real entry point once (the rest run in-process)."""
    for args in (["--help"], ["convert", "--help"]):
        proc = subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, PYTHONPATH=REPO))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.startswith("usage: python -m pipeline")


def test_main_module_is_a_shim():
    lines = [l for l in open(os.path.join(REPO, "pipeline", "__main__.py")).read().splitlines()
             if l.strip()]
    assert lines[1:] == ["from pipeline import cli", "cli.run()"]


# --- bench: the headline's spread, from fake results --------------------------

def _fake(name, rates, per_cpu=500.0):
    runs = [{"name": name, "images_per_sec": r, "steady_images_per_cpu_sec": per_cpu}
            for r in rates]
    return {"name": name, "images_per_sec": sorted(rates)[len(rates) // 2],
            "steady_images_per_cpu_sec": per_cpu, "runs": runs}


def test_spread_line_flags_a_wide_spread():
    res = {"pipeline": _fake("pipeline", [300, 400, 520]), "keras": _fake("keras", [200] * 3)}
    s = bench.spread(res["pipeline"])
    assert s == {"median": 400, "min": 300, "max": 520, "runs": 3,
                 "relative": pytest.approx(220 / 400)}
    lines = "\n".join(bench.headline(res, "pipeline", ["keras"]))
    assert "pipeline images/s: 400 (median of 3 runs, spread 300-520, 55% of the median)" in lines
    assert lines.count("TOO WIDE TO TRUST") == 2   # pipeline's images/s and the ratio
    assert "pipeline / keras, images/s: 2.00x (median of 3 runs, spread 1.50x-2.60x" in lines
    assert "pipeline / keras, images per CPU-second: 1.00x" in lines


def test_spread_line_quiet_when_steady_and_says_when_unmeasured():
    res = {"pipeline": _fake("pipeline", [400, 410, 420]), "keras": _fake("keras", [200] * 3),
           "torch": {"name": "torch", "skipped": "torch is not installed here"}}
    lines = "\n".join(bench.headline(res, "pipeline", ["keras", "torch"]))
    assert "TOO WIDE" not in lines and "5% of the median" in lines
    assert "torch: no figures (torch is not installed here)" in lines
    # the limit is a parameter (--max_spread)
    assert "TOO WIDE" in "\n".join(bench.headline(res, "pipeline", ["keras"], max_spread=0.01))
    one = {"pipeline": _fake("pipeline", [400])}
    assert "one run: no spread measured" in bench.headline(one, "pipeline", [])[0]
    assert bench.spread({"name": "x", "skipped": "why"}) is None


# --- candidate registry --------------------------------------------------------

def test_register_refuses_main_and_records_the_module():
    def factory(spec):
        return []
    factory.__module__ = "__main__"
    with pytest.raises(ValueError, match="importable module"):
        bench.register("from_main", factory)
    assert "from_main" not in bench.CANDIDATES
    from pipeline.tools.bench import candidates  # noqa: F401
    assert bench.MODULES["pipeline"] == "pipeline.tools.bench.candidates"
    assert not {"torch", "tf1_queue", "pydataset", "keras_idg"} & set(bench.CANDIDATES) or \
        "peer_candidates" in sys.modules  # only benchmarks/peer_candidates.py adds the peers


def test_a_candidate_registered_outside_the_package_runs_in_its_subprocess(tmp_path):
    """The worker imports the module that registered a candidate, from its folder."""
    (tmp_path / "my_peers.py").write_text(
        "import numpy as np\n"
        "from pipeline.tools.bench import harness as bench\n"
        "def _ones(spec):\n"
        "    return [np.ones((2, 1)), np.ones((3, 1))]\n"
        "bench.register('ones_peer', _ones, 'two tiny batches')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import my_peers  # noqa: F401
        assert bench.MODULES["ones_peer"] == "my_peers"
        assert str(tmp_path) in bench._module_dirs(["ones_peer"])
        r = bench.run_candidates(["ones_peer"], {"epochs": 2}, progress=False, timeout=120)
    finally:
        sys.path.remove(str(tmp_path))
        for d in (bench.CANDIDATES, bench.DESCRIPTIONS, bench.MODULES):
            d.pop("ones_peer", None)
    assert r["ones_peer"]["images_delivered"] == 10
    assert r["ones_peer"]["description"] == "two tiny batches"


# --- scan's histogram labels --------------------------------------------------

def test_scan_histogram_labels_are_ranges(tmp_path):
    from PIL import Image
    from pipeline.tools import report
    assert report.BYTE_LABELS == ["0 B (empty)", "1 B-1 KB", "1 KB-10 KB", "10 KB-100 KB",
                                  "100 KB-1 MB", "1 MB-10 MB", "> 10 MB"]
    assert report.SIDE_LABELS[:3] == ["<= 64px", "64px-128px", "128px-256px"]
    assert report._bucket_label_bytes(150 << 10) == "100 KB-1 MB"
    assert report._bucket_label_bytes(100 << 10) == "10 KB-100 KB"   # upper bound inclusive
    assert report._bucket_label_side(300) == "256px-512px"
    d = tmp_path / "imgs"
    d.mkdir()
    Image.new("RGB", (300, 20)).save(d / "a.png")
    Image.new("RGB", (40, 30)).save(d / "b.png")
    r = report.scan(str(d), progress=False)
    assert r.max_side_histogram == {"<= 64px": 1, "256px-512px": 1}
    assert r.file_bytes_histogram == {"1 B-1 KB": 2}
    assert "\n  1 B-1 KB " in r.table() and "<= 1 KB" not in r.table()
    assert report._bucket_label_bytes(0) == "0 B (empty)"
    assert report._bucket_label_bytes(1) == "1 B-1 KB"


# --- the default data folder ---------------------------------------------------

def test_default_data_dir_order(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PIPELINE_DATA_DIR", raising=False)
    assert sample.default_data_dir("given") == "given"
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path))
    assert sample.default_data_dir() == str(tmp_path)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "typo"))
    with pytest.raises(FileNotFoundError, match="PIPELINE_DATA_DIR"):
        sample.default_data_dir()
    monkeypatch.delenv("PIPELINE_DATA_DIR")
    monkeypatch.setattr(sample, "repository_dir", lambda: str(tmp_path / "clone" / "repo"))
    assert sample.shared_dir("data") is None
    built_in = sample.default_data_dir(num_images=3, num_classes=1)
    assert os.path.basename(built_in) == "sample-v1-n3-c1-s0"
    assert sample.data_dir_label(built_in) == "<built-in sample sample-v1-n3-c1-s0>"
    shared = tmp_path / "clone" / "shared" / "data" / "imagenet-sample"
    shared.mkdir(parents=True)
    assert sample.default_data_dir() == str(shared)
    assert sample.default_data_dir(shared=False, num_images=3, num_classes=1) == built_in
    assert sample.data_dir_label(str(shared)) == "../shared/data/imagenet-sample"


# --- the API reference -----------------------------------------------------------

def test_api_reference_is_generated_from_the_docstrings():
    from pipeline.tools import apidoc
    path = os.path.join(REPO, "docs", "api.md")
    with open(path, encoding="utf-8") as f:
        assert f.read() == apidoc.generate(), \
            "docs/api.md differs from the docstrings: run python -m pipeline.tools.apidoc"


def test_readme_sends_readers_only_to_files_that_exist():
    import re
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    for ref in set(re.findall(r"\]\(([\w./-]+\.md)\)", text)):
        assert os.path.exists(os.path.join(REPO, ref)), ref
    assert "API.md" not in text and "NOTES.md" not in text


def test_doctor_prints_aligned_lines_or_json():
    import json
    import tensorflow as tf
    code, out, _ = run_cli("doctor")
    assert code == 0
    assert "{" not in out and "'" not in out.split("decoders")[0]   # no raw dict
    lines = out.strip().splitlines()
    assert lines[0].split() == ["Python", sys.version.split()[0]]
    tf_line = next(l for l in lines if l.startswith("TensorFlow "))
    assert tf_line.split() == ["TensorFlow", tf.__version__]
    # values start in one column
    starts = {len(l) - len(l[len(l.split("  ")[0]):].lstrip()) for l in lines
              if not l.startswith("To ")}
    assert len(starts) == 1, starts
    assert any(l.startswith("TF C++ warnings     hidden") or
               l.startswith("TF C++ warnings     shown") for l in lines)
    code, out, _ = run_cli("doctor", "--json")
    info = json.loads(out)
    assert code == 0 and info["tensorflow"] == tf.__version__
    assert set(info["tf_cpp_log"]) == {"quiet", "how"}


def _written_paths(out_dir):
    import tensorflow as tf
    paths = []
    for f in sorted(os.listdir(out_dir)):
        if f.endswith(".json"):
            continue
        for rec in tf.data.TFRecordDataset(os.path.join(out_dir, f)):
            ex = tf.train.Example.FromString(rec.numpy())
            paths.append(ex.features.feature["path"].bytes_list.value[0].decode())
    return paths


def test_convert_has_shuffle_and_seed_flags(tmp_path):
    code, out, _ = run_cli("convert", "--help")
    assert code == 0
    assert _flag_text(out, "shuffle").endswith("[default: True]")
    assert "--shuffle, --noshuffle" in out
    assert _flag_text(out, "seed").endswith("[default: 0]") and "--seed N" in out
    src = tmp_path / "src"
    for c in ("a", "b"):
        for i in range(6):
            (src / c).mkdir(parents=True, exist_ok=True)
            from conftest import solid
            solid(str(src / c / f"{i}.png"), i)
    in_order = sorted(str(p) for p in src.glob("*/*.png"))
    orders = {}
    for name, flags_ in (("plain", ["--noshuffle"]), ("s0", []), ("s0b", ["--seed=0"]),
                         ("s1", ["--seed=1"])):
        code, _, err = run_cli("convert", str(src), str(tmp_path / name), "--num_shards=1",
                               "--noprogress", *flags_)
        assert code == 0, err
        orders[name] = _written_paths(str(tmp_path / name))
    assert orders["plain"] == in_order
    assert sorted(orders["s0"]) == in_order and orders["s0"] != in_order
    assert orders["s0"] == orders["s0b"]               # the default seed is 0
    assert orders["s1"] != orders["s0"] and sorted(orders["s1"]) == in_order


def test_convert_out_that_is_a_file_is_a_usage_error(tmp_path):
    """Found by a fresh-eyes user: OUT naming an existing file gave a raw traceback (exit 1)."""
    from conftest import solid
    solid(str(tmp_path / "src" / "a" / "0.png"), 1)
    out = tmp_path / "x.txt"
    out.write_text("not a folder")
    code, _, err = run_cli("convert", str(tmp_path / "src"), str(out), "--noprogress")
    assert code == 2, err
    assert "is a file" in err and "Traceback" not in err


def test_bench_candidate_failure_says_why(monkeypatch):
    """Found by a fresh-eyes user: a failed candidate's message ended after a colon. The
    bad-files hint comes only when the failure is about a file (`--seed=-1` made every
    candidate fail with a ValueError, and the hint sent the user to look for bad files)."""
    import subprocess as sp
    stderr = {"text": "ValueError: boom\n"}
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: sp.CompletedProcess(
        a, 1, stdout="", stderr=stderr["text"]))
    monkeypatch.setattr(bench, "_run_showing_stderr", lambda cmd, env, timeout:
                        sp.CompletedProcess(cmd, 1, stdout="", stderr=stderr["text"]))
    with pytest.raises(RuntimeError) as e:
        bench.run_candidate({"name": "pipeline"}, progress=False)
    assert str(e.value) == "benchmark candidate 'pipeline' failed (exit 1): ValueError: boom."
    with pytest.raises(RuntimeError) as e:
        bench.run_candidate({"name": "pipeline"}, progress=True)
    assert str(e.value) == ("benchmark candidate 'pipeline' failed (exit 1): its error is "
                            "printed above.")
    stderr["text"] = ("Traceback (most recent call last):\ntensorflow.python.framework.errors_impl"
                      ".InvalidArgumentError: pipeline: cannot load file /d/a/x.jpg (truncated "
                      "JPEG (no end-of-image marker))\n")
    hint = (" A folder with bad files: --on_error=skip, or find them with `python -m pipeline "
            "scan`.")
    for progress in (False, True):  # with progress bars too: the child's stderr is kept
        with pytest.raises(RuntimeError) as e:
            bench.run_candidate({"name": "pipeline"}, progress=progress)
        assert str(e.value).endswith("truncated JPEG (no end-of-image marker))." + hint
                                     if not progress else "printed above." + hint), progress
    with pytest.raises(RuntimeError) as e:  # the hint is not repeated to who asked for skip
        bench.run_candidate({"name": "pipeline", "on_error": "skip"}, progress=False)
    assert hint not in str(e.value)
    assert bench.about_files("InvalidArgumentError: Unknown image file format. One of JPEG, "
                             "PNG, GIF, BMP required.")
    assert not bench.about_files("ValueError: Seed must be between 0 and 2**32 - 1")


def test_bench_run_showing_stderr_shows_and_keeps_the_childs_stderr(capfd):
    r = bench._run_showing_stderr(
        [sys.executable, "-c", "import sys; print('{}'); sys.stderr.write('bar\\rerr\\n'); "
                               "sys.exit(3)"], dict(os.environ), 60)
    assert (r.returncode, r.stdout, r.stderr) == (3, "{}\n", "bar\rerr\n")
    assert capfd.readouterr().err == "bar\rerr\n"


def test_bench_on_a_folder_with_a_bad_file_fails_fast_and_names_it(tmp_path):
    """Found by a fresh-eyes user: the measuring subprocess raised, then hung at
    interpreter exit (tf.data's threads still held TensorFlow's locks) for minutes."""
    from conftest import solid
    for i in range(4):
        solid(str(tmp_path / "d" / "a" / f"{i}.jpg"), 10 * i)
    good = (tmp_path / "d" / "a" / "0.jpg").read_bytes()
    (tmp_path / "d" / "a" / "trunc.jpg").write_bytes(good[:len(good) // 2])
    r = subprocess.run([sys.executable, "-m", "pipeline", "bench", f"--data_dir={tmp_path / 'd'}",
                        "--batch_size=2", "--repeats=1", "--epochs=1", "--compare=",
                        "--noprogress"], capture_output=True, text=True, timeout=180,
                       cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert r.returncode == 1, r.stderr[-2000:]
    assert "trunc.jpg" in r.stderr and "--on_error=skip" in r.stderr


# --- issue 15: the surface a user meets -------------------------------------------

def _flag_text(help_out, flag):
    """The help text of ``--flag`` in a command's --help (argparse's layout: the flag and
    its metavar, then the text, wrapped), on one line."""
    lines = help_out.splitlines()
    for k, line in enumerate(lines):
        m = re.match(rf"  --{flag}(?: [A-Z:,]+|, --no{flag})?(?:  +(.*))?$", line)
        if m:
            text = [m.group(1) or ""]
            for more in lines[k + 1:]:
                if not more.startswith("      ") or more.strip().startswith("--"):
                    break
                text.append(more.strip())
            return " ".join(t for t in text if t)
    raise AssertionError(f"--{flag} not in {help_out}")


def test_a_shared_flag_shows_each_command_its_own_help():
    """--seed had one text for two commands ("bench: the shuffle seed; convert: ...")."""
    owners = {}
    for name in cli.COMMANDS:
        for flag in cli.command_flags(name):
            owners.setdefault(flag, []).append(name)
    shared = {f: cmds for f, cmds in owners.items() if len(cmds) > 1}
    assert {"seed", "json_out", "progress", "allow_outside_root"} <= set(shared)
    for flag, cmds in shared.items():
        texts = {}
        for name in cmds:
            code, out, _ = run_cli(name, "--help")
            assert code == 0
            texts[name] = _flag_text(out, flag)
            for other in cli.COMMANDS:  # no "bench: ...; convert: ..." lists
                assert f"{other}:" not in texts[name], (flag, name, texts[name])
        if flag != "on_error" and flag != "max_pixels":
            assert len(set(texts.values())) == len(cmds), (flag, texts)
    code, out, _ = run_cli("bench", "--help")
    assert _flag_text(out, "seed") == ("The shuffle (and augmentation) seed every candidate "
                                       "gets. [default: 0]")
    code, out, _ = run_cli("convert", "--help")
    assert _flag_text(out, "seed") == ("The seed of the random order the rows are written in "
                                       "(with --shuffle). [default: 0]")


def test_max_pixels_default_in_the_help_is_the_one_the_code_uses():
    """scan --help said "(default Pillow's 178,956,970). [default: none]"."""
    from PIL import Image
    from pipeline import checks, config
    from pipeline.decode import image as decode
    limit = checks.DEFAULT_MAX_PIXELS
    assert limit == config.DEFAULT_MAX_PIXELS == config.ImageOptions().max_pixels
    assert decode.Decoder.__init__.__defaults__[1] == limit       # (channels, max_pixels, ...)
    assert limit == 2 * Image.MAX_IMAGE_PIXELS                     # "Pillow's bomb limit"
    assert cli.build_parser().commands["scan"].get_default("max_pixels") == limit
    code, out, _ = run_cli("scan", "--help")
    assert code == 0
    text = _flag_text(out, "max_pixels")
    assert text.endswith(f"[default: {limit}]") and "[default: none]" not in text
    assert "2 x PIL.Image.MAX_IMAGE_PIXELS" in text
    # the texts that state it in words state the same number
    import pipeline
    for doc in (config.ImageOptions.__doc__, pipeline.scan.__doc__,
                open(os.path.join(REPO, "README.md"), encoding="utf-8").read()):
        assert f"{limit:,}" in doc


def test_usage_errors_name_what_the_user_typed(tmp_path):
    """Errors said `directory`, output_dir=, seed= (the library's argument names) where the
    user had typed SOURCE / SRC, OUT, --seed, --data_dir."""
    from conftest import solid
    src = tmp_path / "src"
    solid(str(src / "a" / "0.png"), 1)
    solid(str(src / "b" / "1.png"), 2)
    (tmp_path / "empty").mkdir()
    (tmp_path / "flat").mkdir()
    solid(str(tmp_path / "flat" / "0.png"), 3)
    (tmp_path / "notes.txt").write_text("hi")
    nope = str(tmp_path / "nope")
    notes = str(tmp_path / "notes.txt")
    either = "a folder or a manifest (.csv / .jsonl; .tsv / .json too)"
    cases = [
        (("scan", nope), f"SOURCE does not exist: {nope!r}"),  # absolute: no cwd
        (("scan", str(tmp_path / "empty")),
         f"No image files found in SOURCE. Received: SOURCE={str(tmp_path / 'empty')!r}"),
        (("scan", notes),
         f"SOURCE must be {either}; {notes!r} is a file that is neither. "
         f"Received: SOURCE={notes!r}"),
        (("convert", nope, str(tmp_path / "o1")), f"SRC does not exist: {nope!r}"),
        (("convert", str(tmp_path / "flat"), str(tmp_path / "o2")),
         "SRC needs class sub-folders (a file's class is the name of its sub-folder), but it "
         "has none (1 image file(s) lie directly in it). Put its images in class sub-folders, "
         "or list them in a manifest (.csv / .jsonl) with their labels. "
         f"Received: SRC={str(tmp_path / 'flat')!r}"),
        (("convert", str(src), str(tmp_path / "o3"), "--seed=-1"),
         "--seed must be an int in [0, 2**63) or None. Received: --seed=-1"),
        (("convert", str(src), str(tmp_path / "o4"), "--label_columns=y", "--root=/tmp"),
         "--label_columns, --root apply to a manifest SRC (.csv / .jsonl) only; SRC is not one. "
         f"Received: SRC={str(src)!r}"),
        (("bench", f"--data_dir={nope}"), f"--data_dir does not exist: {nope!r}"),
    ]
    for args, says in cases:
        code, out, err = run_cli(*args, "--noprogress")
        assert code == 2, (args, out, err)
        first = err.splitlines()[0]
        assert first == f"pipeline {args[0]}: error: {says}", (args, err)
        for py in ("`directory`", "directory=", "output_dir", "`seed`", " seed=", "labels=",
                   "Traceback"):
            assert py not in err, (args, py, err)
    code, _, err = run_cli("convert", str(src), str(tmp_path / "twice"), "--noprogress")
    assert code == 0, err
    code, _, err = run_cli("convert", str(src), str(tmp_path / "twice"), "--noprogress")
    assert code == 2
    assert err.startswith("pipeline convert: error: OUT already holds shards")
    assert err.splitlines()[0].endswith(f"Received: OUT={str(tmp_path / 'twice')!r}")


def test_user_names_replaces_only_whole_argument_names():
    assert cli.user_names("convert", "`output_dir` x. Received: output_dir='o', "
                                     "seed=1, my_seed=2, --seed=3, `num_shards=0`") == \
        "OUT x. Received: OUT='o', --seed=1, my_seed=2, --seed=3, `--num_shards=0`"
    assert cli.user_names("scan", "Received: directory='d'") == "Received: SOURCE='d'"
    assert cli.user_names("bench", "Received: directory='d', batch_size=64") == \
        "Received: --data_dir='d', --batch_size=64"
    # the library's booleans and None, after "Received: ", as the user typed (or did not)
    assert cli.user_names("bench", "`image_size=None` needs `batch_size=None`. Received: "
                                   "plan=True, augment=False, target_images_per_sec=None") == \
        ("`--image_size=None` needs `--batch_size=None`. Received: --plan, --noaugment, "
         "no --target_images_per_sec")


def _nan_run(name, n):
    """What bench.measure returns when every epoch is one batch: no steady state (NaN)."""
    nan = float("nan")
    r = {"name": name, "images_per_sec": nan, "steady_images_per_cpu_sec": nan,
         "images_per_cpu_sec": 300.0, "cpu_cores_used": 0.7, "steady_cpu_cores_used": nan,
         "first_batch_sec": 3.2, "peak_rss_mb": 533.0, "rss_after_import_mb": 400.0,
         "epoch_start_cpu_sec": 0.6, "num_images": n, "epochs": 1}
    return dict(r, runs=[dict(r)])


def test_a_tiny_bench_is_a_usage_error_not_nan(tmp_path, monkeypatch):
    """`bench --sample_images=4 --batch_size=64` exited 0 printing nan figures; and
    `--sample_images=65 --batch_size=64` timed one image per epoch, silently (issue #15):
    fewer than 2 timed batches per epoch (each epoch's first batch is not timed) is a usage
    error that names the smallest --sample_images (or data) that works."""
    from conftest import solid
    calls = []
    monkeypatch.setattr(bench, "run_candidates", lambda names, spec, **kw: calls.append(spec)
                        or {n: _nan_run(n, spec["num_images"]) for n in names})
    for i in range(4):
        solid(str(tmp_path / "d" / "a" / f"{i}.png"), i)
    code, out, err = run_cli("bench", f"--data_dir={tmp_path / 'd'}", "--batch_size=64",
                             "--compare=", "--noprogress")
    assert code == 2 and not calls, (out, err)
    assert err.splitlines()[0] == (
        "pipeline bench: error: --batch_size=64 with 4 images is one batch per epoch, and bench "
        "times only what comes after each epoch's first batch (images/s, images per "
        "CPU-second): nothing would be timed, and a figure needs at least 2 timed batches per "
        "epoch. What works: a --data_dir with at least 129 images (the fewest for "
        "--batch_size=64), or --batch_size=1 or smaller. Received: --batch_size=64, "
        f"--data_dir={tmp_path / 'd'}")
    assert not re.search(r"\bnan\b", (out + err).lower())
    # one timed batch per epoch (4 images, --batch_size=2: the second batch only)
    code, out, err = run_cli("bench", f"--data_dir={tmp_path / 'd'}", "--batch_size=2",
                             "--compare=", "--noprogress")
    assert code == 2 and not calls, (out, err)
    assert err.splitlines()[0].startswith(
        "pipeline bench: error: --batch_size=2 with 4 images is 2 batches per epoch, and bench "
        "times only what comes after each epoch's first batch (images/s, images per "
        "CPU-second): 1 batch (2 images) per epoch would be timed, and a figure needs at "
        "least 2 timed batches per epoch. What works: a --data_dir with at least 5 images")
    # the built-in sample: the flag to raise is --sample_images; refused before it is made
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PIPELINE_DATA_DIR", raising=False)
    code, out, err = run_cli("bench", "--sample_images=4", "--batch_size=64", "--compare=",
                             "--noprogress")
    assert code == 2 and not calls
    assert err.splitlines()[0].endswith(
        "What works: --sample_images=129 (the smallest that works with --batch_size=64), or "
        "--batch_size=1 or smaller. Received: --batch_size=64, --sample_images=4")
    code, out, err = run_cli("bench", "--sample_images=65", "--batch_size=64", "--compare=",
                             "--noprogress")
    assert code == 2 and not calls and out == ""
    assert err.splitlines()[0] == (
        "pipeline bench: error: --batch_size=64 with 65 images is 2 batches per epoch, and "
        "bench times only what comes after each epoch's first batch (images/s, images per "
        "CPU-second): 1 batch (1 image) per epoch would be timed, and a figure needs at least "
        "2 timed batches per epoch. What works: --sample_images=129 (the smallest that works "
        "with --batch_size=64), or --batch_size=32 or smaller. Received: --batch_size=64, "
        "--sample_images=65")
    assert not (tmp_path / "cache").exists()  # no sample generated for a refused bench
    # --plan is refused the same way (its measurement is a bench run)
    code, out, err = run_cli("bench", "--sample_images=65", "--batch_size=64", "--plan",
                             "--target_images_per_sec=1000", "--noprogress")
    assert code == 2 and "--sample_images=129 (the smallest" in err
    # 2 timed batches per epoch give a figure: bench runs
    code, out, err = run_cli("bench", f"--data_dir={tmp_path / 'd'}", "--batch_size=1",
                             "--compare=", "--noprogress", "--repeats=1")
    assert len(calls) == 1 and calls[0]["batch_size"] == 1
    assert [bench.timed_batches(n, 64) for n in (64, 65, 128, 129)] == [0, 1, 1, 2]
    assert (bench.min_images(64), bench.max_batch_size(65), bench.max_batch_size(2)) == \
        (129, 32, 0)


def test_bench_usage_error_comes_first_and_alone(tmp_path, monkeypatch):
    """`bench --data_dir=/missing` logged "I... pipeline bench: data in /missing" before its
    error (issue #15): a usage error is the first and only thing bench says."""
    import logging as std_logging
    from absl import logging
    records = []
    handler = std_logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logging.get_absl_logger().addHandler(handler)
    monkeypatch.setattr(bench, "run_candidates", lambda *a, **kw: pytest.fail("ran"))
    try:
        nope = str(tmp_path / "missing")
        for args in ((f"--data_dir={nope}",), (f"--data_dir={nope}", "--plan",
                                                "--target_images_per_sec=10"),
                     (f"--data_dir={nope}", "--profile")):
            records.clear()
            # --verbosity=0: INFO lines shown, as in a fresh `python -m pipeline` (run_cli's
            # earlier calls in this process may have left absl at WARNING)
            code, out, err = run_cli("bench", *args, "--noprogress", "--verbosity=0")
            assert code == 2 and out == "", (args, out, err)
            assert err.splitlines() == [
                f"pipeline bench: error: --data_dir does not exist: {nope!r}",
                "usage: python -m pipeline bench [--data_dir=DIR] [--compare=keras,...] "
                "[--flags]", "(python -m pipeline bench --help shows the arguments and flags)"]
            assert records == [], (args, records)
    finally:
        logging.get_absl_logger().removeHandler(handler)


def test_bench_never_prints_nan_figures(tmp_path, monkeypatch):
    """Enough images, but the run still timed nothing (e.g. --on_error=skip dropped most of
    them): a usage error naming the figures, not nan with exit 0."""
    from conftest import solid
    monkeypatch.setattr(bench, "run_candidates", lambda names, spec, **kw:
                        {n: _nan_run(n, 2) for n in names})
    for i in range(12):
        solid(str(tmp_path / "d" / "a" / f"{i}.png"), i)
    code, out, err = run_cli("bench", f"--data_dir={tmp_path / 'd'}", "--batch_size=4",
                             "--compare=keras", "--noprogress", "--on_error=skip",
                             f"--json_out={tmp_path / 'b.json'}")
    assert code == 2, (out, err)
    assert err.startswith("pipeline bench: error: no figure for images_per_sec, "
                          "steady_images_per_cpu_sec, steady_cpu_cores_used: pipeline "
                          "delivered 2 of the 12 images per epoch (the others were bad files, "
                          "--on_error=skip), so --batch_size=4 with 2 images is one batch")
    assert not re.search(r"\bnan\b", (out + err).lower()) and not (tmp_path / "b.json").exists()
    # the table and the JSON show a missing figure as "-" / null, never nan
    table = bench.format_table({"pipeline": _nan_run("pipeline", 2)})
    assert not re.search(r"\bnan\b", table.lower())
    assert table.splitlines()[2].split() == ["pipeline", "-", "-", "-", "-", "0.60", "3.20",
                                             "533", "-"]
    bench.write_json(str(tmp_path / "n.json"), {"a": float("nan"), "b": [float("inf"), 1.5]},
                     indent=2)
    assert (tmp_path / "n.json").read_text().split() == ['{', '"a":', 'null,', '"b":', '[',
                                                         'null,', '1.5', ']', '}']


_RUN_MAIN = """
import runpy, sys
sys.argv = ["-m"] + sys.argv[1:]
try:
    runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
except SystemExit as e:
    print("EXIT", e.code)
print("TENSORFLOW", "tensorflow" in sys.modules)
"""


def test_help_imports_no_tensorflow():
    """`python -m pipeline --help` imported TensorFlow (seconds, and TF 2.21's start-up lines)."""
    for args in (["--help"], ["convert", "--help"], ["scan", "-h"], ["bench", "--help"],
                 ["--help", "doctor"]):
        proc = subprocess.run([sys.executable, "-c", _RUN_MAIN, *args], capture_output=True,
                              text=True, timeout=120, cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=REPO))
        lines = proc.stdout.splitlines()
        assert lines[0].startswith("usage: python -m pipeline"), proc.stdout + proc.stderr
        assert lines[-2:] == ["EXIT 0", "TENSORFLOW False"], (args, proc.stderr[-2000:])
        assert proc.stderr == "", (args, proc.stderr)


def test_import_pipeline_loads_tensorflow_on_first_use():
    code = ("import sys\nimport pipeline\nassert 'tensorflow' not in sys.modules\n"
            "assert sorted(set(pipeline.__all__) - set(dir(pipeline))) == []\n"
            "f = pipeline.from_directory\nassert 'tensorflow' in sys.modules\n"
            "from pipeline import scan, compat, ErrorRecord\n"
            "assert f.__module__ == 'pipeline.sources.factories' and compat.__name__ == 'pipeline.compat'\n"
            "from pipeline import stack\nprint(stack.cpp_log_status().quiet)\n"
            "try:\n    pipeline.nope\nexcept AttributeError as e:\n    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=dict(env, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["True", "module 'pipeline' has no attribute 'nope'"]


def test_tensorflow_start_up_lines_show_at_most_once():
    """TensorFlow 2.21 writes its start-up lines twice in `import tensorflow` (a second copy
    in _pywrap_profiler_plugin.so); a command shows each once."""
    from pipeline import native_stderr
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "doctor"], capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=dict(env, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [native_stderr.LOG_PREFIX.sub(b"", l.encode()).decode()
             for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == len(set(lines)), proc.stderr


def test_dropping_repeats_drops_only_repeated_lines(capfd):
    from pipeline import native_stderr
    with native_stderr.dropping_repeats() as dropped:
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are "
                    b"written to STDERR\nI0000 00:00:1796083960.110955   31660 port.cc:153] "
                    b"oneDNN custom operations are on.\n\n")
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are "
                    b"written to STDERR\nI0000 00:00:1796083962.250055   31660 port.cc:153] "
                    b"oneDNN custom operations are on.\n\nother\n\rbar 1\rbar 1\r")
    err = capfd.readouterr().err
    assert err == ("WARNING: All log messages before absl::InitializeLog() is called are "
                   "written to STDERR\nI0000 00:00:1796083960.110955   31660 port.cc:153] "
                   "oneDNN custom operations are on.\n\n\nother\n\rbar 1\rbar 1\r")
    assert len(dropped) == 2


def test_a_flag_of_another_command_is_a_usage_error(tmp_path):
    """Found by a fresh-eyes user: `scan DIR --num_shards=3 --compare=zzz` ran and ignored both."""

    code, out, err = run_cli("scan", str(tmp_path), "--num_shards=3")
    assert code == 2, (code, out, err)
    assert "unrecognized arguments: --num_shards=3 (--num_shards is a flag of convert)" in err
    code, _, err = run_cli("doctor", "--data_dir=/x")
    assert code == 2 and "--data_dir is a flag of bench" in err


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_max_spread_must_be_finite_and_positive(value):
    """--max_spread=nan was accepted and silently turned the too-wide warnings off."""

    code, _, err = run_cli("bench", f"--max_spread={value}", "--sample_images=8",
                           "--batch_size=4")
    assert code == 2, err
    assert "--max_spread must be a finite number > 0" in err


def test_scan_with_a_missing_source_creates_no_json_out(tmp_path):

    out_file = tmp_path / "left.json"
    code, _, err = run_cli("scan", str(tmp_path / "nope"), f"--json_out={out_file}")
    assert code == 2, err
    assert not out_file.exists()
    code, _, err = run_cli("scan", str(tmp_path), f"--json_out={tmp_path}/no/such/dir/x.json")
    assert code == 2 and "--json_out: folder" in err


def test_output_flags_are_checked_first_naming_the_flag(tmp_path):
    """`doctor --json_out=/nonexistent/dir/x.json` failed after printing its report, with an
    error that did not name --json_out (issue #15). Every command's output file or folder is
    checked before any work: a usage error (exit 2) naming the flag and the value."""
    from conftest import solid
    solid(str(tmp_path / "src" / "a" / "0.png"), 1)
    (tmp_path / "file").write_text("x")
    missing = str(tmp_path / "no" / "dir" / "x.json")
    folder = str(tmp_path / "no" / "dir")
    under_file = str(tmp_path / "file" / "sub")
    cases = [
        (("doctor", f"--json_out={missing}"),
         f"--json_out: folder {folder!r} does not exist. Received: --json_out={missing}"),
        (("bench", f"--json_out={missing}"),
         f"--json_out: folder {folder!r} does not exist. Received: --json_out={missing}"),
        (("scan", str(tmp_path / "src"), f"--json_out={missing}"),
         f"--json_out: folder {folder!r} does not exist. Received: --json_out={missing}"),
        (("doctor", f"--json_out={tmp_path}"),
         f"--json_out is a folder, not a file. Received: --json_out={tmp_path}"),
        (("bench", f"--profile_dir={under_file}", "--profile"),
         f"--profile_dir: cannot create folder {under_file!r}: "
         f"{str(tmp_path / 'file')!r} is a file. Received: --profile_dir={under_file}"),
        (("convert", str(tmp_path / "src"), under_file),
         f"OUT: cannot create folder {under_file!r}: {str(tmp_path / 'file')!r} is a file. "
         f"Received: OUT={under_file!r}"),
    ]
    for args, says in cases:
        code, out, err = run_cli(*args, "--noprogress") if args[0] != "doctor" else \
            run_cli(*args)
        assert code == 2, (args, out, err)
        assert err.splitlines()[0] == f"pipeline {args[0]}: error: {says}", (args, err)
        assert out == "", (args, out)  # nothing printed before the error
    assert not os.path.exists(folder)


def test_service_port_errors_name_the_port():
    """A bad or busy port was a 20-line gRPC traceback (exit 1) that did not name --port."""
    import socket

    code, _, err = run_cli("service", "dispatcher", "--port=-1")
    assert code == 2 and "--port must be 0-65535. Received: --port=-1" in err, err
    busy = socket.socket()
    busy.bind(("0.0.0.0", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        # In a subprocess: a dispatcher that failed to start leaves gRPC state behind, which
        # must not share a process with the other tests.
        r = subprocess.run([sys.executable, "-m", "pipeline", "service", "dispatcher",
                            f"--port={port}"], capture_output=True, text=True, timeout=120,
                           cwd=REPO)
    finally:
        busy.close()
    code, err = r.returncode, r.stderr
    assert code == 2, err
    assert f"cannot start the dispatcher on --port={port}" in err
    assert "Traceback" not in err


def test_a_failed_candidates_reason_is_its_last_lines_without_tensorflow_start_up_lines():
    """A failed bench child's reason once began with TF 2.21's start-up lines, cut mid-line."""
    from pipeline.tools.bench import harness as bench
    stderr = "\n".join([
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1796083960.110955   31660 port.cc:153] oneDNN custom operations are on.",
        "2026-12-01 00:03:33.912549: I tensorflow/core/util/port.cc:113] oneDNN custom ops",
        "Traceback (most recent call last):",
        "  File \"x.py\", line 1, in <module>",
        "InvalidArgumentError: pipeline: cannot load file /d/bad.jpg (truncated JPEG)",
        ""])
    tail = bench.error_tail(stderr)
    assert tail.splitlines()[-1] == ("InvalidArgumentError: pipeline: cannot load file "
                                     "/d/bad.jpg (truncated JPEG)")
    assert "oneDNN" not in tail and "InitializeLog" not in tail
    short = bench.error_tail(stderr, max_chars=80)
    assert short == "InvalidArgumentError: pipeline: cannot load file /d/bad.jpg (truncated JPEG)"


# --- issue 15 (second pass): bench's start-up lines, usage errors before TensorFlow ------

_FAKE_STARTUP = '''
import importlib.abc, os, sys, time


class _Hook(importlib.abc.MetaPathFinder):
    """At `import tensorflow`, writes a start-up line to descriptor 2 as TensorFlow 2.21 does
    (whatever TF_CPP_MIN_LOG_LEVEL says; $FAKE_STARTUP_COPIES times, 2.21 writes it twice),
    with this process's time stamp and id."""

    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            sys.meta_path.remove(self)
            for _ in range(int(os.environ.get("FAKE_STARTUP_COPIES", "1"))):
                os.write(2, b"I0000 00:00:%.6f %7d port.cc:153] fake start-up line\\n"
                         % (time.time(), os.getpid()))
            with open(os.environ["FAKE_STARTUP_LOG"], "a") as f:
                f.write("%d\\n" % os.getpid())
        return None


sys.meta_path.insert(0, _Hook())
'''


def test_bench_on_the_builtin_sample_caches_it_and_shows_start_up_lines_once(tmp_path):
    """The quick start's command on a small built-in sample beside Keras: the sample is made
    once in PIPELINE_CACHE, and TensorFlow's start-up lines show once (found by a fresh-eyes
    user: on TensorFlow 2.21, `bench` showed them once for itself and once more for each
    candidate run, each its own process)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_FAKE_STARTUP)
    log = tmp_path / "imports.log"
    out = tmp_path / "b.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, str(hook)]),
               FAKE_STARTUP_LOG=str(log), PIPELINE_CACHE=str(tmp_path / "cache"))
    env.pop("PIPELINE_TF_STARTUP_LINES_SHOWN", None)
    r = subprocess.run([sys.executable, "-m", "pipeline", "bench", "--sample_images=24",
                        "--batch_size=8", "--repeats=1", "--epochs=2", "--compare=keras",
                        "--image_size=32", f"--json_out={out}", "--noprogress"],
                       capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(log.read_text().split()) == 3  # bench itself, pipeline's run and Keras' run
    assert r.stderr.count("fake start-up line") == 1, r.stderr
    # The result names both candidates (the Keras peer by the default candidate list).
    from conftest import assert_bench_beside_keras
    assert_bench_beside_keras(json.loads(out.read_text()), r.stdout, num_images=24, epochs=2)
    files = sorted(os.listdir(tmp_path / "cache"))
    assert len(files) == 1 and files[0].startswith("sample-v1-n24")


def test_tensorflow_loaded_through_pipeline_shows_its_start_up_lines_once(tmp_path):
    """`import pipeline` then a public name: TensorFlow loads through pipeline (as in the
    notebooks), and a start-up line it writes twice (TensorFlow 2.21) shows once."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_FAKE_STARTUP)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, str(hook)]),
               FAKE_STARTUP_LOG=str(tmp_path / "imports.log"), FAKE_STARTUP_COPIES="2")
    r = subprocess.run([sys.executable, "-c", "import pipeline\npipeline.from_directory\n"
                        "import tensorflow\nprint('ok')"], capture_output=True, text=True,
                       timeout=300, cwd=REPO, env=env)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr[-2000:]
    assert r.stderr.count("fake start-up line") == 1, r.stderr


def test_dropping_repeats_drops_the_lines_a_parent_showed(capfd, monkeypatch):
    """The mechanism behind the test above: a child's import drops what its parent showed."""
    from pipeline import native_stderr
    seen = {b"port.cc:153] oneDNN custom operations are on."}
    with native_stderr.dropping_repeats(seen=seen) as dropped:
        os.write(2, b"I0000 00:00:1796083962.250055   31661 port.cc:153] oneDNN custom "
                    b"operations are on.\nnew line\n")
    assert capfd.readouterr().err == "new line\n"
    assert len(dropped) == 1 and seen == {b"port.cc:153] oneDNN custom operations are on.",
                                          b"new line"}
    # startup_env carries the shown lines to a child, byte for byte
    monkeypatch.setattr(native_stderr, "_startup_lines", {b"a \xff line", b"x] two"})
    env = native_stderr.startup_env()
    monkeypatch.setattr(native_stderr, "_startup_lines", None)
    monkeypatch.setenv(native_stderr.STARTUP_ENV, env[native_stderr.STARTUP_ENV])
    assert native_stderr._shown_startup_lines() == {b"a \xff line", b"x] two"}
    monkeypatch.setattr(native_stderr, "_startup_lines", None)


_USAGE_ERRORS = """
import contextlib, io, json, sys
from absl import flags
from pipeline import cli
out = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    code = None
    try:
        with contextlib.redirect_stderr(err):
            cli.run(["pipeline"] + args)
    except SystemExit as e:
        code = e.code
    flags.FLAGS.unparse_flags()
    out.append([code, err.getvalue().splitlines()[0], "tensorflow" in sys.modules])
print(json.dumps(out))
"""


def test_usage_errors_that_argv_settles_come_before_tensorflow_loads():
    """Found by a fresh-eyes user: `python -m pipeline scan` (no SOURCE) waited ~3 s for
    `import tensorflow` before saying so."""
    cases = [
        (["scan"], "pipeline scan: error: the following arguments are required: SOURCE"),
        (["nope"], "pipeline: error: unknown command 'nope' (commands: bench, scan, convert, "
                   "service, doctor). Received: nope"),
        (["scan", "d", "--num_shards=3"],
         "pipeline scan: error: unrecognized arguments: --num_shards=3 (--num_shards is a flag "
         "of convert)"),
        (["service", "dispatcher", "--port=-1"],
         "pipeline service: error: --port must be 0-65535. Received: --port=-1"),
        (["service", "worker"],
         "pipeline service: error: service worker needs --dispatcher_address=HOST:PORT. "
         "Received: service worker, no --dispatcher_address"),
        (["bench", "--epochs=0"],
         "pipeline bench: error: --epochs must be an integer >= 1. Received: --epochs=0"),
        (["bench", "--batch_size=abc"], "pipeline bench: error: --batch_size must be an "
                                        "integer. Received: --batch_size=abc"),
        (["convert", "a.txt", "out", "--path_column=p"],
         "pipeline convert: error: --path_column applies to a manifest SRC (.csv / .jsonl) only; "
         "SRC is not one. Received: SRC='a.txt'"),
        (["convert", "a.txt", "out", "--path_column=p", "--root=r"],
         "pipeline convert: error: --path_column, --root apply to a manifest SRC (.csv / .jsonl) "
         "only; SRC is not one. Received: SRC='a.txt'"),
        # item 5: what the local file system settles comes before TensorFlow too
        (["scan", "nope/"], "pipeline scan: error: SOURCE does not exist: 'nope/' (looked up "
                            f"in the working directory {REPO!r})"),
        (["bench", "--data_dir=nope"], "pipeline bench: error: --data_dir does not exist: "
                                       f"'nope' (looked up in the working directory {REPO!r})"),
        (["bench", "--data_dir=README.md"], "pipeline bench: error: --data_dir must be a "
                                            "folder; 'README.md' is a file. "
                                            "Received: --data_dir=README.md"),
        (["convert", "nope/", "out"], "pipeline convert: error: SRC does not exist: 'nope/' "
                                      f"(looked up in the working directory {REPO!r})"),
        (["scan", "setup.cfg"], "pipeline scan: error: SOURCE must be a folder or a manifest "
                                "(.csv / .jsonl; .tsv / .json too); 'setup.cfg' is a file that "
                                "is neither. Received: SOURCE='setup.cfg'"),
        (["scan", "pipeline/cli.py"], "pipeline scan: error: SOURCE must be a folder or a "
                                      "manifest (.csv / .jsonl; .tsv / .json too); "
                                      "'pipeline/cli.py' is a file that is neither. "
                                      "Received: SOURCE='pipeline/cli.py'"),
        (["doctor", "x"], "pipeline doctor: error: unrecognized arguments: x"),
    ]
    import json
    proc = subprocess.run([sys.executable, "-c", _USAGE_ERRORS, json.dumps([a for a, _ in cases])],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got == [[2, says, False] for _, says in cases]
    # --compare is checked against the registry, which imports no TensorFlow either
    proc = subprocess.run([sys.executable, "-c", _USAGE_ERRORS, '[["bench", "--compare=zz"]]'],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO))
    code, says, loaded = json.loads(proc.stdout)[0]
    assert (code, loaded) == (2, False) and says.startswith(
        "pipeline bench: error: --compare: unknown candidate(s) zz; known: decode_limit, ")


# --- issue 15 (third pass): what a new user found on the command line -------------------

def _usage_errors(arg_lists, timeout=120):
    """[[exit status, first stderr line, whether TensorFlow loaded]] for each argv, each
    run through ``cli.run`` in one fresh process (``_USAGE_ERRORS``)."""
    import json
    proc = subprocess.run([sys.executable, "-c", _USAGE_ERRORS, json.dumps(arg_lists)],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_service_port_in_use_is_a_usage_error_before_the_server_starts():
    """`service dispatcher --port=P` with P held by another dispatcher started a second one
    (gRPC binds with SO_REUSEPORT: two listening sockets). A plain bind checks the port
    first, for both roles, before TensorFlow loads."""
    import socket
    held = []
    for reuse_port in (False, True):  # a plain listener, and one bound as gRPC binds
        s = socket.socket()
        if reuse_port:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("", 0))
        s.listen()
        held.append(s)
    try:
        cases = []
        for s in held:
            port = s.getsockname()[1]
            cases += [
                (["service", "dispatcher", f"--port={port}"],
                 f"pipeline service: error: cannot start the dispatcher on --port={port}: the "
                 "port is in use (Address already in use); choose another --port. "
                 f"Received: --port={port}"),
                (["service", "worker", "--dispatcher_address=localhost:5050", f"--port={port}"],
                 f"pipeline service: error: cannot start the worker on --port={port}: the port "
                 "is in use (Address already in use); choose another --port (0: any free "
                 f"port). Received: --port={port}"),
            ]
        got = _usage_errors([a for a, _ in cases], timeout=90)
    finally:
        for s in held:
            s.close()
    assert got == [[2, says, False] for _, says in cases]


def test_output_paths_that_exist_but_cannot_be_written_are_usage_errors_first(tmp_path):
    """As root, os.access says yes to /proc and /sys: `scan D --json_out=/proc/x.json` ran
    the whole scan and then failed with a raw Errno; `convert D /proc/shards` was a
    traceback. The check now writes for real (a temporary file, removed at once), before
    TensorFlow loads, naming the flag; a parent "folder" that is a file is said to be one."""
    from conftest import solid
    solid(str(tmp_path / "src" / "cat" / "1.png"), 1)
    src = str(tmp_path / "src")
    jpg = str(tmp_path / "src" / "cat" / "1.png")
    cases = [
        (["scan", src, "--json_out=/proc/x.json"],
         r"pipeline scan: error: --json_out: cannot write '/proc/x\.json' \(.+\)\. "
         r"Received: --json_out=/proc/x\.json"),
        (["doctor", "--json_out=/proc/x.json"],
         r"pipeline doctor: error: --json_out: cannot write '/proc/x\.json' \(.+\)\. "
         r"Received: --json_out=/proc/x\.json"),
        (["bench", "--json_out=/sys/x.json"],
         r"pipeline bench: error: --json_out: cannot write '/sys/x\.json' \(.+\)\. "
         r"Received: --json_out=/sys/x\.json"),
        (["bench", "--profile", "--profile_dir=/sys/prof"],
         r"pipeline bench: error: --profile_dir: cannot create folder '/sys/prof' in '/sys' "
         r"\(.+\)\. Received: --profile_dir=/sys/prof"),
        (["convert", src, "/proc/shards"],
         r"pipeline convert: error: OUT: cannot create folder '/proc/shards' in '/proc' "
         r"\(.+\)\. Received: OUT='/proc/shards'"),
        (["convert", src, "/proc"],
         r"pipeline convert: error: OUT: cannot write in folder '/proc' \(.+\)\. "
         r"Received: OUT='/proc'"),
        (["scan", src, f"--json_out={jpg}/x.json"],
         re.escape(f"pipeline scan: error: --json_out: {jpg!r} is a file, not a folder: "
                   f"cannot write '{jpg}/x.json' in it. Received: --json_out={jpg}/x.json")),
        (["doctor", f"--json_out={jpg}/a/x.json"],
         re.escape(f"pipeline doctor: error: --json_out: {jpg!r} is a file, not a folder: "
                   f"cannot write '{jpg}/a/x.json' in it. Received: "
                   f"--json_out={jpg}/a/x.json")),
    ]
    before = sorted(os.listdir(tmp_path))
    got = _usage_errors([a for a, _ in cases])
    for (args, pattern), (code, line, loaded) in zip(cases, got):
        assert code == 2 and not loaded and re.fullmatch(pattern, line), (args, line)
    assert sorted(os.listdir(tmp_path)) == before and os.listdir(tmp_path / "src") == ["cat"]


def test_writable_checks_leave_nothing_and_truncate_nothing(tmp_path):
    import argparse
    from pipeline import checks
    from pipeline.convert import shards
    existing = tmp_path / "old.json"
    existing.write_text("keep me")
    checks.check_writable("json_out", str(existing))
    checks.check_writable("json_out", str(tmp_path / "new.json"))
    with pytest.raises(ValueError, match=r"^`json_out`: cannot write '/proc/version' "):
        checks.check_writable("json_out", "/proc/version")  # exists, not writable
    checks.check_folder("output_dir", str(tmp_path / "a" / "b"))
    checks.check_folder("output_dir", str(tmp_path))
    assert existing.read_text() == "keep me" and sorted(os.listdir(tmp_path)) == ["old.json"]
    # convert's writer: an error that names OUT (or a file in it) is about OUT
    assert shards.about_path(PermissionError(13, "Permission denied", "/o/s/data.tfrecord"),
                             "/o/s/")
    assert not shards.about_path(OSError(5, "Input/output error", "/src/a.jpg"), "/o/s")
    # a failure to write at the end is a usage error naming the flag, not a raw OSError
    with pytest.raises(ValueError) as e:
        cli._write_json(argparse.Namespace(json_out="/proc/x.json"), {})
    assert str(e.value).startswith("--json_out: cannot write '/proc/x.json' (") and \
        str(e.value).endswith("). Received: --json_out='/proc/x.json'")


def test_seed_out_of_range_and_convert_into_src_are_usage_errors_first(tmp_path):
    """`bench --seed=-1` ran every candidate and failed each with a traceback (exit 1, with
    a hint about bad files); `--seed=5000000000` failed keras but exited 0. `convert SRC OUT`
    with OUT inside SRC wrote shards among the images."""
    from conftest import solid
    solid(str(tmp_path / "src" / "cat" / "1.png"), 1)
    src = str(tmp_path / "src")
    os.symlink(src, tmp_path / "link")
    # the library's checks (pipeline.config, and bench's rule for its peers): TensorFlow loads
    why = "--seed must be an int in [0, 2**63) or None. Received: --seed="
    peers = ("--seed must be an int in [0, 2**32) with peers (keras): they take it as Keras' "
             "and numpy's seeds, which are unsigned 32-bit. Received: --seed=")
    inside = ("OUT must not be SRC or a folder inside it: the shards and dataset.json would be "
              "written among SRC's images. Received: ")
    # in one process, in this order: those the command line settles, then the library's
    cases = [
        (["convert", src, src], f"pipeline convert: error: {inside}OUT={src!r}, SRC={src!r}",
         False),
        (["convert", src + "/", f"{src}/shards"],
         f"pipeline convert: error: {inside}OUT='{src}/shards', SRC='{src}/'", False),
        (["convert", src, f"{tmp_path}/link/cat/x"],
         f"pipeline convert: error: {inside}OUT='{tmp_path}/link/cat/x', SRC={src!r}", False),
        (["bench", "--seed=-1"], f"pipeline bench: error: {why}-1", True),
        (["bench", "--seed=5000000000"], f"pipeline bench: error: {peers}5000000000", True),
        (["convert", src, str(tmp_path / "out"), f"--seed={2**63}"],
         f"pipeline convert: error: {why}{2**63}", True),
    ]
    got = _usage_errors([a for a, _, _ in cases])
    assert got == [[2, says, tf_loaded] for _, says, tf_loaded in cases]
    assert os.listdir(tmp_path / "src") == ["cat"]


def test_service_addresses_and_role_flags_are_checked():
    """`service worker --dispatcher_address=nohostport` hung; a worker-only flag given to the
    dispatcher was ignored; `--worker_addresses=h1` (no port) was accepted."""
    cases = [
        (["service", "worker", "--dispatcher_address=nohostport"],
         "pipeline service: error: --dispatcher_address must be HOST:PORT with a port 1-65535 "
         "(e.g. localhost:5050); 'nohostport' is not. Received: --dispatcher_address=nohostport"),
        (["service", "worker", "--dispatcher_address=h:70000"],
         "pipeline service: error: --dispatcher_address must be HOST:PORT with a port 1-65535 "
         "(e.g. localhost:5050); 'h:70000' is not. Received: --dispatcher_address=h:70000"),
        (["service", "dispatcher", "--worker_addresses=h1:5051,h1", "--port=0"],
         "pipeline service: error: --worker_addresses (each of them) must be HOST:PORT with a "
         "port 1-65535 (e.g. localhost:5050); 'h1' is not. "
         "Received: --worker_addresses=h1:5051,h1"),
        (["service", "dispatcher", "--dispatcher_address=x:1", "--port=0"],
         "pipeline service: error: --dispatcher_address is a flag of the worker, not the "
         "dispatcher. Received: service dispatcher"),
        (["service", "worker", "--dispatcher_address=x:1", "--work_dir=/tmp/j",
          "--worker_timeout_ms=5"],
         "pipeline service: error: --work_dir is a flag of the dispatcher, not the worker; "
         "--worker_timeout_ms is a flag of the dispatcher, not the worker. "
         "Received: service worker"),
    ]
    got = _usage_errors([a for a, _ in cases])
    assert got == [[2, says, False] for _, says in cases]


def test_service_checks_its_numbers_and_fault_tolerant_mode_before_tensorflow():
    """Second fresh-eyes test: `--fault_tolerant_mode` without `--work_dir` failed after
    TensorFlow loaded, in TensorFlow's words and with a traceback; `--worker_timeout_ms=-5` and
    `--heartbeat_interval_ms=0` started servers."""
    cases = [
        (["service", "dispatcher", "--fault_tolerant_mode", "--port=0"],
         "pipeline service: error: --fault_tolerant_mode needs --work_dir (the folder where the "
         "dispatcher journals its state). Received: --fault_tolerant_mode, no --work_dir"),
        (["service", "dispatcher", "--worker_timeout_ms=-5", "--port=0"],
         "pipeline service: error: --worker_timeout_ms must be > 0. "
         "Received: --worker_timeout_ms=-5"),
        (["service", "worker", "--dispatcher_address=x:1", "--heartbeat_interval_ms=0"],
         "pipeline service: error: --heartbeat_interval_ms must be > 0. "
         "Received: --heartbeat_interval_ms=0"),
    ]
    got = _usage_errors([a for a, _ in cases])
    assert got == [[2, says, False] for _, says in cases]


def test_bench_refuses_a_flag_of_a_mode_it_is_not_in():
    """Second fresh-eyes test: `bench --augment` (a --plan flag) ran the eval peers without a
    word, and `--worker_cores=0`, `--profile_dir` likewise."""
    cases = [
        (["bench", "--augment"],
         "pipeline bench: error: --augment applies with --plan only (without it bench compares "
         "peers in eval mode). Received: --augment"),
        (["bench", "--worker_cores=0", "--headroom=0.5"],
         "pipeline bench: error: --worker_cores, --headroom apply with --plan only (without it "
         "bench compares peers in eval mode). Received: --worker_cores=0, --headroom=0.5"),
        (["bench", "--profile_dir=prof"],
         "pipeline bench: error: --profile_dir applies with --profile only (without it bench "
         "compares peers in eval mode). Received: --profile_dir=prof"),
    ]
    got = _usage_errors([a for a, _ in cases])
    assert got == [[2, says, False] for _, says in cases]


# SIGTERM in the slow tier: SIGINT, whose handling is the harder (server.join() waits in C++),
# stays in the default tier.
@pytest.mark.parametrize("sig,said", [("SIGINT", "Ctrl-C"),
                                      pytest.param("SIGTERM", "SIGTERM", marks=pytest.mark.slow)])
def test_a_signal_stops_a_service_dispatcher(tmp_path, sig, said):
    """Second fresh-eyes test: Ctrl-C did not stop `service dispatcher` (server.join() waits
    in C++, where Python's SIGINT handler never runs); only SIGTERM did. Third: SIGTERM
    exited 143 without a line; the dispatcher said where it listens twice (a log line and a
    printed one)."""
    import select
    import signal
    signum = getattr(signal, sig)
    port = _free_port()
    with open(tmp_path / "err", "w") as err:
        # As from a terminal: the signal at its default (a test runner's worker may ignore
        # SIGINT, and a child inherits an ignored SIGINT, where Python installs no handler).
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", "service", "dispatcher",
                                 f"--port={port}"], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=err, text=True,
                                preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 120)  # TensorFlow loads first
            first = proc.stdout.readline() if ready else "(nothing within 120 s)"
            assert first == f"pipeline: dispatcher listening at grpc://localhost:{port}\n"
            proc.send_signal(signum)
            code = proc.wait(timeout=60)
            rest = proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert (code, rest) == (0, f"pipeline: stopped ({said})\n")
    assert f"localhost:{port}" not in (tmp_path / "err").read_text()  # said once, on stdout


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _service(*args):
    """`python -m pipeline service ARGS` with SIGINT at its default, as from a terminal (a
    test runner's worker may ignore it, and a child inherits an ignored SIGINT), and a
    queue of its stdout lines (None at the end)."""
    import queue
    import signal
    import threading
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "service", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _until_idle(proc, quiet=1.0, timeout=120):
    """Returns once ``proc`` used no CPU for ``quiet`` s (Linux /proc): it waits."""
    import time

    def cpu():
        with open(f"/proc/{proc.pid}/stat") as f:
            return sum(int(v) for v in f.read().rsplit(")", 1)[1].split()[11:13])

    end, last = time.time() + timeout, cpu()
    while time.time() < end:
        time.sleep(quiet)
        now = cpu()
        if now == last:
            return
        last = now
    raise TimeoutError(f"process {proc.pid} kept busy for {timeout} s")


def test_ctrl_c_stops_a_waiting_worker_and_a_worker_logs_the_port_it_got():
    """Second fresh-eyes test: Ctrl-C did not stop a worker still waiting for its dispatcher
    (TensorFlow's start retries in C++, holding Python's GIL: it waits in Python now), and a
    worker on the default port (0, any) logged "port 0", not the port it got. First: a worker
    whose dispatcher is not up waited silently; it says what it waits for."""
    import signal
    import socket
    import time
    nobody, dport = _free_port(), _free_port()
    waiting, waiting_out = _service("worker", f"--dispatcher_address=localhost:{nobody}")
    dispatcher, _ = _service("dispatcher", f"--port={dport}")
    worker, worker_out = _service("worker", f"--dispatcher_address=localhost:{dport}")
    try:
        # TensorFlow loads first (three processes on this machine's cores: allow for it).
        assert waiting_out.get(timeout=180) == (
            f"pipeline service worker: waiting for the dispatcher at localhost:{nobody} "
            "(until it answers; Ctrl-C stops)\n")
        _until_idle(waiting)  # in its wait, past loading tensorflow-io
        waiting.send_signal(signal.SIGINT)
        code = waiting.wait(timeout=30)
        rest = list(iter(lambda: waiting_out.get(timeout=10), None))
        assert worker_out.get(timeout=180) == (
            f"pipeline service worker: waiting for the dispatcher at localhost:{dport} "
            "(until it answers; Ctrl-C stops)\n")
        started = worker_out.get(timeout=180)
    finally:
        for p in (waiting, dispatcher, worker):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert (code, rest) == (0, ["pipeline: stopped (Ctrl-C)\n"])
    m = re.fullmatch(rf"pipeline: worker on port (\d+) serving dispatcher localhost:{dport}\n",
                     started or "")
    assert m, started
    port = int(m.group(1))
    assert port not in (0, dport, nobody)
    # The port logged was the worker's: nothing listens there once it is gone.
    with socket.socket() as s:
        assert s.connect_ex(("localhost", port)) != 0


def test_a_service_port_is_held_while_tensorflow_loads_and_checked_again_before_the_bind(
        monkeypatch):
    """Second fresh-eyes test: two dispatchers started within the ~3 s TensorFlow takes to
    load could share a port (checked free before the import, bound by gRPC, with
    SO_REUSEPORT, after it). The checked port stays bound while TensorFlow loads, so a
    second server fails its check; and it is checked again right before the server binds,
    so one taken in between (here: right after the command frees it) is the same usage
    error, with no server started."""
    import socket
    from pipeline import native_stderr
    from pipeline.deliver import service_args
    port = _free_port()
    seen, grabbed = [], []

    def import_tensorflow(real=native_stderr.import_tensorflow):
        try:  # another server's check while this one loads TensorFlow
            service_args.claim_port(port).close()
            seen.append("free")
        except OSError as e:
            seen.append(e.strerror)
        real()

    def release_port(real=service_args.release_port):
        real()
        if not grabbed:  # another dispatcher binds it now, as gRPC binds
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind(("", port))
            s.listen()
            grabbed.append(s)

    monkeypatch.setattr(native_stderr, "import_tensorflow", import_tensorflow)
    monkeypatch.setattr(service_args, "release_port", release_port)
    try:
        code, out, err = run_cli("service", "dispatcher", f"--port={port}")
    finally:
        for s in grabbed:
            s.close()
    assert seen == ["Address already in use"]
    assert len(grabbed) == 1
    assert (code, out) == (2, "")
    # On TF 2.21 the stack probe's line on tensorflow-io (which cannot load there) may come
    # first, once per process (in-process run_cli): the error is the first line after it.
    lines = [l for l in err.splitlines()
             if not l.startswith("WARNING: pipeline: tensorflow-io ")]
    assert lines[0] == (
        f"pipeline service: error: cannot start the dispatcher on --port={port}: the port is "
        f"in use (Address already in use); choose another --port. Received: --port={port}")
    assert "Traceback" not in err
    assert not service_args.HELD_PORTS  # nothing left bound in this process
    service_args.claim_port(port).close()  # and the port is free again


def _bench_result(name, ips):
    r = {"name": name, "images_per_sec": ips, "steady_images_per_cpu_sec": 300.0,
         "images_per_cpu_sec": 290.0, "cpu_cores_used": 1.0, "steady_cpu_cores_used": 1.0,
         "first_batch_sec": 1.0, "peak_rss_mb": 500.0, "rss_after_import_mb": 400.0,
         "epoch_start_cpu_sec": 0.5, "num_images": 6, "epochs": 1}
    return dict(r, runs=[dict(r)])


def test_bench_names_each_peers_reason_when_pipeline_fails_too(tmp_path, monkeypatch):
    """Found by a fresh-eyes user: on a folder with a bad file, pipeline and keras both failed,
    and the output gave pipeline's reason only (keras' row said FAILED, no reason)."""
    from conftest import solid
    for i in range(6):
        solid(str(tmp_path / "d" / "a" / f"{i}.png"), i)
    monkeypatch.setattr(bench, "run_candidates", lambda names, spec, **kw: {
        "pipeline": {"name": "pipeline", "error": "InvalidArgumentError: d/a/x.jpg: bad"},
        "keras": {"name": "keras", "error": "Traceback...\nValueError: keras saw x.jpg"}})
    code, out, err = run_cli("bench", f"--data_dir={tmp_path / 'd'}", "--batch_size=2",
                             "--compare=keras", "--noprogress", "--repeats=1", "--verbosity=0")
    assert code == 1, (out, err)
    assert "keras FAILED: ValueError: keras saw x.jpg\n" in out
    assert "d/a/x.jpg: bad" in out + err


def test_bench_exits_1_when_a_candidate_fails_and_logs_plain_lines(tmp_path, monkeypatch):
    """A peer that failed (keras on --seed=5000000000) left bench's exit status 0; and the CLI's
    log lines carried absl's prefix (`I1201 05:06:07.481984 139948949977984 cli.py:495]`)."""
    from conftest import solid
    for i in range(6):
        solid(str(tmp_path / "d" / "a" / f"{i}.png"), i)
    monkeypatch.setattr(bench, "run_candidates", lambda names, spec, **kw: {
        "pipeline": _bench_result("pipeline", 400.0),
        "keras": {"name": "keras", "error": "benchmark candidate 'keras' failed (exit 1): "
                                            "ValueError: boom."}})
    code, out, err = run_cli("bench", f"--data_dir={tmp_path / 'd'}", "--batch_size=2",
                             "--compare=keras", "--noprogress", "--repeats=1", "--verbosity=0")
    assert code == 1, (out, err)
    assert "keras FAILED: benchmark candidate 'keras' failed (exit 1): ValueError: boom.\n" in out
    assert err.splitlines() == [f"pipeline bench: data in {tmp_path / 'd'}",
                                "pipeline bench: 1 candidate failed (keras): exit status 1"]
    assert "bench: a candidate failed" in cli.main_help()
    assert "1 a candidate failed" in cli.command_help("bench")
    # every candidate ran: exit 0
    monkeypatch.setattr(bench, "run_candidates", lambda names, spec, **kw: {
        "pipeline": _bench_result("pipeline", 400.0), "keras": _bench_result("keras", 200.0)})
    code, out, err = run_cli("bench", f"--data_dir={tmp_path / 'd'}", "--batch_size=2",
                             "--compare=keras", "--noprogress", "--repeats=1", "--verbosity=0")
    assert code == 0 and err == f"pipeline bench: data in {tmp_path / 'd'}\n", err


def test_plain_log_format_keeps_the_level_of_warnings():
    import logging as std
    from pipeline import native_stderr
    f = native_stderr.PlainLogFormatter()

    def rec(level, msg, *args):
        return std.LogRecord("absl", level, "x.py", 1, msg, args, None)
    assert f.format(rec(std.INFO, "pipeline: %d files", 3)) == "pipeline: 3 files"
    assert f.format(rec(std.WARNING, "pipeline: slow")) == "WARNING: pipeline: slow"
    assert f.format(rec(std.ERROR, "pipeline: bad")) == "ERROR: pipeline: bad"


def test_plan_and_profile_wording():
    """`bench --plan` printed "1 workers"; `bench --profile`'s advice sent readers to
    `pipeline.build`, which is not public."""
    from pipeline.tools import capacity
    plan = capacity.capacity_plan(500, 100, worker_cores=8, headroom=1.0)
    text = plan.table()
    assert plan.workers == 1 and plan.cores == 5
    assert "-> 5 cores" in text and "tf.data service workers of 8 cores" in text
    assert ": 1 worker (8 cores, 800 images/s flat out)" in text and "1 workers" not in text
    one = capacity.capacity_plan(100, 100, worker_cores=1, headroom=1.0).table()
    assert "-> 1 core\n" in one and "workers of 1 core (" in one and ": 1 worker (1 core, " in one
    with open(os.path.join(REPO, "pipeline", "tools", "profiling.py")) as f:
        source = f.read()
    with open(os.path.join(REPO, "docs", "api.md")) as f:
        api = f.read()
    named = re.findall(r"\bpipeline\.([A-Za-z_]\w*)", "".join(
        re.findall(r'"[^"\n]*"', source)))
    assert "build" not in named
    for name in named:
        assert f"pipeline.{name}" in api, name


def test_bench_table_legend_says_which_ratio_is_which():
    """The table's pipe/it (ratio of the medians) and the summary's ratio (median of the
    per-round ratios) disagreed with no word of why."""
    res = {"pipeline": _fake("pipeline", [300, 400, 520]), "keras": _fake("keras", [100, 250, 200])}
    for r in res.values():
        for run in r["runs"]:
            run.update(images_per_cpu_sec=1, cpu_cores_used=1, first_batch_sec=1, peak_rss_mb=1)
        r.update(images_per_cpu_sec=1, cpu_cores_used=1, first_batch_sec=1, peak_rss_mb=1)
    table = bench.format_table(res)
    assert table.splitlines()[3].split()[-1] == "2.00"  # 400 / 200: the medians' ratio
    assert ("pipe/it: the ratio of the medians, pipeline's median images/s divided by that "
            "candidate's; the summary's\n 'pipeline / candidate' lines are the median of the "
            "per-round ratios instead, so the two can differ)") in table
    lines = "\n".join(bench.headline(res, "pipeline", ["keras"]))
    assert "pipeline / keras, images/s: 2.60x" in lines  # median of 3.0, 1.6, 2.6 per round


# --- second fresh-eyes test: scan's manifest columns, values echoed as typed, bench bars ----

def test_scan_is_told_a_manifests_columns(tmp_path):
    """`scan` of a manifest whose path column is not `path` could not be told its column:
    --path_column was convert's only."""
    from conftest import solid
    for i in range(3):
        solid(str(tmp_path / "img" / f"{i}.png"), 10 * i)
    m = tmp_path / "m.csv"
    m.write_text("file,kind\n" + "".join(f"img/{i}.png,{'ab'[i % 2]}\n" for i in range(3)))
    code, out, err = run_cli("scan", str(m), "--noprogress")
    assert code == 2 and err.splitlines()[0] == (
        f"pipeline scan: error: {m}, line 1 (the header): missing column(s) 'path'; the header "
        "has 'file', 'kind'. Received: --path_column='path'"), err
    code, out, err = run_cli("scan", str(m), "--noprogress", "--path_column=file",
                             "--label_columns=kind")
    assert code == 0, err
    assert "files: 3  decodable: 3  bad: 0" in out
    assert re.search(r"per class\n  a\s+2\n  b\s+1\n", out), out
    for flag in ("--path_column", "--label_columns", "--root"):
        assert flag in cli.command_help("scan")
    got = _usage_errors([["scan", "img", "--path_column=file"],
                         ["scan", "img", "--label_columns=a,b", "--root=r"]])
    assert got == [
        [2, "pipeline scan: error: --path_column applies to a manifest SOURCE (.csv / .jsonl) "
            "only; SOURCE is not one. Received: SOURCE='img'", False],
        [2, "pipeline scan: error: --label_columns, --root apply to a manifest SOURCE (.csv / "
            ".jsonl) only; SOURCE is not one. Received: SOURCE='img'", False]]


def test_a_flags_value_is_echoed_as_typed():
    """`--target_images_per_sec=-1` was echoed as `-1.0`: absl's parsed float, not what the
    user typed."""
    cases = [
        (["bench", "--plan", "--target_images_per_sec=-1"],
         "pipeline bench: error: --target_images_per_sec must be a finite number > 0. "
         "Received: --target_images_per_sec=-1"),
        (["bench", "--plan", "--target_images_per_sec", "-2"],
         "pipeline bench: error: --target_images_per_sec must be a finite number > 0. "
         "Received: --target_images_per_sec=-2"),
        (["bench", "--max_spread=-1"],
         "pipeline bench: error: --max_spread must be a finite number > 0. Received: "
         "--max_spread=-1"),
        (["bench", "--max_spread=1", "--max_spread=0"],  # absl takes the last: so does the echo
         "pipeline bench: error: --max_spread must be a finite number > 0. Received: "
         "--max_spread=0"),
        (["bench", "--plan", "--target_images_per_sec=5", "-headroom=0.5"],
         "pipeline bench: error: --headroom must be >= 1 (1.25 plans 25% spare capacity). "
         "Received: --headroom=0.5"),
        (["bench", "--plan", "--target_images_per_sec=5", "--headroom=0"],
         "pipeline bench: error: --headroom must be a finite number > 0. Received: --headroom=0"),
        (["bench", "--headroom=2", "--noaugment"],
         "pipeline bench: error: --headroom, --augment apply with --plan only (without it bench "
         "compares peers in eval mode). Received: --headroom=2, --noaugment"),
    ]
    got = _usage_errors([a for a, _ in cases])
    assert got == [[2, says, False] for _, says in cases]
    assert "-1.0" not in str(got) and "2.0" not in str(got)


def test_convert_summary_line():
    from pipeline.convert import shards
    meta = {"num_examples": 1234, "class_names": ["a"], "shards": [{}], "skipped": []}
    assert shards.summary_lines(meta, "out", 3.04) == [
        "wrote 1,234 records in 1 shard to out in 3.0 s (1 class); no bad files"]
    meta = {"num_examples": 1, "class_names": None, "shards": [{}, {}],
            "skipped": [{"path": "x", "reason": "y"}]}
    assert shards.summary_lines(meta, "gs://b/out/", 0.5, num_shards=3) == [
        "skipped 1 bad file of 2 (on_error=skip):", "  x: y",
        "wrote 2 shards, not num_shards=3: there are only 1 files to write (1 bad left out) "
        "and a shard holds at least one record (one file per shard)",
        "wrote 1 record in 2 shards to gs://b/out/ in 0.5 s; 1 bad file skipped (listed above "
        "and in gs://b/out/dataset.json)"]


def test_bench_bars_show_the_steady_rate_of_the_table(capsys):
    """bench's bars showed tqdm's rate within each epoch (its start-up included), the table
    the steady state across epochs: they disagreed."""
    import time as time_lib
    import tensorflow as tf

    def factory(spec):
        def slow_start(x):
            # the epoch's first batch: a slow start-up, not timed; then 0.15 s per image
            # (longer than tqdm's 0.1 s between redraws, so that each is drawn)
            time_lib.sleep(1.0 if int(x) == 0 else 0.15)
            return x
        return tf.data.Dataset.range(4).map(
            lambda x: tf.py_function(slow_start, [x], tf.int64)).batch(1)

    spec = {"name": "toy", "epochs": 2, "num_images": 4}
    got = bench.measure(factory, spec, progress=True)
    err = capsys.readouterr().err
    # The start is left out of the steady rate: above the whole run's (8 images over all of
    # it, two 1 s starts included), and at most 1 / 0.15 s. No lower bound in seconds: a
    # loaded CI machine stretches the sleeps (a run there gave 3.0 img/s).
    assert 8 / got["wall_sec"] < got["images_per_sec"] < 7
    shown = [float(v.replace(",", "")) for v in re.findall(r"steady ([\d,.]+) img/s", err)]
    assert len(shown) >= 4 and "img/s]" in err, err
    # the last figure shown is the table's (rounded), not tqdm's rate within the epoch
    # (4 images in 1.45 s or more, the start included)
    assert shown[-1] == pytest.approx(got["images_per_sec"], rel=0.1, abs=0.5), (shown, got)
    assert min(shown) > 0
    assert re.search(r"epoch 2/2: +0%[^\r\n]*steady \d", err), err  # carried over
    assert bench._rate_text(0, 1.0) == "-" and bench._rate_text(1234, 1.0) == "1,234"
    assert "{rate" not in bench.BAR_FORMAT


# --- issue: the fourth fresh-eyes test of the command line --------------------------------

def test_bench_refuses_every_flag_its_report_does_not_read():
    """`bench --profile --compare=plain,keras` dropped --compare; `--plan ... --compare=plain`
    too; `--target_images_per_sec=100` without --plan or --profile ran the peer comparison."""
    from pipeline.tools.bench import bench as bench_lib
    bench_flags = set(cli.command_flags("bench"))
    read_by_all = {"data_dir", "image_size", "batch_size", "sample", "sample_images", "on_error",
                   "json_out", "plan", "profile", "progress"}
    assert bench_flags - set(bench_lib.MODE_OPTIONS) == read_by_all
    assert set(bench_lib.MODE_OPTIONS) <= bench_flags
    peers = "the peer comparison is bench without --plan or --profile"
    cases = [
        (["bench", "--profile", "--compare=plain,keras"],
         "pipeline bench: error: --compare applies to the peer comparison only (--profile "
         f"profiles pipeline's stages alone; {peers}). Received: --compare=plain,keras"),
        (["bench", "--plan", "--target_images_per_sec=100", "--compare=plain"],
         "pipeline bench: error: --compare applies to the peer comparison only (--plan "
         f"measures pipeline alone; {peers}). Received: --compare=plain"),
        (["bench", "--target_images_per_sec=100"],
         "pipeline bench: error: --target_images_per_sec applies with --plan or --profile only "
         "(without them bench compares peers in eval mode). "
         "Received: --target_images_per_sec=100"),
        (["bench", "--profile", "--epochs=3", "--noprogress", "--seed=1"],
         "pipeline bench: error: --epochs, --seed apply to the peer comparison or --plan "
         f"only (--profile profiles pipeline's stages alone; {peers}). "
         "Received: --epochs=3, --seed=1"),
        (["bench", "--plan", "--target_images_per_sec=100", "--max_spread=0.5",
          "--profile_dir=p"],
         "pipeline bench: error: --max_spread applies to the peer comparison only; "
         "--profile_dir applies with --profile only (--plan measures pipeline alone; "
         f"{peers}). Received: --max_spread=0.5, --profile_dir=p"),
        (["bench", "--plan", "--profile"],
         "pipeline bench: error: --plan and --profile are separate reports: give one. "
         "Received: --plan, --profile"),
        (["bench", "--plan"],
         "pipeline bench: error: --plan needs --target_images_per_sec (images/s to feed, e.g. "
         "56000 for 8 GPUs x 7000). Received: --plan, no --target_images_per_sec"),
    ]
    got = _usage_errors([a for a, _ in cases])
    assert got == [[2, says, False] for _, says in cases]


def test_a_peers_failure_on_a_bad_file_says_peers_do_not_skip_them(monkeypatch):
    """keras failing on a bad file with --on_error=skip was told "--on_error=skip" (which
    applies to pipeline only), after a doubled period ("Input is empty..")."""
    import subprocess as sp
    stderr = "ValueError: Input is empty.\n"
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: sp.CompletedProcess(
        a, 1, stdout="", stderr=stderr))
    monkeypatch.setattr(bench, "about_files", lambda text: True)
    with pytest.raises(RuntimeError) as e:
        bench.run_candidate({"name": "keras", "options": {"on_error": "skip"}}, progress=False)
    assert str(e.value) == (
        "benchmark candidate 'keras' failed (exit 1): ValueError: Input is empty. The peers do "
        "not skip bad files (--on_error is pipeline's): find them with `python -m pipeline "
        "scan`, or leave keras out of --compare.")
    with pytest.raises(RuntimeError) as e:  # pipeline's own, as the CLI passes on_error
        bench.run_candidate({"name": "pipeline", "options": {"on_error": "skip"}},
                            progress=False)
    assert str(e.value) == ("benchmark candidate 'pipeline' failed (exit 1): ValueError: "
                            "Input is empty.")
    assert bench.bad_files_hint({"name": "pipeline_train", "options": {"on_error": "raise"}}) \
        == " A folder with bad files: --on_error=skip, or find them with `python -m pipeline scan`."


def test_a_flag_value_of_the_wrong_type_is_said_in_the_clis_words():
    """`--shuffle=maybe` showed absl's `('Non-boolean argument to boolean flag', 'maybe')`,
    `--max_pixels=abc` Python's `invalid literal for int() with base 10`."""
    cases = [
        (["convert", "a", "b", "--shuffle=maybe"],
         "pipeline convert: error: --shuffle must be true or false (or --shuffle / "
         "--noshuffle). Received: --shuffle=maybe"),
        (["scan", "x", "--max_pixels=abc"],
         "pipeline scan: error: --max_pixels must be an integer. Received: --max_pixels=abc"),
        (["scan", "x", "--max_pixels", "1e9"],
         "pipeline scan: error: --max_pixels must be an integer. Received: --max_pixels=1e9"),
        (["scan", "x", "--max_pixels=1,000"],
         "pipeline scan: error: --max_pixels must be an integer. Received: --max_pixels=1,000"),
        (["service", "dispatcher", "--port=abc"],
         "pipeline service: error: --port must be an integer. Received: --port=abc"),
        (["bench", "--max_spread=wide"],
         "pipeline bench: error: --max_spread must be a number. Received: --max_spread=wide"),
        (["sacn", "dir"],
         "pipeline: error: unknown command 'sacn': did you mean 'scan'? (commands: bench, scan, "
         "convert, service, doctor). Received: sacn dir"),
    ]
    got = _usage_errors([a for a, _ in cases])
    assert got == [[2, says, False] for _, says in cases]
    # a bad value of the right type is the library's to refuse (pipeline.config), after
    # TensorFlow loads, in its words
    assert _usage_errors([["bench", "--on_error=ignore"]]) == [[
        2, "pipeline bench: error: --on_error must be one of ['raise', 'skip']. "
           "Received: --on_error=ignore", True]]


def test_seed_range_is_the_librarys_except_where_a_32_bit_consumer_takes_it():
    """The CLI refused `--seed=99999999999` everywhere ("numpy's and Keras' seeds are unsigned
    32-bit"), though the library takes [0, 2**63) and only bench's peers and convert's row
    order (numpy.random.RandomState) need 32 bits."""
    cases = [
        # no peer, --plan: the seed passes (the next check speaks)
        (["bench", "--compare=", "--seed=99999999999", "--max_spread=-1"],
         "pipeline bench: error: --max_spread must be a finite number > 0. "
         "Received: --max_spread=-1"),
        (["bench", "--plan", "--target_images_per_sec=5", "--seed=99999999999",
          "--headroom=0.5"],
         "pipeline bench: error: --headroom must be >= 1 (1.25 plans 25% spare capacity). "
         "Received: --headroom=0.5"),
    ]
    got = _usage_errors([a for a, _ in cases])
    assert got == [[2, says, False] for _, says in cases]
    # the seed's range is the library's (pipeline.config.check_seed; bench.check_spec for
    # the peers), checked once TensorFlow has loaded
    cases = [
        (["bench", "--compare=", f"--seed={2**63}"],
         "pipeline bench: error: --seed must be an int in [0, 2**63) or None. "
         f"Received: --seed={2**63}"),
        (["bench", "--compare=plain,keras", "--seed=99999999999"],
         "pipeline bench: error: --seed must be an int in [0, 2**32) with peers (plain, keras): "
         "they take it as Keras' and numpy's seeds, which are unsigned 32-bit. "
         "Received: --seed=99999999999"),
    ]
    got = _usage_errors([a for a, _ in cases])
    assert got == [[2, says, True] for _, says in cases]


def test_service_help_shows_the_ports_real_defaults():
    """`service --help` said "(dispatcher default 5050, worker 0 = any). [default: none]"."""
    text = cli.command_help("service")
    assert _flag_text(text, "port") == ("TCP port to listen on (0: any free port). "
                                        "[default: dispatcher 5050, worker 0]")


def test_bench_header_comes_first_names_the_folder_as_given_and_counts_files(
        tmp_path, monkeypatch):
    """The header elided the path (`<...>/fe3.fDD9/good`), called every indexed file an
    image, and was missing when pipeline, the only candidate, failed."""
    from conftest import solid
    for i in range(6):
        solid(str(tmp_path / "d" / "a" / f"{i}.png"), i)
    (tmp_path / "d" / "a" / "notes.jpg").write_text("not an image")  # kept: by extension
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench, "run_candidates", lambda names, spec, **kw: {
        "pipeline": {"name": "pipeline", "error": "benchmark candidate 'pipeline' failed "
                                                  "(exit 1): boom."}})
    code, out, err = run_cli("bench", "--data_dir=d/", "--batch_size=2", "--compare=",
                             "--noprogress", "--repeats=1", "--epochs=1", "--verbosity=0")
    assert code == 1, (out, err)
    lines = out.splitlines()
    assert lines[0].startswith("stack: ")
    assert lines[1] == (f"7 files in d/, image_size=224x224, batch_size=2, epochs=1, "
                        f"repeats=1 (alternated), {os.cpu_count()} CPUs")
    assert "pipeline failed: benchmark candidate 'pipeline' failed (exit 1): boom." in err


def test_cuda_factory_registration_lines_are_dropped_and_doctor_says_what_shows(capfd):
    """doctor said "TF C++ warnings hidden" while every command printed TensorFlow 2.16's
    three "Unable to register cuFFT/cuDNN/cuBLAS factory" errors at import."""
    from pipeline import native_stderr, stack
    with native_stderr.dropping_repeats(drop=native_stderr.CUDA_FACTORY) as dropped:
        os.write(2, b"2026-12-01 09:58:46.714664: E external/local_xla/xla/stream_executor/"
                    b"cuda/cuda_dnn.cc:9261] Unable to register cuDNN factory: Attempting to "
                    b"register factory for plugin cuDNN when one has already been registered\n"
                    b"2026-12-01 09:58:46.714710: E external/x/cuda_blas.cc:1] Unable to "
                    b"register cuBLAS factory: Attempting to register factory for plugin "
                    b"cuBLAS when one has already been registered\nE other error\n")
    assert capfd.readouterr().err == "E other error\n"
    assert len(dropped) == 2
    text = stack.format_doctor(dict(stack.doctor(), tf_cpp_log={"quiet": True, "how": "set"}))
    line = next(l for l in text.splitlines() if l.startswith("TF C++ warnings"))
    assert line == ("TF C++ warnings     hidden (set); not hidden by any level: the lines import "
                    "tensorflow writes before it reads one (2.16: 'Unable to register "
                    "cuFFT/cuDNN/cuBLAS factory' errors; 2.21: its start-up lines); pipeline's "
                    "own import of it (python -m pipeline, or a public name used first) drops "
                    "2.16's and shows 2.21's once")


@pytest.mark.parametrize("argv, says", [
    (["bench", "--epoch=1"], "unrecognized arguments: --epoch=1 (--epoch: did you mean --epochs?)"),
    (["bench", "--batchsize", "8"], "(--batchsize: did you mean --batch_size?)"),
    (["bench", "--noprogres"], "(--noprogres: did you mean --noprogress?)"),
    (["scan", "x", "--on_eror=skip"], "(--on_eror: did you mean --on_error, a flag of convert?)"),
    (["--verison"], "(--verison: did you mean --version?)"),
])
def test_a_misspelt_flag_gets_did_you_mean(argv, says):
    with pytest.raises(cli._ParseError) as e:
        cli.parse(["pipeline"] + argv)
    assert says in str(e.value)


def test_received_echoes_a_checked_flags_number_as_typed():
    typed = cli.typed_flags(["bench", "-epochs=+0", "--seed", "07", "--noplan",
                             "--max_spread=1", "--max_spread=0"], {"plan"})
    assert typed == {"epochs": "+0", "seed": "07", "max_spread": "0"}
    message = "--epochs must be an integer >= 1. Received: --epochs=0, --seed=7, --noplan"
    assert cli.as_typed(message, typed, {"epochs": 0, "seed": 7}) == (
        "--epochs must be an integer >= 1. Received: --epochs=+0, --seed=07, --noplan")
    # --epochs=10 is not --epochs=1's prefix
    assert cli.as_typed("Received: --epochs=10", {"epochs": "01"}, {"epochs": 1}) == \
        "Received: --epochs=10"
    assert cli.as_typed("Received: --on_error='x'", {"on_error": "x"}, {"on_error": "x"}) == \
        "Received: --on_error=x"           # as typed in the shell: no quotes
    assert cli.as_typed("Received: --data_dir='my photos'", {"data_dir": "my photos"},
                        {"data_dir": "my photos"}) == "Received: --data_dir='my photos'"
    code, _, err = run_cli("bench", "-epochs=+0")
    assert code == 2 and err.splitlines()[0].endswith("Received: --epochs=+0"), err


def test_version_help_has_no_default():
    line = next(l for l in cli.main_help().splitlines() if "--version" in l)
    assert "default" not in line and "print the version" in line


def test_convert_help_shows_a_local_a_dataflow_and_a_spark_beam_command():
    text = cli.command_help("convert")
    assert "--beam_runner RUNNER" in text and "--beam_options K=V,..." in text
    assert "--beam_runner=DirectRunner" in text and "direct_num_workers=2" in text
    assert "--beam_runner=DataflowRunner" in text and "temp_location=gs://" in text
    assert "--beam_runner=SparkRunner" in text and "spark_master_url=spark://" in text
    assert "pip install '.[beam]'" in text


def test_bad_beam_runner_and_options_are_usage_errors_before_tensorflow_loads(tmp_path):
    from conftest import solid
    solid(str(tmp_path / "src" / "cat" / "a.png"), 9)
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    got = _usage_errors([["convert", src, out, "--beam_runner=Direct"],
                         ["convert", src, out, "--beam_runner=DirectRunner",
                          "--beam_options=direct_num_workers"],
                         ["convert", src, out, "--beam_options=direct_num_workers=2"]])
    assert [(code, loaded) for code, _, loaded in got] == [(2, False)] * 3
    assert got[0][1].startswith("pipeline convert: error: --beam_runner must be one of "
                                "DirectRunner, DataflowRunner, FlinkRunner, SparkRunner")
    assert got[0][1].endswith("Received: --beam_runner=Direct")  # as typed
    assert "--beam_options item 'direct_num_workers' is not key=value" in got[1][1]
    assert "only used with --beam_runner" in got[2][1]
    assert not os.path.exists(out)
