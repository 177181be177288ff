"""Encoder interface board: serial protocol v1, decoders, log formats, recorder, simulator.

See ``docs/encoder-format.md`` and ``docs/encoder-protocol.md``.
"""

from physid.rigs.encoders.csvlog import read_log_csv, write_log_csv
from physid.rigs.encoders.decode import DecodeStats, Frames, StreamDecoder, decode_capture
from physid.rigs.encoders.readers import read_capture, read_log

__all__ = [
    "DecodeStats",
    "Frames",
    "StreamDecoder",
    "decode_capture",
    "read_capture",
    "read_log",
    "read_log_csv",
    "write_log_csv",
]
