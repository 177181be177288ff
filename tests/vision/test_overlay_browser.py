"""Tracking overlays play in headless Chromium, embedded in a page as the report embeds them.

Opt-in (``pytest -m browser``): needs Debian's ``chromium``. The page's script records what
the ``<video>`` element did; ``--virtual-time-budget`` lets it play for 4 s of page time
before the DOM is dumped. The MPEG-4 part 2 file OpenCV writes as ``.mp4`` is the control: it
must fail the same way Chromium failed on the old overlays (``MEDIA_ERR_SRC_NOT_SUPPORTED``).
"""

import re

import numpy as np
import pytest

from physid.estimation.report import overlay_video, page
from physid.vision.camera import action_camera
from physid.vision.markers3d import (
    furuta_marker_frames,
    look_at,
    render_marker_video,
    track_markers,
)
from physid.vision.overlay import write_marker_overlay, write_overlay
from physid.vision.render import RenderOptions, default_view, drop_trajectory, render_drop
from physid.vision.scene import default_scene
from physid.vision.tracking import track_video

pytestmark = pytest.mark.browser

FLAGS = ("--autoplay-policy=no-user-gesture-required", "--virtual-time-budget=4000")
PROBE = """<p id="probe">pending</p><script>
const v = document.getElementById('overlay'), p = document.getElementById('probe');
v.addEventListener('error', () => { p.textContent = 'error ' + v.error.code; });
v.addEventListener('timeupdate', () => {
  if (v.currentTime > 0.1) p.textContent = `played ${v.videoWidth}x${v.videoHeight}`;
});
v.play();
</script>"""


def play(video, tmp_path, headless_dom) -> str:
    """What the page's <video> did with ``video``: 'played WxH' or 'error CODE'."""
    html = tmp_path / f"{video.stem}-{video.suffix[1:]}.html"
    html.write_text(page("overlay", overlay_video(video) + PROBE))
    dom, _ = headless_dom(html, *FLAGS)
    return re.search(r'<p id="probe">([^<]*)</p>', dom).group(1)


def test_drop_overlay_plays_and_mpeg4_part2_does_not(tmp_path, headless_dom):
    camera, scene = action_camera(), default_scene()
    view = default_view(camera, scene)
    traj = drop_trajectory(scene, v0=(0, 0, 2.0))
    clip = render_drop(tmp_path / "drop.avi", view, scene, traj, 48, RenderOptions(seed=1))
    result = track_video(clip, camera, scene)
    webm = write_overlay(result, camera, scene, tmp_path / "overlay.webm", 24.0)
    mp4 = write_overlay(result, camera, scene, tmp_path / "overlay.mp4", 24.0)
    assert play(webm, tmp_path, headless_dom) == f"played {camera.size[0]}x{camera.size[1]}"
    assert play(mp4, tmp_path, headless_dom) == "error 4"


def test_furuta_marker_overlay_plays(tmp_path, headless_dom):
    camera, fps, n = action_camera(800, 600), 30.0, 60
    t = np.arange(n) / fps
    fur = furuta_marker_frames(0.9 * np.sin(2 * np.pi * 0.5 * t), 0.4 + np.sin(3 * t))
    R, tcw = look_at([0.5, 0.1, 0.0], [0.15, 0.0, 0.0])
    clip = tmp_path / "furuta.mkv"
    render_marker_video(clip, camera, R, tcw, fur.centres, fur.normals, fur.ups, (3, 7), 0.035, fps)
    tracks = track_markers(clip, camera, (3, 7), 0.035)
    assert (~tracks.missing).sum() > n  # the overlay has markers to draw
    webm = write_marker_overlay(tracks, tmp_path / "overlay.webm", fps, tracks.uv, ["arm", "pend"])
    assert play(webm, tmp_path, headless_dom) == "played 800x600"
