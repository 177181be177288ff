"""Pose stream CSV: ``t,x,y,theta`` plus quality columns, one row per video frame.

Units: t s; x, y, std_x, std_y, rigid_err m; theta, std_theta rad; px_sigma px. A frame
whose pose could not be measured has ``nan`` in every value column (never interpolated)
and ``valid = 0``. A ``<csv>.json`` sidecar holds the scene measured from the video (plane
pose, ground segment P0 and alpha) and the source file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from physid.errors import InputError
from physid.files import atomic_open
from physid.streams import Stream


def write_pose_csv(path: str | Path, stream: Stream, frames: np.ndarray) -> Path:
    """Write ``stream`` (a PoseStream) atomically; returns the path."""
    path = Path(path)
    miss = stream.missing.any(axis=1)
    cols = ["t", *stream.channels, "frame", "valid"]
    with atomic_open(path) as fh:
        fh.write(",".join(cols) + "\n")
        for k in range(len(stream)):
            vals = ["nan" if miss[k] else f"{v:.9g}" for v in stream.values[k]]
            fh.write(f"{stream.t[k]:.9f},{','.join(vals)},{int(frames[k])},{int(not miss[k])}\n")
    with atomic_open(path.with_name(path.name + ".json")) as fh:
        fh.write(json.dumps(stream.source, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


def read_pose_csv(path: str | Path) -> Stream:
    """Read a pose CSV back into a Stream (missing rows masked)."""
    path = Path(path)
    try:
        with open(path) as fh:
            header = fh.readline().strip().split(",")
    except OSError as exc:
        raise InputError(f"{path}: cannot read pose CSV: {exc.strerror}") from None
    if header[:4] != ["t", "x", "y", "theta"]:
        raise InputError(f"{path}: line 1: expected a header starting t,x,y,theta")
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    channels = header[1:-2]
    from physid.vision.tracking import POSE_CHANNELS, POSE_UNITS

    units = [POSE_UNITS[POSE_CHANNELS.index(c)] if c in POSE_CHANNELS else "" for c in channels]
    values = data[:, 1:-2]
    missing = np.broadcast_to((data[:, -1] == 0)[:, None], values.shape).copy()
    side = path.with_name(path.name + ".json")
    source = json.loads(side.read_text()) if side.exists() else {"file": str(path)}
    return Stream(data[:, 0], values, channels, units, missing, source)
