"""MJCF and URDF files as kinematic trees, read by MuJoCo's own compiler.

Why MuJoCo: it is the reference reader of MJCF (defaults classes, ``<include>``, ``fullinertia``
vs ``diaginertia``, ``euler`` conventions, inertias from geoms, angle units are all resolved by
its compiler, which no hand-written parser would match), and it also compiles URDF (link and
joint names kept, ``<dynamics damping friction>`` read as damping and frictionloss), so one
well-kept dependency covers both formats. It is imported lazily: only specs that point to a
file need it.

What is read: bodies (mass, centre of mass, full inertia from ``body_inertia``/``body_iquat``),
their placement, hinge and slide joints (axis, anchor, damping, armature, frictionloss,
stiffness, springref), ``<motor>``-like actuators on joints (gear × gain) and gravity.
MuJoCo features a tree in generalized coordinates cannot represent are refused with a message
(ball and free joints, several joints in one body, tendons, equality constraints, actuators
with dynamics or bias, polynomial damping); joint limits and contacts are not modelled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from physid.errors import InputError

MJCF_SUFFIXES = (".xml", ".mjcf")
URDF_SUFFIXES = (".urdf",)


class ModelFileError(InputError):
    """An MJCF/URDF file that cannot become a tree; the message names the file and element."""


def compile_file(path: Path):
    """``mujoco.MjModel`` of an MJCF or URDF file; errors name the file."""
    try:
        import mujoco
    except ImportError:  # pragma: no cover - mujoco is a dependency
        raise ModelFileError(
            f"{path}: reading MJCF/URDF needs the 'mujoco' package (pip install mujoco)"
        ) from None
    if not path.exists():
        raise ModelFileError(f"{path}: no such model file")
    try:
        return mujoco.MjModel.from_xml_path(str(path))
    except ValueError as exc:
        message = str(exc).replace("\n", " ").strip()
        raise ModelFileError(f"{path}: MuJoCo cannot compile it: {message}") from None


def read_model_file(path: Path):
    """The ``TreeDescription`` of the tree in an MJCF/URDF file (values as MuJoCo compiled
    them: SI units, radians, inertias from geoms where the file gives none)."""
    import mujoco

    from physid.rigs.models.tree.model import BodyDescription, TreeDescription

    model = compile_file(path)

    def name(obj: int, index: int, fallback: str) -> str:
        return mujoco.mj_id2name(model, obj, index) or f"{fallback}{index}"

    where = f"{path}:"
    if model.ntendon:
        raise ModelFileError(f"{where} tendons are not supported; remove <tendon>")
    if model.neq:
        raise ModelFileError(
            f"{where} equality constraints are not supported by a tree in generalized "
            "coordinates; remove <equality>"
        )
    bodies: list[BodyDescription] = []
    for b in range(1, model.nbody):
        body_name = name(mujoco.mjtObj.mjOBJ_BODY, b, "body")
        parent = int(model.body_parentid[b])
        parent_name = "world" if parent == 0 else bodies[parent - 1].name
        njnt = int(model.body_jntnum[b])
        if njnt > 1:
            raise ModelFileError(
                f"{where} body {body_name!r} has {njnt} joints; a tree body turns on one joint: "
                "nest a massless body per extra joint"
            )
        joint = None
        if njnt == 1:
            j = int(model.body_jntadr[b])
            joint = _joint(model, j, name(mujoco.mjtObj.mjOBJ_JOINT, j, "joint"), where)
        R_inertia = _quat_matrix(model.body_iquat[b])
        inertia = R_inertia @ np.diag(model.body_inertia[b]) @ R_inertia.T
        bodies.append(
            BodyDescription(
                name=body_name,
                parent=parent_name,
                rotation=_quat_matrix(model.body_quat[b]),
                translation=np.array(model.body_pos[b], float),
                mass=float(model.body_mass[b]),
                com=np.array(model.body_ipos[b], float),
                inertia=inertia,
                joint=joint,
            )
        )
    actuators = [
        _actuator(model, a, name(mujoco.mjtObj.mjOBJ_ACTUATOR, a, "actuator"), where, bodies)
        for a in range(model.nu)
    ]
    return TreeDescription(
        tuple(bodies), tuple(actuators), np.array(model.opt.gravity, float), path
    )


def _joint(model, j: int, joint_name: str, where: str):
    import mujoco

    from physid.rigs.models.tree.model import JointDescription

    kind = int(model.jnt_type[j])
    if kind == mujoco.mjtJoint.mjJNT_HINGE:
        jtype = "revolute"
    elif kind == mujoco.mjtJoint.mjJNT_SLIDE:
        jtype = "prismatic"
    else:
        label = mujoco.mjtJoint(kind).name.removeprefix("mjJNT_").lower()
        raise ModelFileError(
            f"{where} joint {joint_name!r} is a {label} joint; trees support hinge and slide "
            "joints (write a ball joint as three hinges on massless bodies)"
        )
    dof = int(model.jnt_dofadr[j])
    for field in ("dof_dampingpoly", "jnt_stiffnesspoly"):
        table = getattr(model, field, None)
        row = dof if field.startswith("dof") else j
        if table is not None and np.any(table[row]):
            raise ModelFileError(
                f"{where} joint {joint_name!r}: polynomial {field} is not supported"
            )
    return JointDescription(
        name=joint_name,
        type=jtype,
        axis=np.array(model.jnt_axis[j], float),
        anchor=np.array(model.jnt_pos[j], float),
        values={
            "damping": float(model.dof_damping[dof]),
            "armature": float(model.dof_armature[dof]),
            "frictionloss": float(model.dof_frictionloss[dof]),
            "stiffness": float(model.jnt_stiffness[j]),
            "springref": float(model.qpos_spring[model.jnt_qposadr[j]]),
        },
    )


def _actuator(model, a: int, actuator_name: str, where: str, bodies):
    import mujoco

    from physid.rigs.models.tree.model import ActuatorDescription

    prefix = f"{where} actuator {actuator_name!r}"
    if int(model.actuator_trntype[a]) != mujoco.mjtTrn.mjTRN_JOINT:
        raise ModelFileError(f"{prefix} does not drive a joint; only joint transmissions are read")
    if int(model.actuator_dyntype[a]) != mujoco.mjtDyn.mjDYN_NONE:
        raise ModelFileError(f"{prefix} has activation dynamics; use a <motor>")
    if (
        int(model.actuator_gaintype[a]) != mujoco.mjtGain.mjGAIN_FIXED
        or int(model.actuator_biastype[a]) != mujoco.mjtBias.mjBIAS_NONE
    ):
        raise ModelFileError(
            f"{prefix} is not a plain motor (gain must be fixed, no bias: a <position> or "
            "<velocity> servo is a controller, not part of the rig); use a <motor>"
        )
    for field in ("actuator_armature", "actuator_damping"):
        table = getattr(model, field, None)
        if table is not None and np.any(table[a]):
            raise ModelFileError(f"{prefix}: {field} is not supported; put it on the joint")
    joint_id = int(model.actuator_trnid[a, 0])
    joint_name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint_id)
    joint_name = joint_name or f"joint{joint_id}"
    gear = float(model.actuator_gear[a, 0] * model.actuator_gainprm[a, 0])
    return ActuatorDescription(
        name=actuator_name, joint=joint_name, kind="motor", values={"gear": gear}
    )


def _quat_matrix(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )
