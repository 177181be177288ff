"""Camera models, calibration, fiducial detection, tracking and pose streams."""
