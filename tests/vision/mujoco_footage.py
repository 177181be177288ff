"""Test footage physid did not draw: an ellipse drop simulated by MuJoCo and rendered by
MuJoCo's OpenGL renderer (EGL, Mesa's llvmpipe on CPU), then seen through a fisheye lens.

Nothing here reuses physid's renderer (``vision/render.py``) or its contact model
(``dynamics/planar_contact.py``): the motion is MuJoCo's soft-contact physics with an
elliptic friction cone, the image is MuJoCo's rasterizer with its own lights, shadows and
multisampling (4x). What is chosen to be hard: a grey bar (~120 of 255) with the ground dots *on*
it, backgrounds from dark to light grey, a lighting gradient plus lens vignetting, gamma
encoding, motion blur integrated in linear light, sensor noise and H.264 (libx264 through
PyAV) or low-quality MJPG compression.

Fisheye: MuJoCo renders a pinhole image; every fisheye pixel is mapped through OpenCV's
fisheye model to the pinhole image (``cv2.remap`` after an area pre-filter). The pinhole
image's principal point is ``(W/2 - 1/2, H/2 - 1/2)`` in OpenCV's pixel convention (OpenGL
pixel centres sit at +1/2; the rows are flipped top-down by ``mujoco.Renderer``);
``test_independent_footage.py`` checks that on a rendered point.

World frame {S} (as in the rig spec): X right, Y up, in the plane of motion, which is
MuJoCo's x-z plane at y = 0; the camera looks along +y. Every circle's front face lies in
y = 0 exactly; the ellipse plate and the bar sit 0.3 mm behind it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

FPS = 240.0
# Half-thickness (m) of every printed disk and checker square: their side walls must not
# show (with 0.1 mm the corner circles' walls, seen obliquely, moved their centroids by
# 0.25 px); 5 um is still far above the depth buffer's 0.5 um at 0.3 m.
DISK = 5e-6
# MuJoCo's friction is a soft constraint: in sustained sliding it sits on the cone
# (|f_t|/f_n = mu), but through a short, hard impact the contact slips *inside* it: the
# mu = 0.5 drop's main impact (t = 0.118 s, 65 N) slips at 0.27 m/s with |f_t|/f_n = 0.42,
# not Coulomb's law. impratio 10 or 100, and harder solref/solimp, did not change that
# (force-weighted ratio of slipping contact 0.13-0.33 over the first 0.2 s). So the mu of
# a drop whose evidence is its impacts is not the mu MuJoCo was given (docs/vision.md).
IMPRATIO = 1
# Coulomb-like friction, an opt-in of ``mjcf`` (``coulomb=True``; the committed clips use
# MuJoCo's defaults above). MuJoCo's friction force is what would stop the slip over the
# friction rows' reference time constant, capped by the cone; an impact (~1.5 ms) is
# shorter than the default one, hence the slip inside the cone. impratio, a harder
# solref/solimp for all rows, a pyramidal cone and the noslip post-pass (10-100
# iterations) did not change that. A separate, fast reference for the friction rows alone
# does: ``solreffriction`` of an explicit contact pair at the fastest time constant MuJoCo
# accepts (2 timesteps). Checked in ``test_independent_footage.py``: a sliding contact then
# has |f_t|/f_n = mu and a contact inside the cone (nearly) sticks.
FRICTION_SOLREF = "0.0002 1"


def isolated(name: str, *args, **kwargs):
    """``name(*args, **kwargs)`` of this module, run in a fresh Python process.

    Mesa's llvmpipe (behind EGL) and CasADi's libc++ cannot share a process: creating the
    OpenGL context after ``import casadi`` aborts in libc++abi ("recursive
    initialization"), and the test session imports CasADi long before it reaches the
    vision tests. Arguments and result travel pickled."""
    import pickle
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.pkl", Path(tmp) / "out.pkl"
        inp.write_bytes(pickle.dumps((name, args, kwargs)))
        code = (
            "import pickle, sys; sys.path.insert(0, sys.argv[1]); import mujoco_footage as m; "
            "n, a, k = pickle.loads(open(sys.argv[2], 'rb').read()); "
            "open(sys.argv[3], 'wb').write(pickle.dumps(getattr(m, n)(*a, **k)))"
        )
        here = str(Path(__file__).parent)
        env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
        run = subprocess.run(
            [sys.executable, "-c", code, here, str(inp), str(out)],
            capture_output=True,
            text=True,
            env=env,
        )
        if run.returncode != 0:
            raise RuntimeError(f"{name} failed in a subprocess:\n{run.stderr[-3000:]}")
        return pickle.loads(out.read_bytes())


_GL_PROBLEM: list = []


def gl_problem() -> str | None:
    """Why MuJoCo cannot render offscreen here (None if it can); checked once, in a
    subprocess (see ``isolated``)."""
    if not _GL_PROBLEM:
        try:
            _GL_PROBLEM.append(isolated("_gl_problem_here"))
        except RuntimeError as exc:
            _GL_PROBLEM.append(str(exc).splitlines()[-1])
    return _GL_PROBLEM[0]


def _gl_problem_here() -> str | None:
    try:
        import mujoco
    except ImportError as exc:  # pragma: no cover - a test-only dependency
        return f"mujoco is not installed ({exc}); pip install mujoco"
    try:
        model = mujoco.MjModel.from_xml_string("<mujoco><worldbody/></mujoco>")
        with mujoco.Renderer(model, 8, 8) as r:
            r.render()
    except Exception as exc:  # noqa: BLE001
        return (
            f"MuJoCo cannot open an offscreen OpenGL context with MUJOCO_GL="
            f"{os.environ.get('MUJOCO_GL')} ({type(exc).__name__}: {exc}); install the "
            "distribution's EGL and Mesa packages (Debian: apt-get install libegl1 "
            "libgl1-mesa-dri)"
        )
    return None


def disk_centroid_offset(W: int = 320, H: int = 200, f: float = 300.0) -> tuple[float, float]:
    """Centroid (px) of a black disk on the optical axis of a MuJoCo pinhole render, minus
    (W/2 - 1/2, H/2 - 1/2): zero if the principal point is where ``FisheyeView`` puts it."""
    import mujoco

    fovy = np.degrees(2 * np.arctan(H / 2 / f))
    xml = f"""<mujoco><visual><global offwidth="{W}" offheight="{H}"/>
      <headlight ambient="1 1 1" diffuse="0 0 0"/></visual><worldbody>
      <camera name="c" pos="0 -0.3 0" xyaxes="1 0 0 0 0 1" fovy="{fovy}"/>
      <geom type="box" size="1 0.001 1" pos="0 0.01 0" rgba="1 1 1 1"/>
      <geom type="cylinder" size="0.02 {DISK}" pos="0 0 0" zaxis="0 1 0" rgba="0 0 0 1"/>
      </worldbody></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    with mujoco.Renderer(model, H, W) as r:
        r.update_scene(data, camera="c")
        img = r.render()[..., 0].astype(float)
    w = 255.0 - img
    ys, xs = np.mgrid[:H, :W]
    cx, cy = (w * xs).sum() / w.sum(), (w * ys).sum() / w.sum()
    return float(cx - (W / 2 - 0.5)), float(cy - (H / 2 - 0.5))


# --------------------------------------------------------------------------- scene geometry
@dataclass(frozen=True)
class Rig:
    """The independent rig (SI): a 0.5 x 0.3 m workspace, a 0.42 m sloped bar."""

    reference: tuple = ((0.0, 0.0), (0.5, 0.0), (0.5, 0.3), (0.0, 0.3))
    reference_radius: float = 0.008
    bar_start: tuple = (0.03, 0.13)  # left end of the contact surface (m)
    bar_length: float = 0.42
    bar_alpha: float = -0.15  # rad: falls to the right
    bar_height: float = 0.03  # front face, below the contact surface
    ground_inset: float = 0.03  # ground dots from each end of the bar (along it)
    ground_offset: float = 0.014  # dots' centres below the contact surface
    ground_radius: float = 0.006
    a: float = 0.05
    b: float = 0.025
    mass: float = 0.064
    j_over_m: float = 7.56e-4
    markers: tuple = ((-0.025, 0.0), (0.025, 0.0))
    marker_radius: float = 0.005

    @property
    def tangent(self) -> np.ndarray:
        return np.array([np.cos(self.bar_alpha), np.sin(self.bar_alpha)])

    @property
    def normal(self) -> np.ndarray:
        return np.array([-np.sin(self.bar_alpha), np.cos(self.bar_alpha)])

    @property
    def bar_end(self) -> np.ndarray:
        return np.array(self.bar_start) + self.bar_length * self.tangent

    def ground_dots(self) -> np.ndarray:
        p0, t, n = np.array(self.bar_start), self.tangent, self.normal
        ends = [self.ground_inset, self.bar_length - self.ground_inset]
        return np.array([p0 + s * t - self.ground_offset * n for s in ends])

    def spec_text(self, mu: float) -> str:
        """A physid rig spec (TOML) for this rig; ``mu`` only sets the spec's nominal value."""
        mm = lambda v: f"{v * 1e3:.6g}"  # noqa: E731
        pts = lambda p: "[" + ", ".join(f"[{mm(x)}, {mm(y)}]" for x, y in p) + "]"  # noqa: E731
        start = np.array(self.bar_start)
        return f"""[rig]
name = "independent ellipse drop"
model = "ellipse_drop"

[fixed]
a = {{ value = {mm(self.a)}, unit = "mm" }}
b = {{ value = {mm(self.b)}, unit = "mm" }}
m = {{ value = {self.mass * 1e3:.6g}, unit = "g" }}
ground_x0 = {{ value = {float(start[0])!r}, unit = "m" }}
ground_y0 = {{ value = {float(start[1])!r}, unit = "m" }}
ground_alpha = {{ value = {self.bar_alpha!r}, unit = "rad" }}
mu = {{ value = {mu}, unit = "1" }}
j_over_m = {{ value = {self.j_over_m * 1e6:.6g}, unit = "mm^2" }}
restitution = {{ value = 0.2, unit = "1" }}
fps = {{ value = {FPS:g}, unit = "Hz" }}

[parameters]
inertia_ratio = {{ initial = 400, lower = 1, upper = 100000, unit = "mm^2" }}
friction = {{ initial = 0.5, lower = 0, upper = 2, unit = "1" }}

[method]
h_max = {{ value = 1, unit = "ms" }}

[scene]
reference_circles = {{ value = {pts(self.reference)}, unit = "mm" }}
reference_radius = {{ value = {mm(self.reference_radius)}, unit = "mm" }}
ground_circles = {{ value = {pts(self.ground_dots())}, unit = "mm" }}
ground_radius = {{ value = {mm(self.ground_radius)}, unit = "mm" }}
ground_surface_offset = {{ value = {mm(self.ground_offset)}, unit = "mm" }}
# the bar's contact surface ends {mm(self.ground_inset)} mm beyond each ground circle
ground_extent = {{ value = [{mm(self.ground_inset)}, {mm(self.ground_inset)}], unit = "mm" }}

[markers]
positions = {{ value = {pts(self.markers)}, unit = "mm" }}
radius = {{ value = {mm(self.marker_radius)}, unit = "mm" }}
"""


@dataclass(frozen=True)
class Look:
    """Appearance of one clip: reflectances (0-1) of backdrop, bar, plywood and ink; the
    key light's direction and the ambient level; vignetting (relative fall-off at the image
    corner); sensor noise (grey levels); exposure (s) and its sub-samples; codec (``h264``
    with ``crf``, or ``mjpg`` with ``quality``)."""

    backdrop: float = 0.55
    bar: float = 0.45
    plywood: float = 0.75
    ink: float = 0.06
    light_pos: tuple = (-0.15, -0.35, 0.55)  # MuJoCo world (x, depth, height), m
    ambient: float = 0.3
    diffuse: float = 0.9
    falloff: float = 2.0  # quadratic attenuation (1/m^2): the lighting gradient
    vignette: float = 0.45
    noise: float = 2.5
    exposure: float = 1 / 480
    blur_samples: int = 5
    codec: str = "h264"
    crf: int = 20
    quality: int = 60
    jpeg: int = 0  # JPEG quality of a pass before the codec (0: none), as a re-encoded clip
    seed: int = 0


@dataclass(frozen=True)
class CameraSetup:
    """Fisheye intrinsics (OpenCV model) and the camera's pose: optical centre ``centre``
    (world, m) and a small tilt (rotation vector, rad) about the square-on view."""

    K: tuple = ((600.0, 0.0, 642.7), (0.0, 601.2, 356.8), (0.0, 0.0, 1.0))
    D: tuple = (0.045, -0.012, 0.004, -0.0008)
    size: tuple = (1280, 720)
    centre: tuple = (0.25, 0.15, 0.26)  # X, Y in {S}, distance in front of the plane
    tilt: tuple = (0.05, -0.07, 0.02)
    # px of the MuJoCo render: the fisheye's own at the centre, more towards the edge
    # (llvmpipe on a shared CPU: ~0.3 s per 1.9 Mpx render, the budget of a test)
    pinhole_f: float = 600.0
    pinhole_size: tuple = (1700, 1110)

    def camera(self):
        from physid.vision.camera import Camera

        return Camera("fisheye", np.array(self.K), np.array(self.D), self.size)

    def plane_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """(R, t) with p_cam = R [X, Y, 0] + t, OpenCV camera axes."""
        base = np.array([[1.0, 0, 0], [0, -1.0, 0], [0, 0, -1.0]])
        R = cv2.Rodrigues(np.array(self.tilt, float))[0] @ base
        c = np.array(self.centre, float)
        return R, -R @ c


# --------------------------------------------------------------------------- MJCF
def _plate_mesh(a: float, b: float, depth: float, n: int = 160) -> str:
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    ring = np.column_stack([a * np.cos(ang), b * np.sin(ang)])
    verts = [(x, y0, z) for y0 in (0.0, depth) for x, z in ring]
    return " ".join(f"{v:.7g}" for p in verts for v in p)


def mjcf(rig: Rig, look: Look, setup: CameraSetup, mu: float, coulomb: bool = False) -> str:
    """The MJCF of the rig for friction ``mu``."""
    ink = f"{look.ink} {look.ink} {look.ink} 1"
    grey = lambda v: f"{v} {v} {v} 1"  # noqa: E731
    R, t = setup.plane_pose()
    # camera: optical centre in MuJoCo's world (x, y, z) = (X, -distance, Y); its axes
    # from the plane pose: OpenCV x, y, z columns of R^T in {S} coordinates
    to_mj = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])  # {S}+depth -> MuJoCo
    axes = (to_mj @ R.T).T  # rows: camera x, y, z in MuJoCo world
    cam_pos = to_mj @ (-R.T @ t)
    xy = np.r_[axes[0], -axes[1]]
    fovy = np.degrees(2 * np.arctan(setup.pinhole_size[1] / 2 / setup.pinhole_f))
    W, H = setup.pinhole_size
    circles = []
    for k, (x, y) in enumerate(rig.reference):
        circles.append(
            f'<geom name="ref{k}" type="cylinder" size="{rig.reference_radius} {DISK}" '
            f'pos="{x} {DISK} {y}" zaxis="0 1 0" rgba="{ink}" contype="0" conaffinity="0"/>'
        )
    for k, (x, y) in enumerate(rig.ground_dots()):
        circles.append(
            f'<geom name="gnd{k}" type="cylinder" size="{rig.ground_radius} {DISK}" '
            f'pos="{x} {DISK} {y}" zaxis="0 1 0" rgba="{ink}" contype="0" conaffinity="0"/>'
        )
    ta, na = rig.tangent, rig.normal
    mid = np.array(rig.bar_start) + 0.5 * rig.bar_length * ta - 0.5 * rig.bar_height * na
    bar_depth = 0.03
    markers = "\n".join(
        f'<geom type="cylinder" size="{rig.marker_radius} {DISK}" pos="{x} {DISK} {y}" '
        f'zaxis="0 1 0" rgba="{ink}" contype="0" conaffinity="0" mass="0"/>'
        for x, y in rig.markers
    )
    J = rig.mass * rig.j_over_m
    lp = np.array(look.light_pos, float)
    ld = np.array([0.25, 0.0, 0.15]) - lp
    ld /= np.linalg.norm(ld)
    nl = "\n"
    # coulomb: the ellipse collides through an explicit pair only, whose friction rows have
    # their own fast reference (FRICTION_SOLREF); normal rows as the defaults below
    own_pair = ' contype="0" conaffinity="0"' if coulomb else ""
    pair = (
        f"""
  <contact>
    <pair geom1="contact" geom2="bar" condim="3" friction="{mu} {mu} 0 0 0"
          solref="0.002 0.3" solimp="0.95 0.99 0.0005" solreffriction="{FRICTION_SOLREF}"/>
  </contact>"""
        if coulomb
        else ""
    )
    return f"""<mujoco model="independent ellipse drop">
  <option timestep="1e-4" gravity="0 0 -9.81" cone="elliptic" impratio="{IMPRATIO}"
          integrator="implicitfast"/>
  <visual>
    <global offwidth="{W}" offheight="{H}"/>
    <quality shadowsize="4096" offsamples="4"/>
    <headlight ambient="{look.ambient} {look.ambient} {look.ambient}" diffuse="0.15 0.15 0.15"
               specular="0 0 0"/>
    <map znear="0.01"/>
  </visual>
  <asset>
    <mesh name="plate" vertex="{_plate_mesh(rig.a, rig.b, 0.0001)}"/>
  </asset>
  <default>
    <geom solref="0.002 0.3" solimp="0.95 0.99 0.0005" condim="3"/>
  </default>
  <worldbody>
    <light pos="{lp[0]} {lp[1]} {lp[2]}" dir="{ld[0]} {ld[1]} {ld[2]}" cutoff="85"
           exponent="2" attenuation="0.4 0 {look.falloff}"
           diffuse="{look.diffuse} {look.diffuse} {look.diffuse}" specular="0 0 0"
           castshadow="false"/>
    <camera name="cam" pos="{cam_pos[0]} {cam_pos[1]} {cam_pos[2]}"
            xyaxes="{" ".join(f"{v:.9g}" for v in xy)}" fovy="{fovy:.9g}"/>
    <geom name="backdrop" type="box" size="1.2 0.005 0.8" pos="0.25 0.0054 0.15"
          rgba="{grey(look.backdrop)}" contype="0" conaffinity="0"/>
    {nl.join(circles)}
    <geom name="bar" type="box" size="{rig.bar_length / 2} {bar_depth / 2} {rig.bar_height / 2}"
          pos="{mid[0]} {0.0003 + bar_depth / 2} {mid[1]}"
          xyaxes="{ta[0]} 0 {ta[1]} 0 1 0" rgba="{grey(look.bar)}" friction="{mu} 0 0"/>
    <body name="ellipse">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="y" type="slide" axis="0 0 1"/>
      <joint name="theta" type="hinge" axis="0 -1 0"/>
      <inertial pos="0 0 0" mass="{rig.mass}" diaginertia="{J} {J} {J}"/>
      <geom name="contact" type="ellipsoid" size="{rig.a} 0.006 {rig.b}" pos="0 0.0063 0"
            friction="{mu} 0 0" group="3" mass="0"{own_pair}/>
      <geom type="mesh" mesh="plate" pos="0 0.0002 0" rgba="{grey(look.plywood)}"
            contype="0" conaffinity="0" mass="0"/>
      {markers}
    </body>
  </worldbody>{pair}
</mujoco>
"""


