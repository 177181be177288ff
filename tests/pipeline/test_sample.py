"""The committed sample folder ``videos/`` is what ``physid simulate --sample`` writes, byte
for byte (slow: it simulates and renders all four experiments, ~1-3 min idle)."""

import hashlib
from pathlib import Path

import pytest
from rich.console import Console

from physid.rigs.pipeline.sample import write_samples

pytestmark = pytest.mark.slow

VIDEOS = Path(__file__).resolve().parents[2] / "videos"


def digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def test_sample_folder_regenerates_bit_for_bit(tmp_path):
    write_samples(tmp_path, Console(quiet=True))
    assert digests(tmp_path) == digests(VIDEOS)


def test_sample_folder_stays_small():
    size = sum(p.stat().st_size for p in VIDEOS.iterdir())
    assert size < 20e6, f"videos/ holds {size / 1e6:.1f} MB; the issue allows 20 MB"
