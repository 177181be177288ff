"""The batched Newton–Euler kernels as one fused SIMD loop per tree, compiled by LLVM.

``dynamics.batched`` writes RNEA, ABA and the regressor as elementwise programs over
[n_states] rows. XLA's CPU backend turns such a program into many loops, one per output,
each reading and writing memory (docs/benchmarks.md, issue 21): on the 7-joint arm that is
no faster than Pinocchio called per state. This module compiles the *same* program (traced
once with ``jax.make_jaxpr``, one state wide) into a single loop whose body evaluates every
output of a block of ``WIDTH`` states in vector registers, with llvmlite (LLVM):

1. trace: the jaxpr is read into a straight-line scalar program. Constants are folded
   (the tree's parameters are baked in, so many products are by 0 or 1), repeated
   expressions shared, and what no output reads dropped.
2. emit: each scalar operation becomes one LLVM instruction on ``<WIDTH x double>``
   (AVX2: four states per instruction); sin and cos are LLVM intrinsics; products and sums
   may contract to fused multiply-adds (one rounding instead of two); the outputs of four
   states are transposed in registers and stored as rows.
3. compile: LLVM at -O3 for the host CPU; the loop is called through ctypes, over
   ``os.cpu_count()`` slices of the batch in threads (ctypes releases the GIL).

Results equal ``dynamics.batched`` to rounding (tested to 1e-12 relative on five trees). The
kernels are for evaluation only: they are not differentiable and the parameters are fixed at
build time (rebuild for new parameters; building the 7-joint arm's ABA takes seconds). The
estimators keep using the JAX functions. Folding 0 · x = 0 assumes finite values: inputs
with NaN or infinity are refused.
"""

from __future__ import annotations

import ctypes
import math
import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

from physid.dynamics import batched
from physid.dynamics.tree import Tree, TreeParams

WIDTH = 4  # doubles per AVX2 register: the states one loop iteration evaluates together
# Threads pay off when a slice's work is long against handing it to a thread (tens of µs
# idle, milliseconds on a loaded machine): from ~5 ms of one-thread work, counted as
# states × operations (~0.1 ns each per state at four states per instruction).
THREAD_MIN_WORK = 5e7

# Operations of the traced program: name -> (LLVM instruction, Python value for folding)
BINARY = {
    "add": ("fadd", lambda x, y: x + y),
    "sub": ("fsub", lambda x, y: x - y),
    "mul": ("fmul", lambda x, y: x * y),
    "div": ("fdiv", lambda x, y: x / y),
}
UNARY = {"sin": math.sin, "cos": math.cos, "sqrt": math.sqrt}
SHAPE_ONLY = {"broadcast_in_dim", "convert_element_type", "squeeze", "reshape", "copy"}


@dataclass(frozen=True)
class Program:
    """A straight-line program over one state: ``ops`` are (name, operation, operands) in
    order, operands a name or a float constant; ``loads`` (input, column) name an input
    entry; ``outputs`` a name or a constant per output."""

    ops: tuple[tuple[str, str, tuple], ...]
    outputs: tuple
    n_inputs: int


class _Builder:
    """Collects operations with constant folding and common-subexpression sharing."""

    def __init__(self):
        self.ops: list[tuple[str, str, tuple]] = []
        self.seen: dict[tuple, str] = {}

    def emit(self, op: str, *args):
        folded = self._fold(op, args)
        if folded is not None:
            return folded
        key = (op, *sorted(args, key=repr)) if op in ("add", "mul") else (op, *args)
        if key not in self.seen:
            name = f"t{len(self.ops)}"
            self.ops.append((name, op, args))
            self.seen[key] = name
        return self.seen[key]

    def _fold(self, op: str, args):
        if op != "load" and all(isinstance(a, float) for a in args):
            if op in BINARY:
                return float(BINARY[op][1](*args))
            return float(-args[0]) if op == "neg" else float(UNARY[op](args[0]))
        if op == "mul":
            x, y = args
            if x == 0.0 or y == 0.0:
                return 0.0  # finite operands: the callers refuse NaN and infinity
            if x == 1.0 or y == 1.0:
                return y if x == 1.0 else x
            if x == -1.0 or y == -1.0:
                return self.emit("neg", y if x == -1.0 else x)
        if op == "add" and (args[0] == 0.0 or args[1] == 0.0):
            return args[1] if args[0] == 0.0 else args[0]
        if op == "sub" and args[1] == 0.0:
            return args[0]
        if op == "sub" and args[0] == 0.0:
            return self.emit("neg", args[1])
        if op == "div" and args[1] == 1.0:
            return args[0]
        return None


