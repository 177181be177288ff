"""Video reading with presentation timestamps, and writing with a codec this OpenCV has.

Timing comes from the container's presentation timestamps (``CAP_PROP_POS_MSEC`` after each
``read``), so variable-frame-rate files keep their true times; frame index x nominal fps is
never used while timestamps are available.

Codecs (checked on opencv-contrib-python-headless 5.0, FFmpeg backend): ``MJPG`` in ``.avi``
(intra-only JPEG, ``VIDEOWRITER_PROP_QUALITY`` honoured; the default for synthetic videos),
``mp4v`` in ``.mp4`` (MPEG-4 part 2, which no browser plays), ``FFV1`` in ``.mkv``
(lossless; Matroska stores 1 ms timestamps), ``VP90`` in ``.webm`` (VP9: browsers play it;
overlays). ``avc1``/H.264 is not available for writing in this build.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from physid.errors import InputError

FOURCC_FOR_SUFFIX = {".avi": "MJPG", ".mp4": "mp4v", ".mkv": "FFV1", ".webm": "VP90"}


class VideoError(InputError):
    """A video that cannot be read or written; the message names the file and frame."""


@dataclass(frozen=True)
class VideoInfo:
    """Container metadata: frame ``size`` (w, h) px, nominal ``fps``, ``frames`` (may be 0)."""

    path: Path
    size: tuple[int, int]
    fps: float
    frames: int


def open_video(path: str | Path) -> tuple[cv2.VideoCapture, VideoInfo]:
    """Open a video; a VideoError says what to check when OpenCV cannot decode it."""
    path = Path(path)
    if not path.exists():
        raise VideoError(f"{path}: no such video file; check the path")
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise VideoError(
            f"{path}: frame 0: OpenCV cannot open this video; check that it is a video "
            "file (mp4/avi/mkv/mov) and not truncated"
        )
    w = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
    h = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    info = VideoInfo(path, (w, h), float(cap.get(cv2.CAP_PROP_FPS)), int(cap.get(7)))
    return cap, info


def frames(
    path: str | Path, gray: bool = False, prefetch: int = 16
) -> Iterator[tuple[int, float, np.ndarray]]:
    """Yield ``(index, t, image)`` for each frame: ``t`` is the presentation time (s).

    Decoding runs in a background thread ``prefetch`` frames ahead (OpenCV releases the GIL
    while decoding), so per-frame work of the consumer overlaps decoding; ``prefetch=0``
    decodes in the calling thread. Timestamps that go backwards or repeat (broken
    containers) fall back to the previous time plus one nominal frame period, and the first
    frame must decode or a VideoError names the file.
    """
    cap, info = open_video(path)
    source = _decode(cap, info)
    if prefetch > 0:
        source = _prefetched(source, prefetch)
    for index, t, img in source:
        if gray and img.ndim == 3:
            img = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        yield index, t, img


def _decode(cap: cv2.VideoCapture, info: VideoInfo) -> Iterator[tuple[int, float, np.ndarray]]:
    period = 1.0 / info.fps if info.fps > 0 else 0.0
    index, last = 0, -np.inf
    try:
        while True:
            ok, img = cap.read()
            if not ok:
                if index == 0:
                    raise VideoError(
                        f"{info.path}: frame 0: no frame could be decoded; check that the "
                        "file is a complete video in a codec FFmpeg knows"
                    )
                return
            t = cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0
            if not np.isfinite(t) or t <= last:
                t = last + period if np.isfinite(last) else 0.0
            last = t
            yield index, t, img
            index += 1
    finally:
        cap.release()


_END = object()


def _prefetched(source: Iterator, depth: int) -> Iterator:
    """Run ``source`` in a daemon thread, handing items (and its exception) over a queue."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for item in source:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    break
            q.put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            q.put(exc)
        finally:
            source.close()

    thread = threading.Thread(target=work, name="video-decode", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)


# ------------------------------------------------------------------------------ frame accounting

# A video may lack at most this fraction of the frames its container declares and still be
# used; the experiment is then marked "warning" with the missing frames listed. An action
# camera that drops an occasional frame under load stays well below it, and trackers treat a
# missing frame like an occluded one. Beyond it the file is damaged (a 200 kB overwrite left
# 36 of 120 frames; a file cut in half, 57): the experiment fails instead of giving a fit to
# a fraction of the motion.
MISSING_WARN_FRACTION = 0.02


