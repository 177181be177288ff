"""``physid process`` speed-up from local parallelism: N copies of one sample experiment with
``--jobs 1`` and ``--jobs 2``, side by side in one process, median of ``--runs`` runs each.

Each run starts from an empty report folder (no reuse) and a warm JAX compilation cache (a
first, unmeasured run fills it; ``--no-warmup`` skips it when the cache is already warm), so
what is compared is the experiments' own work plus the Dask cluster's start-up, not one-off
compilation. Cross-validation between the copies is off: it is a separate, N² pass.

    python benchmarks/bench_process_jobs.py [--sample videos] [--experiment furuta]
        [--copies 8] [--runs 3] [--no-warmup]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import tempfile
import time
import tomllib
from pathlib import Path

from rich.console import Console

from physid.rigs.pipeline.process import ProcessOptions, load_index, process_folder


def copies_folder(sample: Path, experiment: str, copies: int, where: Path) -> Path:
    """A folder whose manifest lists ``copies`` experiments that all point at the same files."""
    entry = tomllib.loads((sample / "experiments.toml").read_text())["experiments"][experiment]
    folder = where / "copies"
    folder.mkdir()
    for f in sample.iterdir():
        if f.is_file() and f.name != "experiments.toml":
            os.symlink(f.resolve(), folder / f.name)
    lines = []
    for i in range(copies):
        lines.append(f"[experiments.{experiment}{i}]")
        for key, value in entry.items():
            if isinstance(value, dict):
                inner = ", ".join(f'{k} = "{v}"' for k, v in value.items())
                lines.append(f"{key} = {{ {inner} }}")
            else:
                lines.append(f'{key} = "{value}"')
    (folder / "experiments.toml").write_text("\n".join(lines) + "\n")
    return folder


def run(folder: Path, jobs: int, where: Path) -> float:
    out = where / f"out-{jobs}-{time.time_ns()}"
    start = time.perf_counter()
    options = ProcessOptions(jobs=jobs, cross_validate=False)
    process_folder(folder, out, options, Console(file=io.StringIO()))
    wall = time.perf_counter() - start
    bad = [s["experiment"] for s in load_index(out) if s["status"] != "ok"]
    if bad:
        raise SystemExit(f"experiments failed: {bad}; see {out}")
    shutil.rmtree(out)
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=Path, default=Path("videos"))
    ap.add_argument("--experiment", default="furuta")
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-warmup", action="store_true", help="the JAX cache is already warm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        folder = copies_folder(args.sample, args.experiment, args.copies, where)
        if not args.no_warmup:
            run(folder, 2, where)  # warm the compilation cache
        times: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.runs):  # interleaved, so machine load hits both alike
            for jobs in (1, 2):
                times[jobs].append(run(folder, jobs, where))
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"{args.copies} x {args.experiment}, median of {args.runs} runs (load {os.getloadavg()})")
    print(f"  --jobs 1: {one:7.1f} s   {times[1]}")
    print(f"  --jobs 2: {two:7.1f} s   {times[2]}")
    print(f"  speed-up: {one / two:.2f}x (target >= 1.7x)")


if __name__ == "__main__":
    main()
