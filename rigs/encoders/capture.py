"""``read_capture``: a raw ``.bin`` capture file decoded into frames, errors naming the byte."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from physid.errors import InputError
from physid.rigs.encoders.decode import DecodeStats, Frames, decode_capture
from physid.rigs.encoders.protocol import frame_length


class CaptureError(InputError):
    """A raw capture that cannot be decoded; the message names the file and byte offset."""


class TruncatedCaptureWarning(UserWarning):
    """A capture ends inside a frame (recorder killed or cable pulled); earlier frames are kept."""


def read_capture(path: str | Path, strict: bool = False) -> tuple[Frames, DecodeStats]:
    """Decode a raw ``.bin`` capture; errors name the file and the byte offset.

    A capture that ends inside a frame (the recorder was killed) keeps every complete frame
    and warns with the offset of the cut; ``strict=True`` makes that an error instead.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read capture: {exc.strerror}") from None
    if not data:
        raise CaptureError(f"{path}: byte 0: empty capture; was the board connected and on?")
    frames, stats = decode_capture(np.frombuffer(data, dtype=np.uint8))
    if stats.wrong_version_offset is not None:
        at = stats.wrong_version_offset
        raise CaptureError(
            f"{path}: byte {at}: frame with protocol version {data[at + 2]} (CRC valid); "
            f"physid reads version 1; update physid or the board firmware"
        )
    if stats.frames == 0:
        first = data.find(b"\xa5\x5a")
        if first >= 0 and first + 4 <= len(data) and 1 <= data[first + 3] <= 8:
            need = frame_length(data[first + 3])
            if first + need > len(data):
                raise CaptureError(
                    f"{path}: byte {first}: truncated; the capture ends {len(data) - first} "
                    f"bytes into its first frame (a frame is {need} bytes); record longer"
                )
        where = f"first sync at byte {first}" if first >= 0 else "no sync bytes A5 5A at all"
        raise CaptureError(
            f"{path}: byte 0: no valid protocol v1 frame in {len(data)} bytes ({where}); "
            "is this a raw capture from physid record, at the right baud rate?"
        )
    if stats.truncated_tail:
        at = len(data) - stats.truncated_tail
        message = (
            f"{path}: byte {at}: truncated; the capture ends {stats.truncated_tail} bytes into "
            f"a frame; the {stats.frames} complete frames before it are used"
        )
        if strict:
            raise CaptureError(message)
        warnings.warn(message, TruncatedCaptureWarning, stacklevel=2)
    return frames, stats
