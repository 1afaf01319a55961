"""Draws the peer tables of docs/benchmarks.md: one row of panels per image size.

Reads the JSON files of ``benchmarks/peers.py`` (one per image size) and draws, for
each, three panels of horizontal bars: images/s, images per CPU-second and PSNR (dB,
median, with the 5th percentile as a thin mark). Each panel has its own linear axis,
so no figure dwarfs another. The in-memory baseline (``in_memory``: every image
decoded before the first batch, then served from RAM) is a ceiling, not a loader:
it is left out of the bars and written as a dashed line, or as a note at the axis'
end when it is off the scale. Skipped and failed candidates are listed under the
row's title.

Also prints each result as the markdown table of docs/benchmarks.md.

    python benchmarks/plot_benchmarks.py benchmarks/results/peers_sample_224.json \\
        benchmarks/results/peers_sample_128.json benchmarks/results/peers_1600x1200_224.json \\
        benchmarks/results/peers_4000x3000_224.json --omit=3:grain \\
        --labels="sample photos -> 224,sample photos -> 128,1600x1200 mosaics -> 224,4000x3000 mosaics -> 224" \\
        --png_out=docs/benchmarks.png
"""

import json
import math
import os
import sys

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS

common_flags.define(png_out=("benchmarks.png", "PNG written."))
flags.DEFINE_list("labels", [], "A title per JSON file (default: its data folder, size "
                  "and image count).")
flags.DEFINE_list("omit", [], "ROW:NAME pairs (ROW: the JSON file's position, from 1) left out "
                  "of the bars and named under the row's title, e.g. 3:grain for a figure the "
                  "table calls not a measurement.")

CEILING = "in_memory"
PANELS = (("images_per_sec", "images/s"),
          ("steady_images_per_cpu_sec", "images per CPU-second"),
          ("psnr_db_median", "PSNR dB vs reference (median; | = 5th pct)"))


def _num(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def _row_title(out, label):
    if label:
        return label
    return (f"{out.get('source_dir') or out.get('data_dir')}: {out['num_images']} images -> "
            f"{out['image_size']}px, batch {out['batch_size']}, {out['epochs']} epochs x "
            f"{out['repeats']} (medians), {out['cores']} cores")


def plot(results, path, labels=(), omit=()):
    """Writes the figure for ``results`` (peers.py JSON dicts) to ``path``; returns it.
    ``omit``: (row, name) pairs, row from 0, left out of the bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = len(results)
    names_per_row = []
    for row, out in enumerate(results):
        res = out["candidates"]
        names_per_row.append([n for n, r in res.items()
                              if n != CEILING and "skipped" not in r and "error" not in r
                              and (row, n) not in omit])
    height = sum(0.32 * max(len(n), 3) + 1.2 for n in names_per_row)
    fig, axes = plt.subplots(rows, 3, figsize=(15, max(height, 3.5)), squeeze=False,
                             gridspec_kw={"height_ratios": [max(len(n), 3)
                                                            for n in names_per_row]})
    for row, out in enumerate(results):
        res, names = out["candidates"], names_per_row[row]
        names = sorted(names, key=lambda n: -(_num(res[n].get("steady_images_per_cpu_sec"))
                                              or 0))
        ys = range(len(names))
        for col, (key, title) in enumerate(PANELS):
            ax = axes[row][col]
            vals = [_num(res[n].get(key)) for n in names]
            colors = ["tab:blue" if n.startswith("pipeline") else "tab:gray" for n in names]
            ax.barh(list(ys), [v or 0 for v in vals], color=colors)
            top = max([v for v in vals if v] or [1])
            for y, v in zip(ys, vals):
                ax.text((v or 0) + top * 0.01, y, "-" if v is None else
                        (f"{v:.1f}" if key.startswith("psnr") else f"{v:,.0f}"),
                        va="center", fontsize=8)
            if key.startswith("psnr"):
                p5 = [_num(res[n].get("psnr_db_p5")) for n in names]
                ax.plot([v if v is not None else float("nan") for v in p5], list(ys), "|",
                        color="black", markersize=10)
            ceiling = _num((res.get(CEILING) or {}).get(key))
            if ceiling and not key.startswith("psnr"):
                if ceiling <= top * 1.3:
                    ax.axvline(ceiling, linestyle="--", color="tab:red", linewidth=1)
                    ax.text(ceiling, len(names) - 0.4, " in-memory ceiling", color="tab:red",
                            fontsize=7, va="bottom")
                else:
                    ax.text(0.99, 0.01, f"in-memory ceiling: {ceiling:,.0f} (off scale)",
                            transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
                            color="tab:red")
            ax.set_xlim(0, top * 1.18)
            ax.set_yticks(list(ys))
            ax.set_yticklabels(names if col == 0 else [""] * len(names), fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(title, fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            if col == 1:
                gone = [f"{n} ({'skipped' if 'skipped' in r else 'failed'})"
                        for n, r in res.items() if "skipped" in r or "error" in r]
                left = [n for n in res if (row, n) in omit]
                ax.set_title(_row_title(out, labels[row] if row < len(labels) else "")
                             + ("\nnot run: " + ", ".join(gone) if gone else "")
                             + ("\nnot plotted (see the table): " + ", ".join(left)
                                if left else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown_table(out) -> str:
    """The docs/benchmarks.md table of one result: a row per candidate (images/s,
    images per CPU-second, PSNR median / 5th percentile), skipped ones with why."""
    rows = ["| candidate | images/s | images per CPU-second | PSNR dB (median / p5) |",
            "|---|---|---|---|"]
    for n, r in out["candidates"].items():
        if "skipped" in r or "error" in r:
            why = r.get("skipped") or "failed"
            rows.append(f"| {n} | - | - | not run: {why.split(';')[0]} |")
            continue
        psnr = (f"{r['psnr_db_median']:.1f} / {r['psnr_db_p5']:.1f}"
                if _num(r.get("psnr_db_median")) else "-")
        rows.append(f"| {n} | {r['images_per_sec']:,.0f} | "
                    f"{r['steady_images_per_cpu_sec']:,.0f} | {psnr} |")
    return "\n".join(rows)


def main(argv):
    files = argv[1:]
    if not files:
        raise app.UsageError("give the peers.py JSON files to plot, one per image size")
    results = []
    for f in files:
        with open(f) as fh:
            results.append(json.load(fh))
    for f, out in zip(files, results):
        print(f"{f}:\n{markdown_table(out)}\n")
    omit = set()
    for item in FLAGS.omit:
        row, _, name = item.partition(":")
        if not row.isdigit() or not 1 <= int(row) <= len(files) or not name:
            raise app.UsageError(f"--omit takes ROW:NAME with ROW from 1 to {len(files)}. "
                                 f"Received: --omit={item}")
        omit.add((int(row) - 1, name))
    print(plot(results, FLAGS.png_out, FLAGS.labels, omit))


if __name__ == "__main__":
    sys.exit(app.run(main))
