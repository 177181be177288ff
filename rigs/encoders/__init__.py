"""Encoder interface board: serial protocol v1, decoders, log formats, recorder, simulator.

See ``docs/encoder-format.md`` and ``shared/encoder-protocol.md``.
"""

from rigs.encoders.csvlog import read_log_csv, write_log_csv
from rigs.encoders.readers import read_log

__all__ = ["read_log", "read_log_csv", "write_log_csv"]
