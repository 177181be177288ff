"""Matplotlib without a display, and figure files written the way every output is: whole or
not at all."""

from __future__ import annotations

from pathlib import Path

from physid.files import atomic_open


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed: physid runs on servers
    and in CI). Imported on first use: matplotlib costs ~0.5 s to import."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, title: str | None = None, dpi: int = 100) -> Path:
    """Give ``fig`` its ``title``, lay it out, write it as PNG to ``path`` through
    ``atomic_open`` (an interrupted run leaves the old plot or none, never half a file) and
    close it."""
    plt = pyplot()
    path = Path(path)
    if title is not None:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        with atomic_open(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return path
