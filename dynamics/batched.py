"""Newton–Euler recursions over many states at once, laid out for XLA on the CPU: RNEA,
ABA (Lutter et al., Algorithm 1) and the inertial-parameter regressor for a batch of states
(q, q̇, q̈ or τ each [n_states, n_dof]).

``dynamics.newton_euler`` computes one state; ``jax.vmap`` of it turns every 3-vector and
3×3 block into a [batch, 3] or [batch, 3, 3] array, and XLA's CPU backend then runs one small
loop per operation and body, each reading and writing memory: the cost per state stops
falling beyond ~100 states (docs/benchmarks.md, issue 21). Here every state quantity is a
*structure of arrays*: a 3-vector is a tuple of three [batch] arrays, a 3×3 matrix a tuple of
three such rows, and every spatial operation is written out as products and sums of those
rows. The recursion over bodies is unrolled in Python over the static tree (bodies, never
states). The whole computation is then one elementwise program over the batch, which XLA
fuses into loops that keep a state's intermediates in registers. What depends only on the
parameters (placements, axes, subspaces, body inertias) stays scalar and broadcasts.

Two things XLA's CPU fusion does to such a program had to be steered (``_evaluate``,
``_barrier``): it fuses the whole computation into the final stack of output columns, which
then recomputes everything once per column; and it duplicates every cheap value into each
loop that reads it, so that the loop of a deep body's output recomputes all bodies above
it, and compile time grows steeply with depth. Measured speeds: docs/benchmarks.md, issue 21.

Same conventions and results as ``dynamics.newton_euler`` (tested to 1e-12 relative):
twists ``[v, ω]`` in body coordinates, X_i = Ad_{T_λi⁻¹} (3), gravity as a base acceleration
−g, armature in the joint inertia. Everything is JAX float64 and differentiable in ``params``;
wrap the functions in ``jax.jit`` (one compiled program per tree, quantity and batch size).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from physid.dynamics.tree import FIXED, PRISMATIC, REVOLUTE, WORLD, Tree, TreeParams

# --- 3-vectors and 3×3 matrices as tuples of [batch] (or scalar) arrays ----------------------


def _vec(x):
    """A [3] parameter array as a tuple of three scalars."""
    return (x[0], x[1], x[2])


def _mat(x):
    """A [3, 3] parameter array as a tuple of rows."""
    return tuple(_vec(x[j]) for j in range(3))


def _add(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def _sub(a, b):
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def _scale(a, s):
    return (a[0] * s, a[1] * s, a[2] * s)


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _mv(R, x):
    """R x."""
    return tuple(_dot(R[j], x) for j in range(3))


def _rmv(R, x):
    """Rᵀ x."""
    return tuple(R[0][j] * x[0] + R[1][j] * x[1] + R[2][j] * x[2] for j in range(3))


def _mm(A, B):
    """A B."""
    return tuple(
        tuple(A[j][0] * B[0][k] + A[j][1] * B[1][k] + A[j][2] * B[2][k] for k in range(3))
        for j in range(3)
    )


def _skew(x):
    z = 0.0
    return ((z, -x[2], x[1]), (x[2], z, -x[0]), (-x[1], x[0], z))


def _madd(A, B):
    return tuple(tuple(A[j][k] + B[j][k] for k in range(3)) for j in range(3))


def _transpose(A):
    return tuple(tuple(A[k][j] for k in range(3)) for j in range(3))


def _rotate_sym(R, M):
    """R M Rᵀ for a symmetric M: the six distinct entries, mirrored (shared) below."""
    T = tuple(tuple(_dot(M[j], R[k]) for k in range(3)) for j in range(3))  # (M Rᵀ)_jk
    out = {}
    for j in range(3):
        for k in range(j, 3):
            out[j, k] = R[j][0] * T[0][k] + R[j][1] * T[1][k] + R[j][2] * T[2][k]
    return tuple(tuple(out[min(j, k), max(j, k)] for k in range(3)) for j in range(3))


def _rotate(R, M):
    """R M Rᵀ."""
    return _mm(R, _mm(M, _transpose(R)))


# --- twists and wrenches as pairs of 3-vectors ------------------------------------------------


def _motion_from_parent(R, p, twist):
    """Ad_{T⁻¹} V (3): a parent-frame twist [v, ω] in the child's coordinates."""
    v, w = twist
    return _rmv(R, _sub(v, _cross(p, w))), _rmv(R, w)


