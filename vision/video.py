"""Video reading with presentation timestamps, and writing with a codec this OpenCV has.

Timing comes from the container's presentation timestamps (``CAP_PROP_POS_MSEC`` after each
``read``), so variable-frame-rate files keep their true times; frame index x nominal fps is
never used while timestamps are available.

Codecs (checked on opencv-contrib-python-headless 5.0, FFmpeg backend): ``MJPG`` in ``.avi``
(intra-only JPEG, ``VIDEOWRITER_PROP_QUALITY`` honoured; the default for synthetic videos),
``mp4v`` in ``.mp4`` (MPEG-4 part 2, for overlays), ``FFV1`` in ``.mkv`` (lossless; Matroska
stores 1 ms timestamps). ``avc1``/H.264 is not available for writing in this build.
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

FOURCC_FOR_SUFFIX = {".avi": "MJPG", ".mp4": "mp4v", ".mkv": "FFV1"}


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


class VideoWriter:
    """``cv2.VideoWriter`` chosen by file suffix (see module docstring), grey or colour."""

    def __init__(self, path: str | Path, fps: float, size: tuple[int, int], quality: int = 95):
        self.path = Path(path)
        fourcc = FOURCC_FOR_SUFFIX.get(self.path.suffix.lower())
        if fourcc is None:
            raise VideoError(
                f"{self.path}: unsupported video suffix; use one of " + ", ".join(FOURCC_FOR_SUFFIX)
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._w = cv2.VideoWriter(
            str(self.path), cv2.VideoWriter_fourcc(*fourcc), float(fps), tuple(size), True
        )
        if not self._w.isOpened():
            raise VideoError(f"{self.path}: cannot open a {fourcc} video writer here")
        self._w.set(cv2.VIDEOWRITER_PROP_QUALITY, float(quality))
        self.size = tuple(size)

    def write(self, img: np.ndarray) -> None:
        if img.ndim == 2:
            img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
        self._w.write(img)

    def close(self) -> None:
        self._w.release()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