# --------------------------------------------------------------------------- physics
@dataclass(frozen=True)
class Throw:
    """Initial pose (x, y m, theta rad) and velocity; with these the ellipse bounces on
    the bar at ~67 ms, slides and rolls, and leaves the bar's end at 0.35-0.43 s."""

    q0: tuple = (0.08, 0.22, 0.6)
    v0: tuple = (0.7, -0.5, 0.0)
    duration: float = 0.5


@dataclass
class Motion:
    """MuJoCo trajectory at its own 0.1 ms step: times (s) and poses (x, y, theta). With
    ``v0`` (m/s, rad/s), times before the first step follow the free flight that led to
    the throw's state, so that the first frame's exposure, which starts before t = 0, is
    blurred like any other; without it (the clips committed first) they are clamped to
    the first pose (frame 0 of a fast throw is then 0.3 mm off its mid-exposure truth)."""

    t: np.ndarray
    q: np.ndarray
    contact: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    v0: np.ndarray | None = None

    def __call__(self, times) -> np.ndarray:
        times = np.atleast_1d(np.asarray(times, float))
        q = np.column_stack([np.interp(times, self.t, self.q[:, i]) for i in range(3)])
        early = times < self.t[0]
        if self.v0 is not None and early.any():
            dt = (times[early] - self.t[0])[:, None]
            q[early] = self.q[0] + self.v0 * dt + 0.5 * np.array([0.0, -9.81, 0.0]) * dt**2
        return q