def _force_to_parent(R, p, wrench):
    """Ad*_{T⁻¹} F (3): a child's wrench [f, τ] about its origin, in the parent's frame."""
    f, n = wrench
    Rf = _mv(R, f)
    return Rf, _add(_mv(R, n), _cross(p, Rf))


def _cross_motion(a, b):
    """ad_V W = V × W."""
    (v, w), (bv, bw) = a, b
    return _add(_cross(w, bv), _cross(v, bw)), _cross(w, bw)


def _cross_force(twist, wrench):
    """V ×* F = −ad_Vᵀ F."""
    (v, w), (f, n) = twist, wrench
    return _cross(w, f), _add(_cross(v, f), _cross(w, n))


def _twist_add(a, b):
    return _add(a[0], b[0]), _add(a[1], b[1])


def _twist_scale(a, s):
    return _scale(a[0], s), _scale(a[1], s)


def _twist_dot(a, b):
    return _dot(a[0], b[0]) + _dot(a[1], b[1])


# --- the per-body quantities that depend only on parameters -----------------------------------


class _Body:
    """Body i's parameters as scalars: the body inertia M̄_i (1) about its origin as blocks
    (m 1, −m[c], J_c − m[c][c]), its joint's subspace s_i (None for a fixed joint) and the
    pieces of T_λi(q) = T_placement T_joint(q)."""

    def __init__(self, tree: Tree, params: TreeParams, i: int):
        b, g = params.bodies, params.joints
        self.kind = tree.joint_types[i]
        self.parent = tree.parents[i]
        self.dof = tree.dof_index(i)
        self.mass = b.mass[i]
        self.com = _vec(b.com[i])
        self.inertia = _mat(b.inertia[i])
        self.R0 = _mat(g.rotation[i])
        self.t0 = _vec(g.translation[i])
        axis, anchor = _vec(g.axis[i]), _vec(g.anchor[i])
        self.axis, self.anchor = axis, anchor
        zero = (0.0, 0.0, 0.0)
        if self.kind == REVOLUTE:
            self.s = (_cross(anchor, axis), axis)
        elif self.kind == PRISMATIC:
            self.s = (axis, zero)
        else:
            self.s = None

    def transform(self, q):
        """(R, p) of T_λi(q) for a batch of joint positions q [batch] (rad or m).

        Revolute: R = R₀ (cos q 1 + sin q [a] + (1 − cos q) a aᵀ) (Rodrigues), written as
        K₂ + cos q (R₀ − K₂) + sin q R₀[a] with K₂ = (R₀ a) aᵀ; p = R₀ r + t₀ − R r for the
        anchor r. Prismatic: R = R₀, p = t₀ + q R₀ a. Fixed: (R₀, t₀)."""
        R0, t0, a = self.R0, self.t0, self.axis
        if self.kind == FIXED:
            return R0, t0
        if self.kind == PRISMATIC:
            return R0, _add(t0, _scale(_mv(R0, a), q))
        c, s = jnp.cos(q), jnp.sin(q)
        R0a = _mv(R0, a)
        K1 = _mm(R0, _skew(a))
        R = tuple(
            tuple(R0a[j] * a[k] + c * (R0[j][k] - R0a[j] * a[k]) + s * K1[j][k] for k in range(3))
            for j in range(3)
        )
        base = _add(_mv(R0, self.anchor), t0)
        return R, _sub(base, _mv(R, self.anchor))

    def momentum(self, twist):
        """M̄ V: m (v − [c] ω) and J_c ω + m (c × (ω × c) + c × v)."""
        v, w = twist
        m, c = self.mass, self.com
        lin = _scale(_add(v, _cross(w, c)), m)
        ang = _add(_mv(self.inertia, w), _scale(_add(_cross(c, _cross(w, c)), _cross(c, v)), m))
        return lin, ang

    def blocks(self):
        """(A, B, C) of M̄: (m 1, −m[c], J_c − m[c][c])."""
        m, c = self.mass, self.com
        A = tuple(tuple(m if j == k else 0.0 for k in range(3)) for j in range(3))
        B = tuple(tuple(-m * x for x in r) for r in _skew(c))
        cc = _dot(c, c)
        C = tuple(
            tuple(
                self.inertia[j][k] - m * (c[j] * c[k] - (cc if j == k else 0.0)) for k in range(3)
            )
            for j in range(3)
        )
        return A, B, C


