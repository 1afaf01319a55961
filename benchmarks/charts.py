"""The charts of the scripts in ``benchmarks/``: grouped bars and lines, as PNG files.

matplotlib (Agg backend, no display) is imported when a chart is drawn; it is a
dependency of the ``bench`` extra, not of the package.
"""

from __future__ import annotations

from typing import Dict, List, Optional


def bar_chart(path: str, labels: List[str], series: Dict[str, List[float]], title: str,
              ylabel: str, hlines: Optional[Dict[str, float]] = None) -> str:
    """Writes a grouped bar chart PNG (matplotlib, Agg backend).

    Args:
        path: the PNG file written.
        labels: one group per label (x axis).
        series: {legend name: one value per label} (None/NaN bars are empty).
        title, ylabel: texts.
        hlines: {legend name: y value} drawn as dashed horizontal lines.

    Returns:
        ``path``.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(labels) + 2), 4.5))
    width = 0.8 / max(len(series), 1)
    for k, (name, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        vals = [float("nan") if v is None else v for v in values]
        bars = ax.bar(xs, vals, width, label=name)
        for b, v in zip(bars, vals):
            if v == v:
                ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, b.get_height()),
                            ha="center", va="bottom", fontsize=7)
    for name, y in (hlines or {}).items():
        ax.axhline(y, linestyle="--", linewidth=1, color="gray")
        ax.annotate(name, (-0.45, y), ha="left", va="bottom", fontsize=8, color="gray")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def line_chart(path: str, xs: List[float], series: Dict[str, List[float]], title: str,
               xlabel: str, ylabel: str) -> str:
    """Writes a line chart PNG (one marked line per series; matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name, ys in series.items():
        ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