@dataclass(frozen=True)
class FrameAccount:
    """Decoded frames against what the container declares.

    ``expected``: the container's frame count (0 when it states none); ``duration_s``: its
    duration at the nominal rate; ``decoded``: frames decoded; ``gaps``: runs of frames whose
    timestamps are absent between decoded ones, as (first, last) frame numbers; ``missing``:
    frames declared or skipped but not decoded (tail and gaps together).
    """

    path: Path
    expected: int
    duration_s: float
    decoded: int
    missing: int
    gaps: tuple[tuple[int, int], ...] = ()

    @property
    def fraction(self) -> float:
        total = max(self.expected, self.decoded + self.missing, 1)
        return self.missing / total

    @property
    def verdict(self) -> str:
        """ "ok", "warning" (a few frames missing, listed) or "failed"."""
        if self.missing == 0:
            return "ok"
        return "warning" if self.fraction <= MISSING_WARN_FRACTION else "failed"

    def message(self) -> str:
        runs = [f"{a}" if a == b else f"{a}-{b}" for a, b in self.gaps]
        shown = ", ".join(runs[:8]) + (f" and {len(runs) - 8} more runs" if len(runs) > 8 else "")
        return (
            f"{self.path.name}: {self.decoded} of {self.expected or '?'} frames decoded, "
            f"{self.missing} missing ({100 * self.fraction:.1f} %): frames {shown}"
        )

    def as_dict(self) -> dict:
        return {
            "frames_expected": self.expected,
            "frames_decoded": self.decoded,
            "frames_missing": self.missing,
            "duration_s": self.duration_s,
            "missing_frames": [list(g) for g in self.gaps],
        }


def account_frames(info: VideoInfo, t: np.ndarray) -> FrameAccount:
    """Compare the decoded frames' presentation times ``t`` (s) with the container's frame
    count and nominal rate: frames missing at the end (decoding stopped, file cut) and
    inside (timestamps skipping frames)."""
    t = np.asarray(t, float)
    decoded = int(t.size)
    expected = max(int(info.frames), 0)
    period = 1.0 / info.fps if info.fps > 0 else 0.0
    gaps: list[tuple[int, int]] = []
    last = decoded - 1  # frame number of the last decoded frame
    if period > 0 and decoded > 1:
        steps = np.rint(np.diff(t) / period).astype(np.int64)
        frame = np.concatenate([[0], np.cumsum(np.maximum(steps, 1))])  # frame number of each
        for i in np.flatnonzero(steps > 1).tolist():
            gaps.append((int(frame[i] + 1), int(frame[i + 1] - 1)))
        last = int(frame[-1])
    if expected > last + 1:
        gaps.append((last + 1, expected - 1))
    missing = max(expected - decoded, sum(b - a + 1 for a, b in gaps))
    return FrameAccount(Path(info.path), expected, expected * period, decoded, missing, tuple(gaps))


# ------------------------------------------------------------------------------ writing


class VideoWriter:
    """``cv2.VideoWriter`` chosen by file suffix (see module docstring), grey or colour.

    OpenCV's writer reports no errors: on a full disk it prints a warning per frame and
    leaves an unreadable file. ``close`` therefore re-opens the file and raises a
    ``VideoWriteError`` (an ``OSError``, naming the file and the frames) unless every frame
    written can be read back.
    """

    def __init__(self, path: str | Path, fps: float, size: tuple[int, int], quality: int = 95):
        self.path = Path(path)
        fourcc = FOURCC_FOR_SUFFIX.get(self.path.suffix.lower())
        if fourcc is None:
            raise VideoError(
                f"{self.path}: unsupported video suffix; use one of " + ", ".join(FOURCC_FOR_SUFFIX)
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One clear error at close replaces OpenCV's warning per failed frame.
        self._log_level = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
        self._w = cv2.VideoWriter(
            str(self.path), cv2.VideoWriter_fourcc(*fourcc), float(fps), tuple(size), True
        )
        if not self._w.isOpened():
            raise VideoError(f"{self.path}: cannot open a {fourcc} video writer here")
        self._w.set(cv2.VIDEOWRITER_PROP_QUALITY, float(quality))
        self.size = tuple(size)
        self.written = 0

    def write(self, img: np.ndarray) -> None:
        if img.ndim == 2:
            img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
        self._w.write(img)
        self.written += 1

    def close(self) -> None:
        if self._w is None:
            return
        self._w.release()
        self._w = None
        cv2.utils.logging.setLogLevel(self._log_level)
        readable = _frame_count(self.path)
        # Matroska states no frame count: OpenCV derives it from the duration (±1 frame).
        if readable < self.written - (1 if self.path.suffix.lower() == ".mkv" else 0):
            import errno
            import shutil

            free = shutil.disk_usage(self.path.parent).free
            full = free < 1 << 20
            raise VideoWriteError(
                errno.ENOSPC if full else errno.EIO,
                f"{self.written} frames written but {max(readable, 0)} readable"
                + (f" (the disk has {free} bytes free)" if full else ""),
                str(self.path),
            )

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        elif self._w is not None:  # already failing: release without checking
            self._w.release()
            self._w = None
            cv2.utils.logging.setLogLevel(self._log_level)


class VideoWriteError(OSError):
    """A video file that could not be written completely (full disk, I/O error)."""


def _frame_count(path: Path) -> int:
    """Frames a video file declares when read back (-1: it cannot be opened)."""
    cap = cv2.VideoCapture(str(path))
    try:
        return int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if cap.isOpened() else -1
    finally:
        cap.release()