# Bodies from which ABA and the regressor materialize each body's values (``_barrier``).
# Measured on the 2-core AMD EPYC VM, 10 000 states, CPU time per state: the Qube (2 bodies)
# runs faster without (ABA 0.48 µs vs 0.95 µs), RNEA faster without on both rigs (arm 1.9 µs
# vs 3.9 µs); but without them XLA took more than 10 minutes to compile the 7-joint arm's
# ABA (the duplicated cones grow with depth), 4 minutes with them (on a loaded machine).
BARRIER_BODIES = 4


def _barrier(values, Q):
    """``values`` unchanged, materialized in memory: each [batch] array divided by a traced
    1.0. XLA's CPU fusion never duplicates a division (an "expensive" operation) into its
    consumers, so each such array is computed once and read by the bodies below; without
    it, each output's loop recomputes its whole dependency cone (every body above it). The
    1.0 comes from Q so that XLA cannot fold it, and is exactly 1.0 for any Q. ``Q`` None:
    no barrier."""
    if Q is None:
        return values
    q0 = jnp.asarray(Q)[0, 0]
    one = jnp.where(jnp.isfinite(q0), 1.0 + 0.0 * q0, 1.0)
    return jax.tree_util.tree_map(lambda x: x / one if jnp.ndim(x) else x, values)


def _barrier_source(tree: Tree, Q):
    """Q (barriers on) for trees of ``BARRIER_BODIES`` bodies or more, else None."""
    return Q if tree.n_bodies >= BARRIER_BODIES else None


def _bodies(tree: Tree, params: TreeParams) -> list[_Body]:
    return [_Body(tree, params, i) for i in range(tree.n_bodies)]


def _columns(X):
    """The columns of a [n_states, n_dof] array as [n_states] arrays."""
    X = jnp.asarray(X)
    return [X[:, k] for k in range(X.shape[1])]


def _evaluate(columns_of, args):
    """``columns_of(*args)`` (a list of [n_states] arrays or scalars) as the columns of one
    [n_states, k] array, with the computation kept apart from the stacking.

    XLA on the CPU fuses the whole elementwise computation into the stack (a concatenate) if
    it can, and a fused concatenate evaluates each output column in its own branch, each
    recomputing the whole recursion: k times the work (measured 12× slower for the Qube's
    RNEA, k = 2; worse for the regressor's 10 n_bodies n_dof columns). A conditional is a
    fusion boundary: inside it the columns are one multi-output loop. Both branches are the
    same function, so the predicate (any traced value) never changes the result."""
    n_states = jnp.shape(args[0])[0]

    def columns(args):
        return [jnp.broadcast_to(c, (n_states,)) for c in columns_of(*args)]

    if n_states == 0:
        return jnp.stack(columns(args), axis=-1)
    pred = jnp.asarray(args[0])[0, 0] == 0.0
    return jnp.stack(jax.lax.cond(pred, columns, columns, args), axis=-1)


def _forward_pass(tree, bodies, q, qd, barrier):
    """Transforms, twists v_i = X_i v_λ + s_i q̇_i and η_i = ad_{v_i} s_i q̇_i per body."""
    R, p, v, eta = [], [], [], []
    for i, body in enumerate(bodies):
        qi = q[body.dof] if body.dof is not None else None
        Ri, pi = body.transform(qi)
        parent = v[body.parent] if body.parent != WORLD else None
        vi = _motion_from_parent(Ri, pi, parent) if parent is not None else None
        if body.s is not None:
            sqd = _twist_scale(body.s, qd[body.dof])
            vi = sqd if vi is None else _twist_add(vi, sqd)
            eta_i = _cross_motion(vi, sqd)
        else:
            eta_i = None
        if vi is None:  # a fixed body on the world: at rest
            zero = (0.0, 0.0, 0.0)
            vi = (zero, zero)
        Ri, pi, vi, eta_i = _barrier((Ri, pi, vi, eta_i), barrier)
        R.append(Ri), p.append(pi), v.append(vi), eta.append(eta_i)
        del i
    return R, p, v, eta


