"""The ``Stream`` type: time-stamped samples from one source (encoder board, camera tracker).

Every arrow between the vision front-end, the encoder readers and the estimators carries a
Stream. Missing samples (dropped frames, occluded markers) are marked in ``missing``, never
invented.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Stream:
    """Samples ``values[N, d]`` at times ``t[N]`` (s).

    ``channels`` and ``units`` name and give the unit of each of the d columns;
    ``missing[N, d]`` is True where a sample is absent (its value is NaN or meaningless);
    ``source`` holds metadata such as the file it came from and reader statistics.
    """

    t: np.ndarray
    values: np.ndarray
    channels: tuple[str, ...]
    units: tuple[str, ...]
    missing: np.ndarray
    source: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        t = np.asarray(self.t, dtype=float)
        values = np.asarray(self.values, dtype=float)
        if values.ndim == 1:
            values = values[:, None]
        missing = np.asarray(self.missing, dtype=bool)
        if missing.ndim == 1:
            missing = np.broadcast_to(missing[:, None], values.shape).copy()
        if t.ndim != 1 or values.shape[0] != t.shape[0]:
            raise ValueError(f"Stream: t has shape {t.shape} but values have {values.shape}")
        if missing.shape != values.shape:
            raise ValueError(f"Stream: missing {missing.shape} must match values {values.shape}")
        if len(self.channels) != values.shape[1] or len(self.units) != values.shape[1]:
            raise ValueError(
                f"Stream: {values.shape[1]} columns but {len(self.channels)} channel names "
                f"and {len(self.units)} units"
            )
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "missing", missing)
        object.__setattr__(self, "channels", tuple(self.channels))
        object.__setattr__(self, "units", tuple(self.units))

    def __len__(self) -> int:
        return self.t.shape[0]

    def column(self, name: str) -> np.ndarray:
        """Values of channel ``name`` (NaN where missing)."""
        if name not in self.channels:
            raise KeyError(f"no channel {name!r}; the stream has {', '.join(self.channels)}")
        i = self.channels.index(name)
        return np.where(self.missing[:, i], np.nan, self.values[:, i])

    def shifted(self, offset: float) -> Stream:
        """The same samples with ``offset`` seconds added to every time stamp."""
        return Stream(
            self.t + offset, self.values, self.channels, self.units, self.missing, self.source
        )


# Times this close to a sample count as at it (s, relative to 1 + |t|): a grid built as
# t₀ + k h lands a few ulps to either side of the sample it means (board clocks read 42 s).
HOLD_TOLERANCE = 1e-9


def held_index(times: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Index of the last of ``times`` (s, increasing) at or before each of ``at`` (s): the
    sample a zero-order hold reads, first sample before the log starts. Without the tolerance
    the Furuta sample's drive was read one 1 ms frame late at 2593 of its 6000 grid steps
    (float rounding of the grid), a phase lag that put its damping b1 24 % high."""
    at = np.asarray(at, float)
    idx = np.searchsorted(times, at + HOLD_TOLERANCE * (1.0 + np.abs(at)), side="right") - 1
    return np.clip(idx, 0, len(times) - 1)
