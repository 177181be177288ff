"""Reading a 1 M-row CSV encoder log: physid's reader vs ``np.loadtxt`` and the old row loop.

The file is physid's own format (``t,seq,theta1,theta2,u``, 1 kHz, 1000 s) with 0.1 % empty
fields (dropped samples). Peers, on the same file in this process:

- ``np.loadtxt``: NumPy's C reader on the file as it is (it cannot read the empty fields, so
  they are written as ``nan`` in its copy): the floor for a reader that parses every field.
- ``row loop``: the reader physid had before issue 26 (split each line, ``float`` each
  field, keep line numbers), copied here as it was.
- ``read_log_csv``: physid's reader (empty fields to ``nan``, then ``np.loadtxt``; line by
  line only when a row is refused), and ``read_log_csv (slow path)``: that line-by-line parse
  forced, as a file with one bad row would take.

Each is the median of ``--runs`` runs (default 5); the outputs are checked equal.
Run: ``python benchmarks/bench_csv_read.py [--rows N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from physid.rigs.encoders import csvlog
from physid.rigs.encoders.csvlog import read_log_csv


def write_log(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(rows) * 1e-3
    theta = np.cumsum(rng.normal(0, 1e-3, (rows, 2)), axis=0)
    u = np.round(rng.normal(0, 1, rows), 3)
    lines = ["t,seq,theta1,theta2,u"]
    drop = rng.random(rows) < 1e-3
    for k in range(rows):
        a = "" if drop[k] else repr(float(theta[k, 0]))
        lines.append(f"{float(t[k])!r},{k},{a},{float(theta[k, 1])!r},{float(u[k])!r}")
    path.write_text("\n".join(lines) + "\n")


def row_loop(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pre-issue-26 reader's parse (header checks and errors trimmed to the loop)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = [h.strip() for h in lines[0].split(",")]
    channels, ncol = header[2:], len(header)
    t_list, seq_list, rows = [], [], []
    for i in range(1, len(lines)):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) != ncol:
            raise ValueError(f"line {i + 1}")
        t_list.append(float(fields[0]))
        seq_list.append(int(fields[1]))
        row = []
        for field in fields[2:]:
            field = field.strip()
            row.append(float(field) if field else math.nan)
        rows.append(row)
    values = np.array(rows, dtype=float).reshape(len(rows), len(channels))
    return np.array(t_list), np.array(seq_list, dtype=np.int64), values


def loadtxt(path: Path) -> np.ndarray:
    return np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


def slow_path(path: Path):
    fast = csvlog._parse_fast
    csvlog._parse_fast = _refuse
    try:
        return read_log_csv(path)
    finally:
        csvlog._parse_fast = fast


def _refuse(*_):
    raise ValueError("forced")


def _time(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.csv"
        write_log(path, args.rows)
        filled = Path(tmp) / "filled.csv"
        filled.write_text(path.read_text().replace(",,", ",nan,"))
        size = path.stat().st_size / 2**20
        print(f"{args.rows} rows, {size:.1f} MiB; median of {args.runs} runs")
        base, table = _time(lambda: loadtxt(filled), args.runs)
        results = {"np.loadtxt (nan-filled copy)": base}
        results["row loop (before)"], old = _time(lambda: row_loop(path), args.runs)
        results["read_log_csv"], new = _time(lambda: read_log_csv(path), args.runs)
        results["read_log_csv (slow path)"], slow = _time(lambda: slow_path(path), args.runs)
        for s in (new, slow):
            np.testing.assert_array_equal(s.t, old[0])
            np.testing.assert_array_equal(s.source["seq"], old[1])
            np.testing.assert_array_equal(s.values, old[2])
        np.testing.assert_array_equal(table[:, 2:], old[2])
        for name, seconds in results.items():
            print(f"{name:30s} {seconds:7.3f} s   {seconds / base:5.2f} x np.loadtxt")


if __name__ == "__main__":
    main()