def _base_acceleration(params: TreeParams):
    g = _vec(params.gravity)
    return (-g[0], -g[1], -g[2]), (0.0, 0.0, 0.0)


def _accelerations(bodies, params, R, p, eta, qdd, barrier):
    """a_i = X_i a_λ + s_i q̈_i + η_i from the base acceleration −g."""
    a = []
    base = _base_acceleration(params)
    for i, body in enumerate(bodies):
        parent = a[body.parent] if body.parent != WORLD else base
        ai = _motion_from_parent(R[i], p[i], parent)
        if body.s is not None:
            ai = _twist_add(_twist_add(ai, _twist_scale(body.s, qdd[body.dof])), eta[i])
        a.append(_barrier(ai, barrier))
    return a


def rnea_batch(tree: Tree, params: TreeParams, Q, Qd, Qdd):
    """Inverse dynamics for a batch (RNEA, Lutter et al. Section 2): τ [n_states, n_dof]
    (N m or N) = M(q) q̈ + c(q, q̇) + g(q) + armature · q̈ for Q, Qd, Qdd [n_states, n_dof]
    (rad or m, per s, per s²). Equals ``jax.vmap`` of ``newton_euler.rnea``.

    Forward: twists and accelerations body by body; each body's Newton–Euler wrench
    f_i = M̄_i a_i + v_i ×* M̄_i v_i; backward: each body's total (own plus its children's,
    carried by Ad*_{T⁻¹}, eq. 3), τ_i = s_iᵀ f_i."""
    return _evaluate(lambda *a: rnea_columns(tree, params, *a), (Q, Qd, Qdd))


def rnea_columns(tree: Tree, params: TreeParams, Q, Qd, Qdd, barriers: bool = True):
    """τ per degree of freedom, [n_states] each. ``barriers`` (XLA fusion barriers, see
    ``_barrier``) is there for the common signature; RNEA is faster without them on every
    tree measured and never uses them."""
    bodies = _bodies(tree, params)
    q, qd, qdd = _columns(Q), _columns(Qd), _columns(Qdd)
    barrier = None
    R, p, v, eta = _forward_pass(tree, bodies, q, qd, barrier)
    a = _accelerations(bodies, params, R, p, eta, qdd, barrier)
    f = [
        _twist_add(body.momentum(a[i]), _cross_force(v[i], body.momentum(v[i])))
        for i, body in enumerate(bodies)
    ]
    tau = [None] * tree.n_dof
    for i in reversed(range(tree.n_bodies)):
        body = bodies[i]
        if body.s is not None:
            tau[body.dof] = (
                _twist_dot(body.s, f[i]) + params.dofs.armature[body.dof] * qdd[body.dof]
            )
        if body.parent != WORLD:
            f[body.parent] = _barrier(
                _twist_add(f[body.parent], _force_to_parent(R[i], p[i], f[i])), barrier
            )
    return tau


def _blocks_times(A, B, C, x):
    """[[A, B], [Bᵀ, C]] x for a twist x = (xl, xw)."""
    xl, xw = x
    return _add(_mv(A, xl), _mv(B, xw)), _add(_rmv(B, xl), _mv(C, xw))


def _blocks_to_parent(R, p, A, B, C):
    """Xᵀ [[A, B], [Bᵀ, C]] X for X = Ad_{T⁻¹}: rotate each block (R · Rᵀ), then shift by
    P = [p]: A, B − A P, C + P B + (P B)ᵀ − P A P (as ``spatial.blocks_to_parent``)."""
    A1, B1, C1 = _rotate_sym(R, A), _rotate(R, B), _rotate_sym(R, C)
    P = _skew(p)
    AP = _mm(A1, P)
    PB = _mm(P, B1)
    PAP = _mm(P, AP)
    C2 = {}
    for j in range(3):
        for k in range(j, 3):
            C2[j, k] = C1[j][k] + PB[j][k] + PB[k][j] - PAP[j][k]
    C2 = tuple(tuple(C2[min(j, k), max(j, k)] for k in range(3)) for j in range(3))
    B2 = tuple(tuple(B1[j][k] - AP[j][k] for k in range(3)) for j in range(3))
    return A1, B2, C2