def simulate(model, throw: Throw, start: float = 0.0, flight: bool = False) -> Motion:
    """Integrate MuJoCo from the throw's state; poses recorded at every step; ``flight``:
    free flight before it (``Motion.v0``)."""
    import mujoco

    data = mujoco.MjData(model)
    data.qpos[:] = throw.q0
    data.qvel[:] = throw.v0
    mujoco.mj_forward(model, data)
    steps = int(round((throw.duration + start + 0.02) / model.opt.timestep))
    q = np.empty((steps + 1, 3))
    touch = np.zeros(steps + 1, bool)
    q[0] = data.qpos
    for k in range(steps):
        mujoco.mj_step(model, data)
        q[k + 1] = data.qpos
        touch[k + 1] = data.ncon > 0
    v0 = np.array(throw.v0, float) if flight else None
    return Motion(np.arange(steps + 1) * model.opt.timestep, q, touch, v0)


def contact_record(model, throw: Throw) -> np.ndarray:
    """Per MuJoCo step in contact: (t s, f_n N, |f_t| N, slip m/s) of the ellipse on the bar.

    The force is the constraint's generalized force on the ellipse (x, y slides: the force
    at its centre) in the contact frame; the slip is the tangential velocity of the
    ellipse's material point at the contact after the step (the velocity the step's
    constraint acts on)."""
    import mujoco

    data = mujoco.MjData(model)
    data.qpos[:] = throw.q0
    data.qvel[:] = throw.v0
    mujoco.mj_forward(model, data)
    body = model.body("ellipse").id
    jac = np.zeros((3, model.nv))
    rows = []
    for _ in range(int(round(throw.duration / model.opt.timestep))):
        mujoco.mj_step(model, data)
        if data.ncon == 0:
            continue
        c = data.contact[0]
        frame = c.frame.reshape(3, 3)  # rows: normal (geom1 -> geom2), two tangents
        force = np.array([data.qfrc_constraint[0], 0.0, data.qfrc_constraint[1]])
        sign = -1.0 if model.geom_bodyid[c.geom1] == body else 1.0
        mujoco.mj_jac(model, data, jac, None, c.pos, body)
        v = jac @ data.qvel
        rows.append(
            (
                data.time,
                sign * frame[0] @ force,
                np.linalg.norm(frame[1:] @ force),
                np.linalg.norm(frame[1:] @ v),
            )
        )
    return np.array(rows).reshape(-1, 4)


