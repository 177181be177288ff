"""Finite ground segments in the contact NLP (issue 27): contact only where a surface is.

The motion comes from MuJoCo (``tests/vision/mujoco_footage.py``: soft contact, elliptic
friction cone), an engine independent of ``dynamics/planar_contact.py``: the ellipse
bounces on a 0.42 m bar, slides and rolls off its end at 0.35-0.43 s.
"""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "vision"))

from physid.estimation.ipopt_contact import (  # noqa: E402
    ContactGeometry,
    IpoptSettings,
    assign_surfaces,
    build_nlp,
    identify_contact,
    observed_gaps,
)

mujoco = pytest.importorskip("mujoco", reason="MuJoCo is the independent physics here")
import mujoco_footage as mf  # noqa: E402

RIG = mf.Rig()
BAR = ContactGeometry(RIG.a, RIG.b, *RIG.bar_start, RIG.bar_alpha, RIG.bar_length)


def _drop(mu: float, duration: float = 0.5, fps: float = 240.0, coulomb=False, throw=None):
    model = mujoco.MjModel.from_xml_string(
        mf.mjcf(RIG, mf.Look(), mf.CameraSetup(), mu, coulomb=coulomb)
    )
    motion = mf.simulate(model, throw or mf.Throw(duration=duration))
    t = np.arange(0.0, duration, 1 / fps)
    return t, motion(t), motion


def test_surface_assignment_follows_the_bar():
    start, d = np.array(RIG.bar_start), RIG.tangent
    n = RIG.normal
    # lying flat on the bar (theta = alpha): contact point under the centre
    on = [*(start + 0.2 * d + RIG.b * n), RIG.bar_alpha]
    past = [*(start + 0.45 * d + RIG.b * n), RIG.bar_alpha]  # centre 30 mm past the end
    before = [*(start - 0.01 * d + RIG.b * n), RIG.bar_alpha]
    assert assign_surfaces(np.array([on, past, before]), BAR).tolist() == [0, -1, -1]
    gaps = observed_gaps(np.array([on, past]), BAR)
    assert abs(gaps[0]) < 1e-12 and math.isinf(gaps[1])
    # a floor 0.1 m below as a second surface: past the bar the object is over the floor
    floor = ContactGeometry(
        RIG.a, RIG.b, *RIG.bar_start, RIG.bar_alpha, RIG.bar_length, ((-1.0, 0.0, 0.0, 3.0),)
    )
    assert assign_surfaces(np.array([on, past]), floor).tolist() == [0, 1]
    # the infinite line of the paper: every pose over it (bit-identical to before)
    line = ContactGeometry(RIG.a, RIG.b, *RIG.bar_start, RIG.bar_alpha)
    assert not line.segmented
    assert assign_surfaces(np.array([on, past, before]), line).tolist() == [0, 0, 0]


def test_no_contact_is_allowed_past_the_bar():
    t, q, _ = _drop(0.2)
    keep = t >= 0.3  # the end of the rolling and the fall off the bar
    problem = build_nlp(t[keep], q[keep], BAR, IpoptSettings())
    n_steps = len(problem.t) - 1
    pn_ub = problem.ubx[-3 * n_steps :: 3]
    index = assign_surfaces(problem.x0[5 : 5 + 3 * (n_steps + 1)].reshape(-1, 3), BAR)
    off = index[:-1] < 0
    assert off.any() and (~off).any()  # the window holds both
    assert np.all(pn_ub[off] == 0) and np.all(np.isinf(pn_ub[~off]))
    gap_lb = problem.lbg[3 * n_steps : 3 * n_steps + 5 * n_steps : 5]
    assert np.all(np.isneginf(gap_lb[off])) and np.all(gap_lb[~off] == 0)