def _sym_update(M, x, y, scale):
    """M − x yᵀ · scale for a symmetric result (x = y) or a general one."""
    return tuple(tuple(M[j][k] - x[j] * y[k] * scale for k in range(3)) for j in range(3))


def aba_batch(tree: Tree, params: TreeParams, Q, Qd, Tau):
    """Forward dynamics for a batch (ABA, Lutter et al. Algorithm 1): q̈ [n_states, n_dof]
    such that ``rnea_batch(Q, Qd, q̈) = Tau`` (N m or N). Equals ``jax.vmap`` of
    ``newton_euler.aba``.

    Pass 1: twists v_i and η_i = ad_{v_i} s_i q̇_i. Pass 2 (leaves to root): articulated
    inertias M̄_{i:n} as 3×3 blocks and bias wrenches f_b, U_i = M̄_{i:n} s_i,
    D_i = s_iᵀ U_i + armature_i (= 1/Ψ_i), u_i = τ_i − s_iᵀ f_b,
    Π_i = M̄_{i:n} − U_i U_iᵀ / D_i, β_i = f_b + Π_i η_i + U_i u_i / D_i, both carried to the
    parent by Ad_{T⁻¹}. Pass 3 (root to leaves): a_i = X_i a_λ + η_i,
    q̈_i = (u_i − U_iᵀ a_i) / D_i, a_i += s_i q̈_i. A fixed joint passes everything on."""
    return _evaluate(lambda *a: aba_columns(tree, params, *a), (Q, Qd, Tau))


def aba_columns(tree: Tree, params: TreeParams, Q, Qd, Tau, barriers: bool = True):
    """q̈ per degree of freedom, [n_states] each; ``barriers``: XLA fusion barriers on deep
    trees (``_barrier``), off for other compilers (``dynamics.fused``)."""
    bodies = _bodies(tree, params)
    barrier = _barrier_source(tree, Q) if barriers else None
    q, qd, tau = _columns(Q), _columns(Qd), _columns(Tau)
    R, p, v, eta = _forward_pass(tree, bodies, q, qd, barrier)
    IA = [body.blocks() for body in bodies]
    fb = [_cross_force(v[i], body.momentum(v[i])) for i, body in enumerate(bodies)]
    U, D, u = {}, {}, {}
    for i in reversed(range(tree.n_bodies)):
        body = bodies[i]
        A, B, C = IA[i]
        f_i = fb[i]
        if body.s is not None:
            Ui = _blocks_times(A, B, C, body.s)
            Di = _twist_dot(body.s, Ui) + params.dofs.armature[body.dof]
            ui = tau[body.dof] - _twist_dot(body.s, f_i)
            inv = 1.0 / Di
            Ul, Uw = Ui
            Pi = (
                _sym_update(A, Ul, Ul, inv),
                _sym_update(B, Ul, Uw, inv),
                _sym_update(C, Uw, Uw, inv),
            )
            beta = _twist_add(
                _twist_add(f_i, _blocks_times(*Pi, eta[i])), _twist_scale(Ui, ui * inv)
            )
            U[i], D[i], u[i] = _barrier((Ui, inv, ui), barrier)
        else:
            Pi, beta = (A, B, C), f_i
        if body.parent != WORLD:
            moved = _blocks_to_parent(R[i], p[i], *Pi)
            IA[body.parent] = tuple(
                _madd(X, Y) for X, Y in zip(IA[body.parent], moved, strict=True)
            )
            fb[body.parent] = _twist_add(fb[body.parent], _force_to_parent(R[i], p[i], beta))
            IA[body.parent], fb[body.parent] = _barrier((IA[body.parent], fb[body.parent]), barrier)
    qdd = [None] * tree.n_dof
    a = []
    base = _base_acceleration(params)
    for i, body in enumerate(bodies):
        parent = a[body.parent] if body.parent != WORLD else base
        ai = _motion_from_parent(R[i], p[i], parent)
        if body.s is not None:
            ai = _twist_add(ai, eta[i])
            qi = (u[i] - _twist_dot(U[i], ai)) * D[i]
            ai = _twist_add(ai, _twist_scale(body.s, qi))
            qdd[body.dof] = qi
        a.append(_barrier(ai, barrier))
    return qdd