# --------------------------------------------------------------------------- images
class FisheyeView:
    """MuJoCo's pinhole render resampled into the fisheye camera's pixels."""

    def __init__(self, model, setup: CameraSetup):
        import mujoco

        self.setup = setup
        W, H = setup.pinhole_size
        self.renderer = mujoco.Renderer(model, H, W)
        self.option = mujoco.MjvOption()
        self.option.geomgroup[3] = 0  # the contact ellipsoid is not drawn
        cam = setup.camera()
        w, h = setup.size
        u, v = np.meshgrid(np.arange(w, dtype=float), np.arange(h, dtype=float))
        n = cam.normalize(np.column_stack([u.ravel(), v.ravel()]))
        f = setup.pinhole_f
        self.map_x = (f * n[:, 0] + (W / 2 - 0.5)).reshape(h, w).astype(np.float32)
        self.map_y = (f * n[:, 1] + (H / 2 - 0.5)).reshape(h, w).astype(np.float32)
        # pinhole px per fisheye px, for the area pre-filter (largest at the image edge)
        self.prefilter = 0.5 * f / float(cam.K[0, 0])
        r = np.hypot(u - cam.K[0, 2], v - cam.K[1, 2]) / np.hypot(w / 2, h / 2)
        self.r2 = (r**2).astype(np.float32)

    def linear(self, model, data) -> np.ndarray:
        """Linear-light grey image (0-1) of the pinhole render."""
        self.renderer.update_scene(data, camera="cam", scene_option=self.option)
        rgb = self.renderer.render().astype(np.float32) / 255.0
        grey = rgb @ np.array([0.299, 0.587, 0.114], np.float32)
        return grey**2.2

    def to_fisheye(self, linear: np.ndarray, look: Look) -> np.ndarray:
        """Fisheye image in linear light, vignetted."""
        img = cv2.GaussianBlur(linear, (0, 0), self.prefilter)
        out = cv2.remap(
            img, self.map_x, self.map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
        out = cv2.GaussianBlur(out, (0, 0), 0.5)  # lens and sensor blur
        return out * (1.0 - look.vignette * self.r2)


class Encoder:
    """Writes 8-bit grey frames as H.264 (libx264 in .mp4, through PyAV) or MJPG (.avi)."""

    def __init__(self, path: Path, look: Look, size):
        self.path, self.look = path, look
        if look.codec == "h264":
            import av

            self.container = av.open(str(path), "w")
            s = self.container.add_stream("libx264", rate=int(FPS))
            s.width, s.height, s.pix_fmt = size[0], size[1], "yuv420p"
            s.options = {"crf": str(look.crf), "preset": "veryfast"}
            self.stream = s
        else:
            from physid.vision.video import VideoWriter

            self.writer = VideoWriter(path, FPS, size, look.quality)

    def write(self, grey8: np.ndarray) -> None:
        if self.look.codec == "h264":
            import av

            bgr = cv2.cvtColor(grey8, cv2.COLOR_GRAY2BGR)
            frame = av.VideoFrame.from_ndarray(bgr, format="bgr24")
            for p in self.stream.encode(frame):
                self.container.mux(p)
        else:
            self.writer.write(grey8)

    def close(self) -> None:
        if self.look.codec == "h264":
            for p in self.stream.encode():
                self.container.mux(p)
            self.container.close()
        else:
            self.writer.close()


def _jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    if quality <= 0:
        return img
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    return cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)


