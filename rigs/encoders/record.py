"""``physid record`` (raw capture from a serial port) and ``physid board-sim`` (pty board).

The recorder writes every byte exactly as received, straight to the kernel (unbuffered
``os.write``) as soon as it is read, and fsyncs once a second: a crash, SIGKILL or Ctrl-C
loses at most the frame that was still arriving. A write that fails (disk full, I/O error)
ends the recording like Ctrl-C does: the capture written so far is kept, the summary is
printed, and the exit status is 4. Decoding runs alongside only for the live
display; the parsed CSV is made afterwards from the file itself, so it is exactly what any
later re-parse of the capture gives.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path
from typing import Annotated

import typer

from physid.errors import InputError

DEFAULT_BAUD = 921600
STATUS_EVERY_S = 0.5
DECODE_EVERY_S = 0.1


# Bytes asked of the port per read. The read returns sooner, with what has come, when the
# port's 50 ms timeout expires. Asking for only ``in_waiting`` bytes read one byte at a time
# from socket:// ports (pyserial's in_waiting there is 0 or 1): ~100 frames/s on a loaded
# machine from a board sending 1000.
READ_CHUNK = 4096


def register(app: typer.Typer) -> None:
    """Add ``record`` and ``board-sim`` to the physid command line."""
    app.command("record")(record)
    app.command("board-sim")(board_sim)


def _open_port(url: str, baud: int):
    import serial

    try:
        return serial.serial_for_url(url, baudrate=baud, timeout=0.05)
    except (serial.SerialException, ValueError, OSError) as exc:
        raise InputError(
            f"--port {url}: cannot open: {exc}; give a device path (/dev/ttyUSB0), "
            "loop://, socket://HOST:PORT or rfc2217://HOST:PORT"
        ) from None


def _terminate(signum, frame):  # SIGTERM ends a recording like Ctrl-C does
    raise KeyboardInterrupt


def record(
    port: Annotated[str, typer.Option(help="pyserial URL: /dev/ttyUSB0, loop://, socket://...")],
    out: Annotated[Path, typer.Option(help="Raw capture to write (.bin)")],
    duration: Annotated[float | None, typer.Option(help="Stop after this many s")] = None,
    baud: Annotated[int, typer.Option(help="Baud rate")] = DEFAULT_BAUD,
    rig: Annotated[
        str | None, typer.Option(help="Rig spec for the parsed CSV (counts/rev, sign, offset)")
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing capture")] = False,
) -> None:
    """Record the encoder board's byte stream to a raw capture, then write the parsed CSV."""
    import serial

    from physid.rigs.encoders.decode import StreamDecoder
    from physid.terminal import Console

    console = Console(stderr=True, soft_wrap=True)
    spec = None
    if rig is not None:
        from physid.spec import load_spec

        spec = load_spec(rig.replace("-", "_"))
    for existing in (out, out.with_suffix(".csv")):
        if existing.exists() and not force:
            raise InputError(
                f"{existing}: exists; choose another --out or pass --force to overwrite it"
            )
    ser = _open_port(port, baud)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    console.print(f"recording {port} at {baud} baud to {out} (Ctrl-C to stop)")
    old_term = signal.signal(signal.SIGTERM, _terminate)
    # A recorder started in the background of a non-interactive shell (`physid record … &`
    # in a script, CI) inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt: `kill -INT` would not stop it. Ctrl-C must always end a recording.
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    decoder = StreamDecoder()
    received = 0
    start = time.monotonic()
    last_sync = last_status = last_feed = start
    pending = bytearray()
    window = (start, 0)  # for the live rate: (time, frames) a moment ago
    rate = 0.0
    interrupted = False
    lost_port = None
    write_error: OSError | None = None
    try:
        while duration is None or time.monotonic() - start < duration:
            try:
                data = ser.read(max(READ_CHUNK, ser.in_waiting))
            except (serial.SerialException, OSError) as exc:  # unplugged, board gone
                lost_port = str(exc)
                break
            now = time.monotonic()
            if data:
                try:
                    _write_all(fd, data)
                except OSError as exc:  # disk full: stop, keep what is on disk
                    write_error = exc
                    break
                received += len(data)
                pending += data
            if pending and now - last_feed >= DECODE_EVERY_S:
                # decode in batches: the file already has the bytes; this is only the display
                decoder.feed(bytes(pending))
                pending.clear()
                last_feed = now
            if now - last_sync >= 1.0:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    write_error = exc
                    break
                last_sync = now
            if now - last_status >= STATUS_EVERY_S:
                st = decoder.stats
                if now - window[0] >= 1.0:
                    rate = (st.frames - window[1]) / (now - window[0])
                    window = (now, st.frames)
                elif window[0] == start:  # first second: the average so far
                    rate = st.frames / (now - start)
                line = (
                    f"{now - start:7.1f} s  {rate:7.0f} frames/s  {st.frames} frames  "
                    f"dropped {st.dropped}  corrupted {st.corrupted}  {received} bytes"
                )
                if console.is_terminal:
                    console.print(line, end="\r", highlight=False)
                elif now - last_status >= 5 * STATUS_EVERY_S or last_status == start:
                    console.print(line, highlight=False)
                last_status = now
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
        try:
            os.fsync(fd)
        except OSError as exc:
            write_error = write_error or exc
        finally:
            os.close(fd)
            ser.close()
    elapsed = time.monotonic() - start
    received = os.path.getsize(out)  # what the capture holds, whatever failed
    console.print()
    if lost_port is not None:
        console.print(f"[yellow]port {port} lost after {elapsed:.1f} s:[/yellow] {lost_port}")
    if write_error is not None:
        console.print(
            f"[red]writing {out} failed after {elapsed:.1f} s:[/red] "
            f"{write_error.strerror or write_error}; the {received} bytes before it are kept"
        )
        if received == 0:
            raise typer.Exit(4)
    csv_written = _summarize(console, out, spec, received, elapsed, interrupted)
    if write_error is not None or not csv_written:
        raise typer.Exit(4)  # the capture is kept, but it (or its CSV) is incomplete
    if lost_port is not None:
        raise typer.Exit(1)  # the data so far is kept and parsed, but the run ended early


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _summarize(console, out: Path, spec, received: int, elapsed: float, interrupted: bool) -> bool:
    """Print the capture's statistics and write its parsed CSV; False when the CSV could not
    be written (the message says why; the capture itself stays)."""
    from physid.rigs.encoders.convert import stream_from_capture
    from physid.rigs.encoders.csvlog import write_log_csv

    how = "stopped by user" if interrupted else "done"
    console.print(f"{how} after {elapsed:.1f} s: {received} bytes in {out}")
    if received == 0:
        raise InputError(
            f"{out}: no bytes received; check the port, the baud rate and that the board is on"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = stream_from_capture(out, spec)
    for w in caught:
        console.print(f"[yellow]note:[/yellow] {w.message}")
    src = stream.source
    span = float(stream.t[-1] - stream.t[0]) if len(stream) > 1 else 0.0
    rate = (src["frames"] - 1) / span if span > 0 else 0.0  # by the board's clock
    console.print(
        f"frames {src['frames']} ({rate:.0f}/s), dropped {src['dropped']}, "
        f"corrupted {src['corrupted']}, CRC failures {src['crc_failures']}, "
        f"skipped bytes {src['skipped_bytes']}, clock jumps {len(src['clock_jumps'])}, "
        f"seq resets {src['seq_resets']}",
        highlight=False,
    )
    if spec is None:
        console.print(
            "channels enc0.. at 4096 counts/rev (pass --rig for the rig's names, "
            "counts/rev, sign and offset)"
        )
    console.print(f"raw capture: {out}")
    try:
        csv_path = write_log_csv(out.with_suffix(".csv"), stream)
    except OSError as exc:
        console.print(
            f"[red]cannot write the parsed log[/red] {out.with_suffix('.csv')}: "
            f"{exc.strerror or exc}; the raw capture is complete as recorded, and physid "
            "identify and process read it as it is"
        )
        return False
    console.print(f"parsed log: {csv_path}")
    return True


def board_sim(
    log: Annotated[
        Path | None, typer.Option(help="CSV encoder log to play (default: a synthetic swing)")
    ] = None,
    rig: Annotated[str | None, typer.Option(help="Rig spec to turn CSV angles into counts")] = None,
    duration: Annotated[float, typer.Option(help="Synthetic trajectory length (s)")] = 10.0,
    rate: Annotated[float, typer.Option(help="Frames per second")] = 1000.0,
    channels: Annotated[int, typer.Option(help="Encoder channels (synthetic)")] = 2,
    corrupt: Annotated[float, typer.Option(help="Probability of changing each byte")] = 0.0,
    drop: Annotated[float, typer.Option(help="Probability of dropping each frame")] = 0.0,
    seed: Annotated[int, typer.Option(help="Random seed")] = 0,
) -> None:
    """Simulate the encoder board on a pseudo-terminal; record it with physid record --port."""
    from physid.rigs.encoders.boardsim import (
        BoardSimulator,
        encode_trajectory,
        inject_faults,
        synthetic_trajectory,
        trajectory_from_csv,
    )
    from physid.terminal import Console

    console = Console(stderr=True, soft_wrap=True)
    if log is not None:
        spec = None
        if rig is not None:
            from physid.spec import load_spec

            spec = load_spec(rig.replace("-", "_"))
        traj = trajectory_from_csv(log, spec)
    else:
        traj = synthetic_trajectory(duration, rate, channels, seed=seed)
    frames = encode_trajectory(traj)
    data, plan = inject_faults(frames, corrupt, drop, seed=seed)
    with BoardSimulator(data, frames.shape[1], rate) as sim:
        console.print(f"board on {sim.port}: {len(frames)} frames at {rate:g}/s")
        console.print(f"record it with: physid record --port {sim.port} --out log.bin")
        console.print(
            f"injected: {len(plan.dropped)} dropped, {len(plan.corrupted)} corrupted frames"
        )
        sim.start()
        try:
            while not sim.wait(0.2):
                pass
            console.print(f"sent {sim.written} bytes; Ctrl-C closes the port")
            while True:  # keep the port open, as a powered board would, until Ctrl-C
                time.sleep(0.2)
        except KeyboardInterrupt:
            console.print(f"stopped; sent {sim.written} bytes")
