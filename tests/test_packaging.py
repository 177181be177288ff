"""Packaging: installed, physid is the one import namespace ``physid``.

The repository keeps one folder per role and ``pyproject.toml`` maps each under ``physid``;
setuptools installs only the packages listed there, so a new sub-package that is not listed
would be missing from the wheel while every test from the checkout still passed.
"""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_installed_under_physid():
    setup = _pyproject()
    mapping = setup["package-dir"]
    expected = set()
    for name, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            expected.add(".".join([name, *rel.parts]))
    assert set(setup["packages"]) == expected
    assert all(name == "physid" or name.startswith("physid.") for name in expected)


def test_the_command_line_entry_point_is_in_the_namespace():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"physid": "physid.rigs.cli:main"}
