"""``physid calibrate``, ``physid track`` and ``physid render`` (synthetic videos)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from physid.terminal import Console  # messages keep their [brackets]

console = Console(stderr=True)


class CameraModel(StrEnum):
    """OpenCV's camera models physid calibrates and renders."""

    fisheye = "fisheye"
    pinhole = "pinhole"


class RenderKind(StrEnum):
    """What ``physid render`` draws."""

    drop = "drop"
    checkerboard = "checkerboard"
    charuco = "charuco"


def _progress(unit: str = "frames") -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn(f"{{task.completed}}/{{task.total}} {unit}"),
        TextColumn(f"{{task.fields[fps]:.0f}} {unit}/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )


def calibrate(
    source: Annotated[
        str,
        typer.Argument(
            help="Checkerboard video, folder of photos, or a quoted glob such as 'shots/*.jpg'"
        ),
    ],
    board: Annotated[
        str, typer.Option(help="Checkerboard inner corners COLSxROWS (9x6); ChArUco: squares")
    ],
    square: Annotated[str, typer.Option(help="Square side with its unit: 20mm, 2cm, 0.02m")],
    out: Annotated[Path, typer.Option(help="Camera JSON to write")],
    model: Annotated[CameraModel, typer.Option(help="Camera model")] = CameraModel.fisheye,
    max_frames: Annotated[int, typer.Option(help="Views used in the fit")] = 25,
    charuco: Annotated[
        str | None, typer.Option(help="ChArUco board: its dictionary, e.g. DICT_4X4_50")
    ] = None,
    marker: Annotated[
        str | None, typer.Option(help="ChArUco marker side with its unit: 15mm")
    ] = None,
) -> None:
    """Calibrate a camera from checkerboard (or ChArUco) views: a video, a folder of photos or
    a glob of photos; writes K, D and the image size as JSON."""
    import time

    from physid.vision.calibrate import board_views, calibrate_video, parse_board, parse_length

    pattern = parse_board(board)
    side = parse_length(square, "--square")
    marker_side = None if marker is None else parse_length(marker, "--marker")
    views = board_views(source)
    unit = "images" if views.names else "frames"
    start = time.perf_counter()
    with _progress(unit) as bar:
        task = bar.add_task(f"calibrate ({views.what})", total=None, fps=0.0)

        def tick(k: int, total: int) -> None:
            bar.update(task, completed=k, total=total, fps=k / (time.perf_counter() - start))

        report = calibrate_video(
            source,
            pattern,
            side,
            model.value,
            max_frames,
            progress=tick,
            charuco=charuco,
            marker=marker_side,
        )
    for k, v in sorted(report.frame_rms.items()):
        console.print(f"{report.label(k)}: reprojection RMS {v:.3f} px", markup=False)
    for k, v in sorted(report.rejected.items()):
        console.print(f"rejected {report.label(k)}: RMS {v:.3f} px (outlier)", markup=False)
    K = report.camera.K
    console.print(
        f"board in {report.detected}/{report.examined} examined {unit}; used "
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
    overlay: Annotated[
        Path | None, typer.Option(help="Overlay video to write (.webm plays in browsers)")
    ] = None,
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
    out: Annotated[Path, typer.Argument(help="Video to write (.avi MJPG, .mkv, .webm)")],
    kind: Annotated[
        RenderKind, typer.Option(help="A drop, a 9x6 checkerboard (20 mm) or a ChArUco board")
    ] = RenderKind.drop,
    frames: Annotated[int, typer.Option(help="Number of frames")] = 120,
    exposure: Annotated[float, typer.Option(help="Exposure (s), 0 = no motion blur")] = 0.0,
    model: Annotated[CameraModel, typer.Option(help="Camera model")] = CameraModel.fisheye,
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

    camera = action_camera() if model is CameraModel.fisheye else pinhole_camera()
    if kind is RenderKind.checkerboard:
        render_checkerboard_video(out, camera, (9, 6), 0.02, frames, seed=seed)
    elif kind is RenderKind.charuco:
        from physid.vision.render import render_charuco_video

        # 10x7 squares of 20 mm, 15 mm DICT_4X4_50 markers
        render_charuco_video(out, camera, (10, 7), 0.02, 0.015, n_frames=frames, seed=seed)
    else:
        scene = scene_from_spec(load_spec(rig))
        view = default_view(camera, scene, 0.19 if model is CameraModel.fisheye else 0.45)
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
