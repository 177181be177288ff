"""Small real experiment folders for the pipeline tests: short pendulum encoder captures
(raw ``.bin`` bytes of the board protocol), written once per session."""

import io
import os
import shutil
from pathlib import Path

import pytest

from physid.rigs.pipeline.sample import EncoderScenario, capture_bytes, simulate_hinged_tree
from physid.spec import load_spec
from physid.vision.camera import action_camera

# 1.5 s released from 2.5 rad: ~1500 LM steps, enough to identify J to well under 1 %.
SHORT = EncoderScenario(duration=1.5, angles0=(2.5,), board_t0=3.0, seed=1)


def pendulum_capture(path: Path, scenario: EncoderScenario = SHORT) -> Path:
    """The pendulum on a rigid joint, simulated as the sample's (the default estimator's own
    integrator at 1e-4 s, ``sample.simulate_hinged_tree``), captured at 1 kHz."""
    spec = load_spec("pendulum")
    t_fine, angles, u, _, stride = simulate_hinged_tree(spec, scenario)
    path.write_bytes(
        capture_bytes(spec, t_fine[::stride], angles[::stride], u[::stride], scenario.board_t0)
    )
    return path


def pipeline_spec(path: Path) -> Path:
    """The built-in pendulum spec written to ``path`` without the h/2 refit of the std (issue
    24's default model error) and without the held-out tail's refit: these tests are about
    the pipeline, and the two refits would triple each identification (the fit itself, its
    verdict by prediction and its report are all still made)."""
    text = load_spec("pendulum").path.read_text()
    path.write_text(text.replace("[method]\n", "[method]\nmodel_error = false\nholdout = 0.0\n", 1))
    return path


@pytest.fixture(scope="session")
def capture(tmp_path_factory) -> Path:
    return pendulum_capture(tmp_path_factory.mktemp("captures") / "swing.bin")


@pytest.fixture
def pendulum_folder(tmp_path, capture) -> Path:
    """A folder without manifest: a rig spec, and two captures ``a.bin`` and ``b.bin``."""
    folder = tmp_path / "recordings"
    folder.mkdir()
    pipeline_spec(folder / "pendulum.toml")
    shutil.copy(capture, folder / "a.bin")
    shutil.copy(capture, folder / "b.bin")
    return folder


@pytest.fixture(scope="session")
def true_j() -> float:
    """The pendulum's true J (kg m^2) in the spec's [simulation.truth]."""
    return float(load_spec("pendulum").sections["simulation"]["truth"]["J"])


@pytest.fixture(scope="session")
def mixed_run(tmp_path_factory, capture) -> tuple[Path, Path, Path]:
    """``(folder, out, index)``: ``physid process`` (one local Dask worker, cross-validation
    on) of a folder with one good pendulum experiment and three bad ones: ``truncated`` (a
    capture cut inside its first frame), ``corrupt`` (a video of random bytes) and
    ``orphan`` (no rig spec). Run once per session: test_process.py checks the side-by-side
    report, and test_safety.py's finished report is its good experiment (the pendulum
    identification compiled and run once, not once in a worker and again in the tests)."""
    from rich.console import Console

    from physid.rigs.pipeline.process import ProcessOptions, process_folder

    root = tmp_path_factory.mktemp("mixed")
    folder = root / "mixed"
    folder.mkdir()
    (folder / "good.bin").write_bytes(capture.read_bytes())
    (folder / "cut.bin").write_bytes(capture.read_bytes()[:15])  # ends inside frame 0 (20 B)
    (folder / "broken.avi").write_bytes(os.urandom(4096))
    action_camera().save(folder / "camera.json")
    pipeline_spec(folder / "pendulum.toml")  # a spec file of the folder's, not the built-in
    (folder / "experiments.toml").write_text(
        '[experiments.good]\nrig = "pendulum.toml"\nencoder = "good.bin"\n'
        '[experiments.truncated]\nrig = "pendulum.toml"\nencoder = "cut.bin"\n'
        '[experiments.corrupt]\nrig = "ellipse_drop"\nvideo = "broken.avi"\n'
        'calibration = "camera.json"\n'
        '[experiments.orphan]\nencoder = "good.bin"\n'
    )
    out = root / "reports"
    console = Console(file=io.StringIO(), width=120)
    index = process_folder(folder, out, ProcessOptions(jobs=1), console)
    return folder, out, index