def trace(columns_of: Callable, n_inputs: int, n_dof: int) -> Program:
    """The program of ``columns_of(X_1, ..., X_n)`` (each X [1, n_dof]; returns a list of
    [1] arrays or scalars), one state wide."""
    probe = [jnp.full((1, n_dof), 0.5) for _ in range(n_inputs)]
    closed = jax.make_jaxpr(lambda *x: list(columns_of(*x)))(*probe)
    b = _Builder()
    env = {v: ("input", k) for k, v in enumerate(closed.jaxpr.invars)}
    _run(closed.jaxpr, closed.consts, env, b)
    outputs = tuple(_scalar(_read(env, v)) for v in closed.jaxpr.outvars)
    return _live(Program(tuple(b.ops), outputs, n_inputs))


def _read(env, v):
    if isinstance(v, Literal):
        return ("const", np.asarray(v.val, float))
    return env[v]


def _scalar(value):
    kind, x = value
    if kind == "const":
        if np.size(x) != 1:
            raise NotImplementedError(f"a constant of shape {np.shape(x)} used as a scalar")
        return float(np.reshape(x, ()))
    if kind == "scalar":
        return x
    raise NotImplementedError(f"a whole input used as a scalar ({kind})")


def _run(jaxpr, consts, env, b: _Builder) -> None:
    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = ("const", np.asarray(c, float))
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        args = [_read(env, v) for v in eqn.invars]
        out = eqn.outvars[0]
        if name == "slice":
            env[out] = _slice(args[0], eqn.params, b)
        elif name in SHAPE_ONLY:
            kind, x = args[0]
            if kind == "const":
                env[out] = ("const", _reshaped(x, out.aval.shape))
            elif kind == "input":  # a one-column input, read without a slice
                env[out] = ("scalar", b.emit("load", float(x), 0.0))
            else:
                env[out] = args[0]
        elif name in ("pjit", "jit", "closed_call"):
            inner = eqn.params["jaxpr"]
            env.update(zip(inner.jaxpr.invars, args, strict=True))
            _run(inner.jaxpr, inner.consts, env, b)
            for o, v in zip(eqn.outvars, inner.jaxpr.outvars, strict=True):
                env[o] = _read(env, v)
        elif name in BINARY:
            env[out] = ("scalar", b.emit(name, _scalar(args[0]), _scalar(args[1])))
        elif name == "neg" or name in UNARY:
            env[out] = ("scalar", b.emit(name, _scalar(args[0])))
        elif name == "integer_pow" and eqn.params["y"] == 2:
            x = _scalar(args[0])
            env[out] = ("scalar", b.emit("mul", x, x))
        else:
            raise NotImplementedError(
                f"dynamics.fused cannot compile the JAX operation {name!r}; the batched "
                "kernels use only elementwise arithmetic, sin, cos and sqrt"
            )


def _slice(value, params, b: _Builder):
    kind, x = value
    start, stop = params["start_indices"], params["limit_indices"]
    if kind == "input":
        if stop[-1] - start[-1] != 1:
            raise NotImplementedError("inputs are read one column at a time")
        return ("scalar", b.emit("load", float(x), float(start[-1])))
    if kind == "const":
        return ("const", np.asarray(x)[tuple(map(slice, start, stop))])
    raise NotImplementedError("a slice of a computed value")


