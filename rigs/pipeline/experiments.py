"""Find the experiments in a folder of recordings (``physid process``).

With a manifest ``experiments.toml``, every ``[experiments.NAME]`` table names its files::

    [experiments.swing3]
    rig = "furuta.toml"            # a spec file (relative to the folder) or a built-in rig name
    encoder = ["swing3.bin"]       # encoder captures (.bin) or parsed logs (.csv)
    video = "swing3.mp4"           # camera video(s)
    calibration = "camera.json"    # camera model, or ...
    calibration_video = "calib.avi"  # ... a checkerboard video to calibrate from,
    board = "9x6"                  #     with its inner corners
    square = { value = 20, unit = "mm" }  # and square size
    set = { mu = "0.3", "method.sigma_pos" = "0.1 mm" }  # any spec table, as --set
    window = { value = [0, 350], unit = "ms" }   # optional: identify on this time span only
    truth = "swing3.truth.json"    # optional ground truth (synthetic data), shown in reports

Without a manifest, files that share a stem form one experiment (``run1.mp4`` + ``run1.bin``),
the folder's only rig spec (``*.toml``) and ``camera.json`` are used, and a video named
``calibration*`` is never an experiment. Whatever is ambiguous or missing becomes a problem
of that experiment (naming the files), so one bad experiment never stops the others.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from physid.errors import InputError

MANIFEST = "experiments.toml"
VIDEO_SUFFIXES = (".avi", ".mp4", ".mkv", ".mov")
ENCODER_SUFFIXES = (".bin",)
CSV_SUFFIX = ".csv"
_KEYS = {
    "rig",
    "encoder",
    "video",
    "poses",
    "calibration",
    "calibration_video",
    "board",
    "square",
    "set",
    "truth",
    "window",
}


@dataclass(frozen=True)
class Experiment:
    """One experiment's inputs. Paths are absolute; ``rig`` is a spec path or a built-in name;
    ``square`` is the checkerboard square (m); ``problems`` say why it cannot run (empty if
    it can)."""

    name: str
    folder: Path
    rig: str | None = None
    encoders: tuple[Path, ...] = ()
    videos: tuple[Path, ...] = ()
    poses: tuple[Path, ...] = ()
    calibration: Path | None = None
    calibration_video: Path | None = None
    board: str | None = None
    square: float | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    truth: Path | None = None
    problems: tuple[str, ...] = ()
    outside: tuple[Path, ...] = ()  # inputs outside the folder, allowed by --allow-outside
    window: tuple[float, float] | None = None
    manifest: Path | None = None

    def overrides_origin(self) -> str:
        """How the user wrote the overrides, for error messages."""
        if self.manifest is None:
            return "--set"
        return f"{self.manifest}: [experiments.{self.name}] set"

    def input_files(self) -> list[Path]:
        """Every file the result depends on (the rig spec too, when it is a file)."""
        files = [*self.encoders, *self.videos, *self.poses]
        files += [p for p in (self.calibration, self.calibration_video) if p is not None]
        spec = self.rig_path()
        if spec is not None:
            files.append(spec)
        return files

    def rig_path(self) -> Path | None:
        """The spec file behind ``rig`` (built-in specs resolve to the installed file)."""
        if self.rig is None:
            return None
        from physid.spec import resolve_spec_path

        path = resolve_spec_path(self.rig)
        return path if path.exists() else None

    def describe(self) -> dict:
        """A JSON-safe description (for reports and the input hash)."""
        raw = asdict(self)
        return json.loads(json.dumps(raw, default=str))


def discover(folder: str | Path, allow_outside: bool = False) -> list[Experiment]:
    """The experiments in ``folder`` (see the module docstring), sorted by name.

    Every experiment name must be an identifier, and every input file must resolve inside
    ``folder`` (symbolic links followed); otherwise that experiment is invalid. With
    ``allow_outside``, inputs elsewhere are used and listed in ``Experiment.outside``.
    """
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder; give the folder that holds the recordings")
    manifest = folder / MANIFEST
    found = _from_manifest(manifest) if manifest.exists() else _from_stems(folder)
    if not found:
        raise InputError(
            f"{folder}: no experiments found (no {MANIFEST}, no videos {VIDEO_SUFFIXES}, "
            f"no encoder captures {ENCODER_SUFFIXES}); see docs/pipeline.md"
        )
    found = [_confined(e, allow_outside) for e in found]
    return sorted(found, key=lambda e: e.name)


# ------------------------------------------------------------------------------ confinement


def _confined(exp: Experiment, allow_outside: bool) -> Experiment:
    """``exp`` with a problem for a name that is not an identifier and for each input that
    resolves outside its folder (unless ``allow_outside``: then they are listed in
    ``outside``, for the index)."""
    from dataclasses import replace

    from physid.rigs.pipeline.outputs import name_problem

    problems = list(exp.problems)
    bad_name = name_problem(exp.name)
    if bad_name:
        problems.append(bad_name)
    inputs = [*exp.input_files(), *([exp.truth] if exp.truth else [])]
    spec = exp.rig_path()
    if spec is not None and exp.rig is not None and not Path(exp.rig).is_absolute():
        inputs.remove(spec)  # a built-in rig name: the installed spec, not a user path
    outside = tuple(dict.fromkeys(p for p in inputs if not _is_inside(p, exp.folder)))
    if outside and not allow_outside:
        problems += [
            f"{exp.folder}: experiment {exp.name!r}: input {p} is outside the folder; move it "
            "in, or pass --allow-outside to use it (it is then listed in the index)"
            for p in outside
        ]
    return replace(exp, problems=tuple(problems), outside=outside if allow_outside else ())


def _is_inside(path: Path, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


# ------------------------------------------------------------------------------ manifest


def _from_manifest(path: Path) -> list[Experiment]:
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    table = raw.get("experiments")
    if not isinstance(table, dict) or not table:
        raise InputError(f"{path}: no [experiments.NAME] tables; see docs/pipeline.md")
    return [_manifest_entry(path, name, entry) for name, entry in table.items()]


def _manifest_entry(manifest: Path, name: str, entry) -> Experiment:
    folder = manifest.parent
    where = f"{manifest}: [experiments.{name}]"
    if not isinstance(entry, dict):
        return Experiment(name, folder, problems=(f"{where} is not a table",))
    problems = [f"{where}: unknown key {k!r}" for k in entry if k not in _KEYS]

    def files(key: str) -> tuple[Path, ...]:
        value = entry.get(key, [])
        items = [value] if isinstance(value, str) else list(value)
        paths = tuple((folder / str(v)).resolve() for v in items)
        problems.extend(f"{where}: {key} {p.name}: no such file" for p in paths if not p.exists())
        return paths

    def one(key: str) -> Path | None:
        found = files(key)
        if len(found) > 1:
            problems.append(f"{where}: {key} names {len(found)} files; give one")
        return found[0] if found else None

    rig = entry.get("rig")
    if rig is None:
        problems.append(f'{where}: no rig spec; add rig = "NAME.toml" or a built-in rig name')
    else:
        rig = _resolve_rig(folder, str(rig), where, problems)
    square = entry.get("square")
    if square is not None:
        from physid.units import to_si

        try:
            square = to_si(float(square["value"]), str(square["unit"]))
        except (KeyError, TypeError, ValueError, InputError) as exc:
            problems.append(f'{where}: square: {exc}; write square = {{ value = 20, unit = "mm" }}')
            square = None
    overrides = _overrides(entry.get("set", {}), where, problems)
    window = _window(entry.get("window"), where, problems)
    return Experiment(
        name=name,
        folder=folder,
        rig=rig,
        encoders=files("encoder"),
        videos=files("video"),
        poses=files("poses"),
        calibration=one("calibration"),
        calibration_video=one("calibration_video"),
        board=entry.get("board"),
        square=square,
        overrides=overrides,
        truth=one("truth"),
        problems=tuple(problems),
        window=window,
        manifest=manifest,
    )


def _overrides(raw, where: str, problems: list[str]) -> dict[str, str]:
    """``set`` as NAME -> "VALUE UNIT" text (a value may be written as a string, a number,
    or a table ``{ value = ..., unit = "..." }``)."""
    if not isinstance(raw, dict):
        problems.append(f'{where}: set must be a table, e.g. set = {{ mu = "0.3" }}')
        return {}
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict) and "value" in value:
            value = f"{value['value']} {value.get('unit', '')}".strip()
        out[str(key)] = str(value)
    return out


def _window(raw, where: str, problems: list[str]) -> tuple[float, float] | None:
    """``window = { value = [START, END], unit = "s" }`` (or ``[START, END]`` in s): the
    time span (s, on the recording's own clock, from its first sample) to identify on."""
    if raw is None:
        return None
    from physid.units import to_si

    hint = 'write window = { value = [0, 350], unit = "ms" }'
    try:
        if isinstance(raw, dict):
            value, unit = raw["value"], str(raw.get("unit", "s"))
        else:
            value, unit = raw, "s"
        start, end = (to_si(float(v), unit) for v in value)
    except (KeyError, TypeError, ValueError, InputError) as exc:
        problems.append(f"{where}: window: {exc}; {hint}")
        return None
    if not (math.isfinite(start) and math.isfinite(end) and end > start):
        problems.append(f"{where}: window: end must be after start ({start} s, {end} s); {hint}")
        return None
    return (start, end)


def _resolve_rig(folder: Path, rig: str, where: str, problems: list[str]) -> str | None:
    """A spec file relative to the folder, or a built-in rig name; else a problem."""
    from physid.spec import builtin_specs

    local = folder / rig
    if local.exists():
        return str(local.resolve())
    name = rig.replace("-", "_").removesuffix(".toml")
    if name in builtin_specs():
        return name
    problems.append(
        f"{where}: rig {rig!r} is neither a file in {folder} nor a built-in rig "
        f"({', '.join(builtin_specs())})"
    )
    return None


# ------------------------------------------------------------------------------ stems


def _from_stems(folder: Path) -> list[Experiment]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    specs = [p for p in files if p.suffix == ".toml"]
    camera = folder / "camera.json"
    groups: dict[str, list[Path]] = {}
    for p in files:
        recording = p.suffix.lower() in VIDEO_SUFFIXES + ENCODER_SUFFIXES + (CSV_SUFFIX,)
        if recording and not p.stem.lower().startswith("calibration"):
            groups.setdefault(p.stem, []).append(p)
    found = []
    for stem, paths in groups.items():
        problems = []
        if len(specs) == 1:
            rig = str(specs[0].resolve())
        else:
            rig = None
            listed = ", ".join(p.name for p in specs) or "none"
            problems.append(
                f"{folder}: experiment {stem!r}: need exactly one rig spec (*.toml) in the "
                f"folder, found {listed}; or name each experiment's rig in {MANIFEST}"
            )
        videos = tuple(p for p in paths if p.suffix.lower() in VIDEO_SUFFIXES)
        encoders = tuple(p for p in paths if p.suffix.lower() in ENCODER_SUFFIXES)
        csvs = tuple(p for p in paths if p.suffix.lower() == CSV_SUFFIX)
        # (a link out of the folder is not opened: it becomes an input outside the folder)
        header = ["t", "x", "y", "theta"]
        poses = tuple(p for p in csvs if _is_inside(p, folder) and _csv_header(p)[:4] == header)
        encoders += tuple(p for p in csvs if p not in poses)
        calibration = camera if camera.exists() else None
        found.append(
            Experiment(
                name=stem,
                folder=folder,
                rig=rig,
                encoders=encoders,
                videos=videos,
                poses=poses,
                calibration=calibration,
                problems=tuple(problems),
            )
        )
    return found


def _csv_header(path: Path) -> list[str]:
    try:
        with open(path) as fh:
            return [c.strip() for c in fh.readline().split(",")]
    except OSError:
        return []


# ------------------------------------------------------------------------------ input hash


def input_hash(exp: Experiment, settings: dict) -> str:
    """SHA-256 over the experiment's description, settings, physid version and the bytes of
    every input file: a re-run with the same hash can reuse the finished report."""
    from physid.estimation.estimate import physid_version

    digest = hashlib.sha256()
    head = {"experiment": exp.describe(), "settings": settings, "version": physid_version()}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for path in exp.input_files():
        digest.update(str(path.name).encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