def video_suffix(look: Look) -> str:
    return ".mp4" if look.codec == "h264" else ".avi"


@dataclass(frozen=True)
class Clip:
    path: Path
    spec: Path
    camera: object
    truth: dict


def render_drop(
    folder: Path,
    name: str,
    mu: float,
    look: Look = Look(),
    throw: Throw = Throw(),
    rig: Rig = Rig(),
    setup: CameraSetup = CameraSetup(),
    n_frames: int | None = None,
    start: float = 0.0,
    coulomb: bool = False,
) -> Clip:
    """Simulate and render one drop: ``<name>.mp4|avi``, ``<name>.toml`` (rig spec),
    ``<name>.camera.json`` and ``<name>.truth.npz`` (t, poses at mid-exposure, marker and
    circle projections, the MuJoCo trajectory). ``start`` (s) skips the first frames."""
    import mujoco

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = mujoco.MjModel.from_xml_string(mjcf(rig, look, setup, mu, coulomb))
    # the Coulomb-like clip came after the frame-0 fix (Motion.v0); the others before it
    motion = simulate(model, throw, start, flight=coulomb)
    n = n_frames if n_frames is not None else int(round(throw.duration * FPS))
    t = start + np.arange(n) / FPS
    view = FisheyeView(model, setup)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(look.seed)
    path = folder / f"{name}{video_suffix(look)}"
    enc = Encoder(path, look, setup.size)
    offsets = (np.arange(look.blur_samples) + 0.5) / look.blur_samples - 0.5
    if look.exposure <= 0:
        offsets = np.zeros(1)
    try:
        for tk in t:
            acc = None
            for q in motion(tk + offsets * look.exposure):
                data.qpos[:] = q
                mujoco.mj_kinematics(model, data)
                mujoco.mj_camlight(model, data)  # camera and light poses
                img = view.linear(model, data)
                acc = img if acc is None else acc + img
            lin = view.to_fisheye(acc / len(offsets), look)
            grey = 255.0 * np.clip(lin, 0, 1) ** (1 / 2.2)
            grey += rng.standard_normal(grey.shape).astype(np.float32) * look.noise
            enc.write(_jpeg(np.clip(np.rint(grey), 0, 255).astype(np.uint8), look.jpeg))
    finally:
        enc.close()
        view.renderer.close()
    camera = setup.camera()
    camera.save(folder / f"{name}.camera.json")
    spec = folder / f"{name}.toml"
    spec.write_text(rig.spec_text(mu))
    truth = _truth(rig, setup, motion, t) | {"mu": mu}
    np.savez(folder / f"{name}.truth.npz", **truth)
    return Clip(path, spec, camera, truth)