def _reshaped(x, shape):
    x = np.asarray(x, float)
    if x.size == math.prod(shape):
        return x.reshape(shape)
    return np.broadcast_to(x.reshape(()) if x.size == 1 else x, shape)


def _live(program: Program) -> Program:
    """Only the operations some output depends on."""
    live = {o for o in program.outputs if isinstance(o, str)}
    kept = []
    for name, op, args in reversed(program.ops):
        if name in live:
            kept.append((name, op, args))
            live.update(a for a in args if isinstance(a, str))
    return Program(tuple(reversed(kept)), program.outputs, program.n_inputs)


# --- LLVM ------------------------------------------------------------------------------------


def _double(x: float) -> str:
    """The exact LLVM spelling of a double (its bits in hexadecimal)."""
    (bits,) = struct.unpack("<Q", struct.pack("<d", x))
    return f"0x{bits:016X}"


def llvm_ir(program: Program) -> str:
    """LLVM IR of ``kernel(n, start, stop, first, x_0 ... x_{n_inputs-1}, out)``: for states
    i = start, start + WIDTH, ... < stop, reads x_k[j n + i ...] (inputs [n_dof, n] with n a
    multiple of WIDTH) and writes every output of state i + lane to
    out[(i + lane − first) n_out + o] (out [states, n_out], row 0 is state ``first``)."""
    vec = f"<{WIDTH} x double>"

    def operand(a):
        if isinstance(a, float):
            return "<" + ", ".join([f"double {_double(a)}"] * WIDTH) + ">"
        return f"%{a}"

    loads = sorted({(int(a[0]), int(a[1])) for _, op, a in program.ops if op == "load"})
    lines = [f"declare {vec} @llvm.{f}.v{WIDTH}f64({vec})" for f in UNARY]
    args = ", ".join(f"ptr %x{k}" for k in range(program.n_inputs))
    lines += [
        f"define void @kernel(i64 %n, i64 %start, i64 %stop, i64 %first, {args}, ptr %out) {{",
        "entry:",
    ]
    lines += [f"  %col{k}_{j} = mul i64 %n, {j}" for k, j in loads]
    lines += [
        "  %empty = icmp sge i64 %start, %stop",
        "  br i1 %empty, label %done, label %loop",
        "loop:",
        "  %i = phi i64 [%start, %entry], [%next, %loop]",
    ]
    for name, op, a in program.ops:
        if op == "load":
            k, j = int(a[0]), int(a[1])
            lines += [
                f"  %{name}.at = add i64 %i, %col{k}_{j}",
                f"  %{name}.p = getelementptr double, ptr %x{k}, i64 %{name}.at",
                f"  %{name} = load {vec}, ptr %{name}.p, align 8",
            ]
        elif op in BINARY:
            instruction = f"{BINARY[op][0]} contract {vec}"  # contract: may become an FMA
            lines.append(f"  %{name} = {instruction} {operand(a[0])}, {operand(a[1])}")
        elif op == "neg":
            lines.append(f"  %{name} = fneg {vec} {operand(a[0])}")
        else:
            lines.append(f"  %{name} = call {vec} @llvm.{op}.v{WIDTH}f64({vec} {operand(a[0])})")
    lines += _stores([operand(v) for v in program.outputs])
    lines += [
        f"  %next = add i64 %i, {WIDTH}",
        "  %more = icmp slt i64 %next, %stop",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


def _stores(values: list[str]) -> list[str]:
    """Stores of the outputs ``values`` (vectors over the WIDTH states) into the rows of
    those states: groups of four outputs are transposed in registers (four vectors over
    states -> four vectors over outputs, eight shuffles) and stored as four vectors; the
    last n_out mod 4 outputs one double at a time."""
    assert WIDTH == 4, "the 4 x 4 transpose below is written for WIDTH = 4"
    vec = f"<{WIDTH} x double>"
    n_out = len(values)
    lines = ["  %rel = sub i64 %i, %first"]
    for lane in range(WIDTH):
        lines += [
            f"  %row{lane}.0 = add i64 %rel, {lane}",
            f"  %row{lane} = mul i64 %row{lane}.0, {n_out}",
        ]
    grouped = n_out // 4 * 4
    pairs = ("<i32 0, i32 4, i32 1, i32 5>", "<i32 2, i32 6, i32 3, i32 7>")
    halves = ("<i32 0, i32 1, i32 4, i32 5>", "<i32 2, i32 3, i32 6, i32 7>")
    for o in range(0, grouped, 4):
        v = values[o : o + 4]
        g = f"%g{o}"
        lines += [
            f"  {g}.a = shufflevector {vec} {v[0]}, {vec} {v[1]}, <4 x i32> {pairs[0]}",
            f"  {g}.b = shufflevector {vec} {v[0]}, {vec} {v[1]}, <4 x i32> {pairs[1]}",
            f"  {g}.c = shufflevector {vec} {v[2]}, {vec} {v[3]}, <4 x i32> {pairs[0]}",
            f"  {g}.d = shufflevector {vec} {v[2]}, {vec} {v[3]}, <4 x i32> {pairs[1]}",
        ]
        for lane, (x, y, mask) in enumerate(
            (
                ("a", "c", halves[0]),
                ("a", "c", halves[1]),
                ("b", "d", halves[0]),
                ("b", "d", halves[1]),
            )
        ):
            lines += [
                f"  {g}.r{lane} = shufflevector {vec} {g}.{x}, {vec} {g}.{y}, <4 x i32> {mask}",
                f"  {g}.at{lane} = add i64 %row{lane}, {o}",
                f"  {g}.p{lane} = getelementptr double, ptr %out, i64 {g}.at{lane}",
                f"  store {vec} {g}.r{lane}, ptr {g}.p{lane}, align 8",
            ]
    for o in range(grouped, n_out):
        for lane in range(WIDTH):
            at = f"%o{o}.{lane}"
            lines += [
                f"  {at}.v = extractelement {vec} {values[o]}, i32 {lane}",
                f"  {at}.at = add i64 %row{lane}, {o}",
                f"  {at}.p = getelementptr double, ptr %out, i64 {at}.at",
                f"  store double {at}.v, ptr {at}.p, align 8",
            ]
    return lines


@cache
def _llvm():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm


def _target_machine():
    """A new target machine for the host CPU (an execution engine takes ownership of the
    one it is given and frees it with itself, so engines must not share one)."""
    llvm = _llvm()
    target = llvm.Target.from_default_triple()
    features = llvm.get_host_cpu_features().flatten()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features, opt=3)


