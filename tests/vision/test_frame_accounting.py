"""Damaged videos are caught, never a silent `ok` (issue 25): decoded frames against the
container's count and duration, on real video bytes (the sample drop video, cut or
overwritten); and a video that cannot be written completely (a real full tmpfs) is an error
naming the file, not 70 warnings and a broken overlay."""

import errno
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from physid.vision.video import (
    MISSING_WARN_FRACTION,
    VideoInfo,
    VideoWriteError,
    VideoWriter,
    account_frames,
    frames,
    open_video,
)

SAMPLE = Path(__file__).resolve().parents[2] / "videos" / "drop.avi"  # 120 MJPG frames


def account(path: Path):
    _, info = open_video(path)
    return account_frames(info, [t for _, t, _ in frames(path)])


def frame_starts(data: bytes) -> list[int]:
    """Byte offsets of the AVI's frame chunks ('00dc' tags before each JPEG)."""
    return [m.start() for m in re.finditer(rb"00dc....\xff\xd8", data, re.DOTALL)]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict[str, Path]:
    data = SAMPLE.read_bytes()
    starts = frame_starts(data)
    assert len(starts) == 120
    folder = tmp_path_factory.mktemp("damaged")
    out = {
        "half": data[: len(data) // 2],  # a copy cut in half
        "overwritten": data[:1_500_000] + os.urandom(200_000) + data[1_700_000:],
        "tail2": data[: starts[118]],  # the last two frames cut off
    }
    for name, content in out.items():
        (folder / f"{name}.avi").write_bytes(content)
    return {name: folder / f"{name}.avi" for name in out}


def test_the_intact_sample_is_complete():
    a = account(SAMPLE)
    assert (a.expected, a.decoded, a.missing, a.verdict) == (120, 120, 0, "ok")


def test_a_cut_or_overwritten_video_fails_naming_the_frames(damaged):
    half = account(damaged["half"])
    assert half.expected == 120 and half.decoded < 60 and half.verdict == "failed"
    assert half.gaps == ((half.decoded, 119),)
    assert f"half.avi: {half.decoded} of 120 frames decoded" in half.message()
    assert f"frames {half.decoded}-119" in half.message()
    over = account(damaged["overwritten"])
    assert over.decoded < 120 and over.verdict == "failed", over.message()


def test_two_frames_missing_of_120_is_a_warning(damaged):
    a = account(damaged["tail2"])
    assert (a.decoded, a.missing, a.gaps) == (118, 2, ((118, 119),))
    assert a.fraction <= MISSING_WARN_FRACTION and a.verdict == "warning"
    assert "tail2.avi: 118 of 120 frames decoded, 2 missing (1.7 %): frames 118-119" in (
        a.message()
    )


def test_skipped_timestamps_count_as_missing_frames():
    """Frames whose timestamps a container skips (a camera dropping frames) are found
    between decoded ones, with their frame numbers."""
    t = np.r_[np.arange(50), np.arange(53, 100)] / 100.0  # frames 50-52 absent
    a = account_frames(VideoInfo(Path("cam.mp4"), (64, 48), 100.0, 100), t)
    assert (a.decoded, a.missing, a.gaps) == (97, 3, ((50, 52),))
    assert a.verdict == "failed"  # 3 % > 2 %


def test_the_pipeline_fails_a_damaged_video_and_writes_nothing_else(tmp_path, damaged):
    from physid.rigs.pipeline.experiments import discover
    from physid.rigs.pipeline.run import run_experiment
    from physid.vision.camera import action_camera

    folder = tmp_path / "recordings"
    folder.mkdir()
    shutil.copy(damaged["half"], folder / "drop.avi")
    action_camera().save(folder / "camera.json")
    (folder / "experiments.toml").write_text(
        '[experiments.drop]\nrig = "ellipse_drop"\nvideo = "drop.avi"\n'
        'calibration = "camera.json"\n'
    )
    (exp,) = discover(folder)
    out = tmp_path / "reports"
    summary = run_experiment(exp, out, {})
    assert summary["status"] == "failed"
    assert "drop.avi:" in summary["error"] and "of 120 frames decoded" in summary["error"]
    assert "-119" in summary["error"]
    assert sorted(p.name for p in out.iterdir()) == ["drop.failed.log"]
    assert "of 120 frames decoded" in (out / "drop.failed.log").read_text()


def test_a_video_that_cannot_be_written_is_an_error_naming_it(small_disk):
    from tests.conftest import fill

    disk = small_disk(1 << 20)
    fill(disk, leave=64 << 10)
    rng = np.random.default_rng(0)
    path = disk / "overlay.mp4"
    with pytest.raises(VideoWriteError) as caught:  # noqa: PT012  (the error comes at close)
        with VideoWriter(path, 30.0, (320, 240)) as w:
            for _ in range(60):  # incompressible noise: ~60 × 50 kB, far beyond 64 kB
                w.write(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8))
    err = caught.value
    assert err.errno == errno.ENOSPC and err.filename == str(path)
    assert "60 frames written but 0 readable" in str(err)


@pytest.mark.slow
def test_two_missing_frames_finish_as_a_warning_listed_in_the_report(tmp_path, damaged):
    """The tail-cut drop video (118 of 120 frames) is identified, with status `warning` and
    the missing frames in the summary, the report and the index."""
    from physid.estimation.report import index_page
    from physid.rigs.pipeline.experiments import discover
    from physid.rigs.pipeline.run import run_experiment
    from physid.vision.camera import action_camera

    folder = tmp_path / "recordings"
    folder.mkdir()
    shutil.copy(damaged["tail2"], folder / "drop.avi")
    action_camera().save(folder / "camera.json")
    (folder / "experiments.toml").write_text(
        '[experiments.drop]\nrig = "ellipse_drop"\nvideo = "drop.avi"\n'
        'calibration = "camera.json"\n'
    )
    (exp,) = discover(folder)
    summary = run_experiment(exp, tmp_path / "reports", {})
    assert summary["status"] == "warning", summary.get("error")
    (note,) = summary["warnings"]
    assert "drop.avi: 118 of 120 frames decoded, 2 missing (1.7 %): frames 118-119" in note
    assert summary["facts"]["tracking"]["frames_missing"] == 2
    assert note in (tmp_path / "reports" / "drop" / "report.html").read_text()
    assert "warning: drop.avi: 118 of 120" in index_page([summary])