def _regressor_row(s, v, a):
    """s ᵀ A(V, A) [10] for a twist s = (s_v, s_w) in the body's frame: the body's 10
    wrench columns (Atkeson et al.; ``spatial.wrench_regressor``) projected on s, written
    out from A's blocks: with l = a + ω × v,

        m: s_v · l;   m c: −α × s_v + ω × (ω × s_v) + l × s_w;
        I_o: L(α)ᵀ s_w + L(ω)ᵀ (s_w × ω)   (L(x) ι = I x, ι = xx, xy, yy, xz, yz, zz)."""
    (lv, w), (acc, alpha) = v, a
    sv, sw = s
    lin = _add(acc, _cross(w, lv))
    mc = _add(_sub(_cross(w, _cross(w, sv)), _cross(alpha, sv)), _cross(lin, sw))
    y = _cross(sw, w)

    def inertia_cols(x, u):
        return (
            x[0] * u[0],
            x[1] * u[0] + x[0] * u[1],
            x[1] * u[1],
            x[2] * u[0] + x[0] * u[2],
            x[2] * u[1] + x[1] * u[2],
            x[2] * u[2],
        )

    rot = tuple(p + q for p, q in zip(inertia_cols(alpha, sw), inertia_cols(w, y), strict=True))
    return (_dot(sv, lin), *mc, *rot)


def regressor_batch(tree: Tree, params: TreeParams, Q, Qd, Qdd):
    """The inertial-parameter regressor for a batch: Y [n_states, n_dof, 10 n_bodies] with
    Y φ = τ − armature · q̈ for φ = ``newton_euler.inertial_vector(params)`` (Atkeson et
    al.; equals ``jax.vmap`` of ``newton_euler.regressor``). Uses only the kinematic
    parameters of ``params``.

    Y_j,i = s_jᵀ X_{i→j}ᵀ A_i = (X_{j→i} s_j)ᵀ A_i for body i at or below joint j: each joint's
    subspace is carried down its subtree by Ad_{T⁻¹} (the twist recursion), and projected
    there on body i's 10 wrench columns (``_regressor_row``)."""
    Y = _evaluate(lambda *a: regressor_columns(tree, params, *a), (Q, Qd, Qdd))
    return Y.reshape(jnp.shape(Q)[0], tree.n_dof, 10 * tree.n_bodies)


def regressor_columns(tree: Tree, params: TreeParams, Q, Qd, Qdd, barriers: bool = True):
    """The entries of Y, row by row (dof j, then body i's 10 columns), [n_states] each;
    ``barriers`` as in ``aba_columns``."""
    bodies = _bodies(tree, params)
    barrier = _barrier_source(tree, Q) if barriers else None
    q, qd, qdd = _columns(Q), _columns(Qd), _columns(Qdd)
    R, p, v, eta = _forward_pass(tree, bodies, q, qd, barrier)
    a = _accelerations(bodies, params, R, p, eta, qdd, barrier)
    zero = 0.0
    rows = [[zero] * (10 * tree.n_bodies) for _ in range(tree.n_dof)]
    carried = [{} for _ in range(tree.n_bodies)]  # carried[i][j]: s_j in body i's frame
    for i, body in enumerate(bodies):
        if body.parent != WORLD:
            for j, s in carried[body.parent].items():
                carried[i][j] = _motion_from_parent(R[i], p[i], s)
        if body.s is not None:
            carried[i][body.dof] = body.s
        carried[i] = _barrier(carried[i], barrier)
        for j, s in carried[i].items():
            rows[j][10 * i : 10 * i + 10] = _regressor_row(s, v[i], a[i])
    return [x for r in rows for x in r]