def _intervals(t: np.ndarray, on: np.ndarray) -> np.ndarray:
    edges = np.diff(np.r_[0, on.astype(int), 0])
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    return np.column_stack([t[starts], t[ends]]) if len(starts) else np.zeros((0, 2))


def _truth(rig: Rig, setup: CameraSetup, motion: Motion, t: np.ndarray) -> dict:
    cam = setup.camera()
    R, tv = setup.plane_pose()
    rvec = cv2.Rodrigues(R)[0].ravel()

    def project(xy):
        xy = np.asarray(xy, float).reshape(-1, 2)
        return cam.project(np.column_stack([xy, np.zeros(len(xy))]), rvec, tv)

    poses = motion(t)
    mk = np.array(rig.markers)
    c, s = np.cos(poses[:, 2]), np.sin(poses[:, 2])
    world = poses[:, None, :2] + np.stack(
        [
            c[:, None] * mk[:, 0] - s[:, None] * mk[:, 1],
            s[:, None] * mk[:, 0] + c[:, None] * mk[:, 1],
        ],
        axis=-1,
    )
    return {
        "t": t,
        "pts": t - t[0],
        "poses": poses,
        "marker_px": project(world.reshape(-1, 2)).reshape(len(t), 2, 2),
        "reference_px": project(rig.reference),
        "ground_px": project(rig.ground_dots()),
        # contact at MuJoCo's 0.1 ms steps, as [start, end] intervals (s)
        "contact_intervals": _intervals(motion.t, motion.contact),
        "j_over_m": rig.j_over_m,
        "K": cam.K,
        "D": cam.D,
    }


