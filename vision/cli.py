"""``physid calibrate``, ``physid track`` and ``physid render`` (synthetic videos)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from physid.terminal import Console  # messages keep their [brackets]

console = Console(stderr=True)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} frames"),
        TextColumn("{task.fields[fps]:.0f} frames/s"),
        TimeRemainingColumn(),
        console=console,
    )


def calibrate(
    video: Annotated[Path, typer.Argument(help="Checkerboard video")],
    board: Annotated[
        str, typer.Option(help="Checkerboard inner corners COLSxROWS (9x6); ChArUco: squares")
    ],
    square: Annotated[float, typer.Option(help="Square size (m)")],
    out: Annotated[Path, typer.Option(help="Camera JSON to write")],
    model: Annotated[str, typer.Option(help="fisheye or pinhole")] = "fisheye",
    max_frames: Annotated[int, typer.Option(help="Frames used in the fit")] = 25,
    charuco: Annotated[
        str | None, typer.Option(help="ChArUco board: its dictionary, e.g. DICT_4X4_50")
    ] = None,
    marker: Annotated[float | None, typer.Option(help="ChArUco marker side (m)")] = None,
) -> None:
    """Calibrate a camera from a checkerboard (or ChArUco) video; writes K, D, size as JSON."""
    import time

    from physid.vision.calibrate import calibrate_video, parse_board

    pattern = parse_board(board)
    start = time.perf_counter()
    with _progress() as bar:
        task = bar.add_task("calibrate", total=None, fps=0.0)

        def tick(k: int, total: int) -> None:
            bar.update(task, completed=k, total=total, fps=k / (time.perf_counter() - start))

        report = calibrate_video(
            video,
            pattern,
            square,
            model,
            max_frames,
            progress=tick,
            charuco=charuco,
            marker=marker,
        )
    for k, v in sorted(report.frame_rms.items()):
        console.print(f"frame {k:5d}: reprojection RMS {v:.3f} px")
    for k, v in sorted(report.rejected.items()):
        console.print(f"[yellow]rejected[/yellow] frame {k}: RMS {v:.3f} px (outlier)")
    K = report.camera.K
    console.print(
        f"board in {report.detected}/{report.examined} examined frames; used "
        f"{len(report.frame_rms)}; overall RMS {report.rms:.3f} px; fx {K[0, 0]:.2f} "
        f"fy {K[1, 1]:.2f} cx {K[0, 2]:.2f} cy {K[1, 2]:.2f}"
    )
    report.camera.save(out)
    console.print(f"[green]wrote[/green] {out}")


def track(
    video: Annotated[Path, typer.Argument(help="Video of the rig")],
    calibration: Annotated[Path, typer.Option(help="Camera JSON from physid calibrate")],
    rig: Annotated[str, typer.Option(help="Rig spec TOML with [scene] and [markers]")],
    out: Annotated[Path, typer.Option(help="Pose stream CSV to write")],
    overlay: Annotated[Path | None, typer.Option(help="Overlay video to write (.mp4)")] = None,
) -> None:
    """Track the rig's markers and write the pose stream (t, x, y, theta + quality)."""
    import time

    from physid.spec import load_spec
    from physid.vision.camera import Camera
    from physid.vision.posefile import write_pose_csv
    from physid.vision.scene import scene_from_spec
    from physid.vision.tracking import track_video
    from physid.vision.video import open_video

    camera = Camera.load(calibration)
    scene = scene_from_spec(load_spec(rig))
    _, info = open_video(video)
    start = time.perf_counter()
    with _progress() as bar:
        task = bar.add_task("track", total=info.frames or None, fps=0.0)

        def tick(k: int) -> None:
            if k % 10 == 0:
                bar.update(task, completed=k, fps=k / (time.perf_counter() - start))

        # a failed detection's annotated frame goes beside the pose file
        result = track_video(
            video, camera, scene, progress=tick, figure_dir=Path(out).resolve().parent
        )
        bar.update(task, completed=len(result.t))
    elapsed = time.perf_counter() - start
    write_pose_csv(out, result.stream(), result.frame)
    n = len(result.t)
    valid = int((~result.missing.any(axis=1)).sum())
    console.print(
        f"{n} frames in {elapsed:.1f} s ({n / elapsed:.0f} frames/s); {valid} poses, "
        f"{n - valid} masked; ground alpha {result.ground_alpha:.4f} rad; tracking noise "
        f"model scaled by {result.stats.get('noise_scale', 1.0):.2f} on this video"
    )
    console.print(f"[green]wrote[/green] {out} (+ {out.name}.json)")
    if overlay is not None:
        from physid.vision.overlay import write_overlay

        write_overlay(result, camera, scene, overlay, info.fps or 30.0)
        console.print(f"[green]wrote[/green] overlay {overlay}")


def render(
    out: Annotated[Path, typer.Argument(help="Video to write (.avi MJPG, .mp4, .mkv)")],
    kind: Annotated[str, typer.Option(help="drop, checkerboard (9x6, 20 mm) or charuco")] = "drop",
    frames: Annotated[int, typer.Option(help="Number of frames")] = 120,
    exposure: Annotated[float, typer.Option(help="Exposure (s), 0 = no motion blur")] = 0.0,
    model: Annotated[str, typer.Option(help="fisheye or pinhole camera")] = "fisheye",
    rig: Annotated[str, typer.Option(help="Rig spec for the scene")] = "ellipse_drop",
    seed: Annotated[int, typer.Option(help="Noise seed")] = 0,
) -> None:
    """Render a synthetic drop or checkerboard video with ground truth beside it."""
    from physid.spec import load_spec
    from physid.vision.camera import action_camera, pinhole_camera
    from physid.vision.render import (
        RenderOptions,
        default_view,
        drop_trajectory,
        render_checkerboard_video,
        render_drop,
    )
    from physid.vision.scene import scene_from_spec

    camera = action_camera() if model == "fisheye" else pinhole_camera()
    if kind == "checkerboard":
        render_checkerboard_video(out, camera, (9, 6), 0.02, frames, seed=seed)
    elif kind == "charuco":
        from physid.vision.render import render_charuco_video

        # 10x7 squares of 20 mm, 15 mm DICT_4X4_50 markers
        render_charuco_video(out, camera, (10, 7), 0.02, 0.015, n_frames=frames, seed=seed)
    else:
        scene = scene_from_spec(load_spec(rig))
        view = default_view(camera, scene, 0.19 if model == "fisheye" else 0.45)
        opts = RenderOptions(exposure=exposure, seed=seed)
        traj = drop_trajectory(scene, duration=frames / opts.fps + 0.01, v0=(0, 0, 2.0))
        render_drop(out, view, scene, traj, frames, opts)
    camera.save(out.with_name(out.name + ".camera.json"))
    console.print(f"[green]wrote[/green] {out} (+ .truth.npz, .camera.json)")


def register(app: typer.Typer) -> None:
    """Add ``calibrate``, ``track`` and ``render`` to the physid command line."""
    app.command("calibrate")(calibrate)
    app.command("track")(track)
    app.command("render")(render)