def test_a_second_surface_takes_over_past_the_bar():
    # the same window with a floor 0.1 m below the bar's start as a second surface
    # ([[ground.surface]]): past the bar the object is over the floor, so contact (with
    # the floor) is allowed there, and its gap is measured to the floor
    t, q, _ = _drop(0.2)
    keep = t >= 0.3
    floor = ContactGeometry(
        RIG.a,
        RIG.b,
        *RIG.bar_start,
        RIG.bar_alpha,
        RIG.bar_length,
        ((-1.0, RIG.bar_start[1] - 0.1, 0.0, 3.0),),
    )
    problem = build_nlp(t[keep], q[keep], floor, IpoptSettings())
    n_steps = len(problem.t) - 1
    pn_ub = problem.ubx[-3 * n_steps :: 3]
    index = assign_surfaces(problem.x0[5 : 5 + 3 * (n_steps + 1)].reshape(-1, 3), floor)
    over_floor = index[:-1] == 1
    assert over_floor.any() and (index[:-1] == 0).any() and not (index[:-1] < 0).any()
    assert np.all(np.isinf(pn_ub))
    gap_lb = problem.lbg[3 * n_steps : 3 * n_steps + 5 * n_steps : 5]
    assert np.all(gap_lb == 0)
    # measured to the floor (without it: inf, see above), and closing as the object falls
    gaps = observed_gaps(q[keep], floor)[assign_surfaces(q[keep], floor) == 1]
    assert np.all(np.isfinite(gaps)) and gaps[0] > 0.02 and gaps[-1] < gaps[0] - 0.02


SOFT_IMPACT = pytest.mark.xfail(
    strict=True,
    reason="MuJoCo's soft friction slips inside the cone through the mu 0.5 drop's main "
    "impact (|f_t|/f_n = 0.42 at 0.27 m/s slip); the Coulomb-model estimate is 0.449",
)


@pytest.mark.slow
@pytest.mark.parametrize("mu", [0.2, 0.3, pytest.param(0.5, marks=SOFT_IMPACT)])
def test_identifies_mujoco_drop_that_rolls_off_the_bar(mu):
    t, q, _ = _drop(mu)
    rng = np.random.default_rng(0)
    sigma = np.array([0.05e-3, 0.05e-3, 1.5e-3])  # the tracker's noise on the footage
    noisy = q + rng.normal(size=q.shape) * sigma
    settings = IpoptSettings(sigma_pos=0.05e-3, sigma_theta=1.5e-3)
    fit = identify_contact(t, noisy, BAR, settings)
    print(
        f"mu {mu}: J/m {fit.j_over_m * 1e6:.1f} mm^2 (truth {RIG.j_over_m * 1e6:.1f}), "
        f"mu {fit.mu:.3f}, {fit.status}"
    )
    # MuJoCo's contact is soft (0.5 ms time constant), the NLP's rigid: J/m within 3 %
    # and mu within 0.05 (issue 27's goals)
    assert fit.j_over_m == pytest.approx(RIG.j_over_m, rel=0.03)
    assert fit.mu == pytest.approx(mu, abs=0.05)


# Lands nearly flat and fast along the bar, so that it slides on landing also at mu = 0.5
# with Coulomb-like friction (the default throw then mostly rolls and sticks: 26 % of the
# normal impulse while slipping, 49 % with this one)
SLIDING = mf.Throw((0.08, 0.19, -0.15), (1.1, -0.5, -4.0))


@pytest.mark.slow
@pytest.mark.parametrize("mu", [0.2, 0.5])
def test_identifies_mujoco_drop_with_coulomb_friction(mu):
    # mjcf(coulomb=True): MuJoCo's friction made Coulomb's law (test_independent_footage.py).
    # mu = 0.5 is then found: 0.449 of the default contact above was MuJoCo's soft cone
    t, q, _ = _drop(mu, coulomb=True, throw=SLIDING)
    rng = np.random.default_rng(0)
    sigma = np.array([0.05e-3, 0.05e-3, 1.5e-3])
    fit = identify_contact(
        t,
        q + rng.normal(size=q.shape) * sigma,
        BAR,
        IpoptSettings(sigma_pos=0.05e-3, sigma_theta=1.5e-3),
    )
    print(f"mu {mu} (Coulomb-like): J/m {fit.j_over_m * 1e6:.1f} mm^2, mu {fit.mu:.3f}")
    # issue 27's goals, as above
    assert fit.j_over_m == pytest.approx(RIG.j_over_m, rel=0.03)
    assert fit.mu == pytest.approx(mu, abs=0.05)