# --------------------------------------------------------------------------- checkerboard
def board_mjcf(setup: CameraSetup, pattern=(9, 6), square=0.02, look: Look = Look()) -> str:
    """A checkerboard of ``pattern`` inner corners on a white plate with a one-square
    margin, as a mocap body (its pose set per frame), in front of a grey wall."""
    cols, rows = pattern
    R, t = setup.plane_pose()
    to_mj = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])
    axes = (to_mj @ R.T).T
    cam_pos = to_mj @ (-R.T @ t)
    xy = np.r_[axes[0], -axes[1]]
    W, H = setup.pinhole_size
    fovy = np.degrees(2 * np.arctan(H / 2 / setup.pinhole_f))
    geoms = []
    for c in range(-1, cols):
        for r in range(-1, rows):
            if (c + r) % 2:
                continue
            x, y = (c + 0.5) * square, (r + 0.5) * square
            geoms.append(
                f'<geom type="box" size="{square / 2} {square / 2} {DISK}" '
                f'pos="{x} {y} {DISK}" rgba="0.03 0.03 0.03 1"/>'
            )
    cx, cy = (cols - 1) * square / 2, (rows - 1) * square / 2
    pw, ph = (cols + 3) * square / 2, (rows + 3) * square / 2
    nl = "\n"
    return f"""<mujoco model="checkerboard">
  <visual>
    <global offwidth="{W}" offheight="{H}"/>
    <quality offsamples="8"/>
    <headlight ambient="{look.ambient} {look.ambient} {look.ambient}" diffuse="0.3 0.3 0.3"
               specular="0 0 0"/>
    <map znear="0.01"/>
  </visual>
  <worldbody>
    <light pos="0.1 -0.4 0.5" dir="0.2 0.6 -0.6" diffuse="0.6 0.6 0.6" specular="0 0 0"
           castshadow="false"/>
    <camera name="cam" pos="{cam_pos[0]} {cam_pos[1]} {cam_pos[2]}"
            xyaxes="{" ".join(f"{v:.9g}" for v in xy)}" fovy="{fovy:.9g}"/>
    <geom type="box" size="3 0.01 3" pos="0.25 0.5 0.15" rgba="0.35 0.35 0.35 1"/>
    <body name="board" mocap="true">
      <geom type="box" size="{pw} {ph} 0.0005" pos="{cx} {cy} 0.0008" rgba="0.9 0.9 0.9 1"/>
      {nl.join(geoms)}
    </body>
  </worldbody>
</mujoco>
"""