def _compile(ir: str):
    """(engine, address of ``kernel``): the engine owns the machine code; keep it alive."""
    llvm = _llvm()
    module = llvm.parse_assembly(ir)
    module.verify()
    machine = _target_machine()
    passes = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    passes.getModulePassManager().run(module, passes)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    return engine, engine.get_function_address("kernel")


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="physid-fused")


class FusedKernel:
    """``kernel(X_1, ..., X_n)`` -> [n_states, n_outputs] for inputs [n_states, n_dof]: the
    compiled program, evaluated over the batch."""

    def __init__(self, program: Program, n_dof: int):
        self.program = program
        self.n_dof = n_dof
        self.n_outputs = len(program.outputs)
        self._engine, address = _compile(llvm_ir(program))
        pointers = [ctypes.c_void_p] * (program.n_inputs + 1)
        sizes = [ctypes.c_int64] * 4  # n, start, stop, first
        signature = ctypes.CFUNCTYPE(None, *sizes, *pointers)
        self._call = signature(address)

    def __call__(self, *inputs, threads: int | None = None, out=None) -> np.ndarray:
        """Every output for inputs [n_states, n_dof] each: [n_states, n_outputs], written
        into ``out`` if given (float64, C-contiguous, that shape: reusing it saves the
        allocation). ``threads``: slices of the batch run in parallel (default: one per core
        when the batch's work, states × operations, reaches ``THREAD_MIN_WORK``)."""
        columns, n = self._columns(inputs)
        if out is None:
            out = np.empty((n, self.n_outputs))
        elif (
            out.shape != (n, self.n_outputs)
            or out.dtype != np.float64
            or not out.flags.c_contiguous
        ):
            raise ValueError(
                f"out must be a C-contiguous float64 array of shape {(n, self.n_outputs)}"
            )
        padded = columns[0].shape[1]
        inputs_at = [c.ctypes.data for c in columns]
        full = n // WIDTH * WIDTH  # states written straight into out; the rest via a scratch
        if threads is None:
            work = n * max(1, len(self.program.ops))
            threads = min(os.cpu_count() or 1, max(1, int(work // THREAD_MIN_WORK)))
        cuts = [full * t // threads // WIDTH * WIDTH for t in range(threads)] + [full]

        def run(piece):
            self._call(padded, piece[0], piece[1], 0, *inputs_at, out.ctypes.data)

        if threads == 1:
            run((0, full))
        else:
            list(_pool().map(run, zip(cuts[:-1], cuts[1:], strict=True)))
        if full < n:
            scratch = np.empty((WIDTH, self.n_outputs))
            self._call(padded, full, full + WIDTH, full, *inputs_at, scratch.ctypes.data)
            out[full:] = scratch[: n - full]
        return out

    def _columns(self, inputs):
        if len(inputs) != self.program.n_inputs:
            raise TypeError(f"expected {self.program.n_inputs} arrays, got {len(inputs)}")
        arrays = [np.asarray(x, float) for x in inputs]
        n = arrays[0].shape[0] if arrays[0].ndim == 2 else -1
        for k, x in enumerate(arrays):
            if x.shape != (n, self.n_dof):
                raise ValueError(
                    f"input {k} has shape {x.shape}; every input must be [n_states, "
                    f"{self.n_dof}] with the same n_states"
                )
            if not np.all(np.isfinite(x)):
                raise ValueError(
                    f"input {k} holds NaN or infinity; the fused kernels need finite states"
                )
        padded = -(-max(n, 1) // WIDTH) * WIDTH
        columns = []
        for x in arrays:
            c = np.zeros((self.n_dof, padded))
            c[:, :n] = x.T
            columns.append(c)
        return columns, n


def _kernel(columns_of, tree: Tree, params: TreeParams) -> FusedKernel:
    program = trace(lambda *x: columns_of(tree, params, *x, barriers=False), 3, tree.n_dof)
    return FusedKernel(program, tree.n_dof)


def rnea_fused(tree: Tree, params: TreeParams) -> FusedKernel:
    """τ = rnea_fused(tree, params)(Q, Q̇, Q̈): [n_states, n_dof] (N m or N), as
    ``batched.rnea_batch`` with ``params`` fixed."""
    return _kernel(batched.rnea_columns, tree, params)


def aba_fused(tree: Tree, params: TreeParams) -> FusedKernel:
    """q̈ = aba_fused(tree, params)(Q, Q̇, τ): [n_states, n_dof], as ``batched.aba_batch``."""
    return _kernel(batched.aba_columns, tree, params)


def regressor_fused(tree: Tree, params: TreeParams) -> Callable:
    """Y = regressor_fused(tree, params)(Q, Q̇, Q̈): [n_states, n_dof, 10 n_bodies], as
    ``batched.regressor_batch`` (only the kinematic parameters of ``params`` matter)."""
    kernel = _kernel(batched.regressor_columns, tree, params)

    def regressor(Q, Qd, Qdd, threads: int | None = None, out=None):
        flat = None if out is None else out.reshape(out.shape[0], -1)
        if flat is not None and not np.shares_memory(flat, out):
            raise ValueError("out must be a C-contiguous [n_states, n_dof, 10 n_bodies] array")
        Y = kernel(Q, Qd, Qdd, threads=threads, out=flat)
        return Y.reshape(Y.shape[0], tree.n_dof, 10 * tree.n_bodies)

    return regressor
