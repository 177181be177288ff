"""Video I/O with presentation timestamps, and clear errors for bad input."""

import cv2
import numpy as np
import pytest

from physid.errors import InputError
from physid.vision.calibrate import BoardError, calibrate_video
from physid.vision.render import load_truth
from physid.vision.tracking import TrackingError, track_video
from physid.vision.video import VideoWriter, frames


def test_timestamps_come_from_the_container_not_index_times_fps(tmp_path):
    # Matroska stores 1 ms timestamps: at 240 fps the 4th frame is at 13 ms, not 12.5 ms.
    # A reader that computed index / fps would return 0.0125 here.
    path = tmp_path / "clip.mkv"
    with VideoWriter(path, 240.0, (64, 48)) as w:
        for k in range(6):
            w.write(np.full((48, 64), 20 * k, np.uint8))
    t = np.array([tk for _, tk, _ in frames(path)])
    assert len(t) == 6
    np.testing.assert_allclose(t, [0.0, 0.004, 0.008, 0.013, 0.017, 0.021], atol=1e-9)


def test_unreadable_video_names_file_and_frame(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    with pytest.raises(InputError, match=r"broken\.mp4: frame 0"):
        list(frames(bad))
    with pytest.raises(InputError, match="no such video"):
        list(frames(tmp_path / "missing.avi"))


def _copy_with(src, dst, edit):
    cap = cv2.VideoCapture(str(src))
    w = None
    while True:
        ok, img = cap.read()
        if not ok:
            break
        img = edit(img)
        if w is None:
            w = VideoWriter(dst, 240.0, (img.shape[1], img.shape[0]))
        w.write(img)
        if w is not None and cap.get(cv2.CAP_PROP_POS_FRAMES) >= 12:
            break
    w.close()
    return dst


def test_missing_reference_circle_is_reported(rig, sharp_clip, tmp_path):
    camera, scene, *_ = rig
    truth = load_truth(sharp_clip)
    x, y = np.round(truth["reference_px"][2]).astype(int)

    def paint_out(img):
        cv2.circle(img, (int(x), int(y)), 40, (225, 225, 225), -1)
        return img

    path = _copy_with(sharp_clip, tmp_path / "three_corners.avi", paint_out)
    with pytest.raises(TrackingError, match=r"three_corners\.avi: frame 0: fewer than 4 ref") as e:
        track_video(path, camera, scene, figure_dir=tmp_path / "figs")
    # the error names an annotated copy of the frame, and it was written there
    figure = tmp_path / "figs" / "three_corners.avi.detection.png"
    assert str(figure) in str(e.value)
    assert cv2.imread(str(figure)).shape == (*camera.size[::-1], 3)


def test_blank_video_has_no_circles(rig, sharp_clip, tmp_path):
    camera, scene, *_ = rig
    path = _copy_with(sharp_clip, tmp_path / "blank.avi", lambda img: np.full_like(img, 200))
    with pytest.raises(TrackingError, match=r"blank\.avi: frame 0: found 0 dark circles"):
        track_video(path, camera, scene)


def test_no_board_found(sharp_clip, tmp_path):
    with pytest.raises(BoardError, match=r"sharp\.avi: frames 0-59: the 9x6 board was found"):
        calibrate_video(sharp_clip, (9, 6), 0.02, max_examined=10)