def board_views(n: int, setup: CameraSetup, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` board poses (R, t: board -> OpenCV camera, m) that sweep the image at
    0.18-0.32 m with tilts up to ~40 degrees about both axes (random, not a Lissajous
    sweep like ``vision.render.board_poses``)."""
    rng = np.random.default_rng(seed)
    cam = setup.camera()
    out = []
    while len(out) < n:
        z = rng.uniform(0.18, 0.32)
        u = rng.uniform(0.12, 0.88) * cam.size[0]
        v = rng.uniform(0.12, 0.88) * cam.size[1]
        ray = cam.normalize(np.array([[u, v]]))[0]
        centre = np.array([ray[0] * z, ray[1] * z, z])
        tilt = rng.uniform(-0.7, 0.7, 3) * np.array([1.0, 1.0, 0.5])
        R = cv2.Rodrigues(tilt)[0]
        t = centre - R @ np.array([0.08, 0.05, 0.0])
        corners = cam.project((R @ _board_points((9, 6), 0.02).T).T + t)
        # keep views whose board (with its margin) stays inside the image
        lo, hi = corners.min(axis=0), corners.max(axis=0)
        if lo.min() > 30 and hi[0] < cam.size[0] - 30 and hi[1] < cam.size[1] - 30:
            out.append((R, t))
    return out


def _board_points(pattern, square) -> np.ndarray:
    cols, rows = pattern
    gx, gy = np.meshgrid(np.arange(cols), np.arange(rows))
    return np.column_stack([gx.ravel(), gy.ravel(), np.zeros(cols * rows)]) * square


def render_board_video(
    folder: Path,
    name: str = "board",
    n_frames: int = 30,
    setup: CameraSetup = CameraSetup(),
    look: Look = Look(codec="mjpg", quality=90, noise=2.0),
    seed: int = 0,
) -> tuple[Path, np.ndarray]:
    """A 9x6, 20 mm checkerboard video through the fisheye; returns the path and the true
    projected inner corners [n_frames, 54, 2]."""
    import mujoco

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = mujoco.MjModel.from_xml_string(board_mjcf(setup, look=look))
    data = mujoco.MjData(model)
    view = FisheyeView(model, setup)
    rng = np.random.default_rng(seed)
    Rp, tp = setup.plane_pose()
    to_mj = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])
    path = folder / f"{name}{video_suffix(look)}"
    enc = Encoder(path, look, setup.size)
    cam = setup.camera()
    truth = []
    try:
        for R, t in board_views(n_frames, setup, seed):
            Rw = to_mj @ Rp.T @ R
            data.mocap_pos[0] = to_mj @ Rp.T @ (t - tp)
            quat = np.zeros(4)
            mujoco.mju_mat2Quat(quat, Rw.ravel())
            data.mocap_quat[0] = quat
            mujoco.mj_forward(model, data)
            lin = view.to_fisheye(view.linear(model, data), look)
            grey = 255.0 * np.clip(lin, 0, 1) ** (1 / 2.2)
            grey += rng.standard_normal(grey.shape).astype(np.float32) * look.noise
            enc.write(np.clip(np.rint(grey), 0, 255).astype(np.uint8))
            truth.append(cam.project((R @ _board_points((9, 6), 0.02).T).T + t))
    finally:
        enc.close()
        view.renderer.close()
    return path, np.array(truth)


# --------------------------------------------------------------------------- committed clips
# The clips in tests/data/independent/: three full drops for the acceptance (slow tests)
# and a short one for the default run. Backgrounds from dark to light grey, the bar lighter
# or darker than the sheet, H.264 at crf 20-23 (x264's "visually lossless" is ~18; an
# action camera's 60-100 Mbit/s is about that; crf 28 left the static circles 0.15-0.3 px
# off on the dark sheet, where 8-bit contrast is lowest), one clip re-encoded from JPEGs
# of quality 60.
# name: (mu, look, throw, coulomb). drop2, drop3 and drop5 have MuJoCo's default (soft)
# contact; drop5c is mu = 0.5 with Coulomb-like friction (mjcf(coulomb=True)), thrown to
# land nearly flat and fast along the bar so that it slides (with that contact the default
# throw mostly rolls and sticks at mu = 0.5). The issue 27 acceptance reads mu = 0.5 on
# drop5c; drop5's mu is the measured limitation of reading the soft contact's mu
# (docs/vision.md). Coulomb-like mu = 0.2 and 0.3 drops were tried (docs/vision.md): not
# committed.
CLIPS = {
    "drop2": (0.2, Look(backdrop=0.55, crf=20, seed=1), Throw(), False),
    "drop3": (
        0.3,
        Look(backdrop=0.3, bar=0.42, plywood=0.6, jpeg=60, crf=20, seed=2),
        Throw(),
        False,
    ),
    "drop5": (0.5, Look(backdrop=0.8, bar=0.45, crf=23, seed=3), Throw(), False),
    "drop5c": (
        0.5,
        Look(backdrop=0.8, bar=0.45, crf=23, seed=3),
        Throw((0.08, 0.19, -0.15), (1.1, -0.5, -4.0)),
        True,
    ),
}
SHORT = ("short", 0.3, Look(backdrop=0.3, bar=0.42, plywood=0.6, crf=18, seed=7), 24, 0.05)


def write_committed(folder: Path, *names: str) -> None:
    """Render the committed clips ``names`` (all if none) into ``folder`` (minutes:
    llvmpipe)."""
    for name, (mu, look, throw, coulomb) in CLIPS.items():
        if not names or name in names:
            render_drop(folder, name, mu, look, throw, coulomb=coulomb)
            print(name, flush=True)
    name, mu, look, n, start = SHORT
    if not names or name in names:
        render_drop(folder, name, mu, look, n_frames=n, start=start)


if __name__ == "__main__":
    import sys

    write_committed(Path(__file__).parents[1] / "data" / "independent", *sys.argv[1:])
