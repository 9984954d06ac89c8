"""The installed package carries every data file the code reads.

An editable install reads data files from the source tree, so a file missing from
``[tool.setuptools.package-data]`` goes unnoticed until someone installs a wheel: the
bundled calibrations once did, and a wheel install predicted with uncalibrated
efficiencies.  setuptools expands those patterns with ``glob`` relative to the package
directory; so does this test.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import servesim
from servesim.errors import ConfigError
from servesim.perf import calibration

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(servesim.__file__).parent


def _package_data_patterns() -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["tool"]["setuptools"]["package-data"]["servesim"]


def test_every_data_file_is_declared_as_package_data():
    if PACKAGE != ROOT / "src" / "servesim":
        pytest.skip("servesim is not imported from this source tree")
    declared: set[Path] = set()
    for pattern in _package_data_patterns():
        matched = set(PACKAGE.glob(pattern))
        assert matched, f"package-data pattern {pattern!r} matches no file"
        declared |= matched
    code = (".py", ".pyc", ".pyx", ".pxd", ".c", ".so")  # sources, and the compiled core and its C
    data_files = {p for p in PACKAGE.rglob("*")
                  if p.is_file() and p.suffix not in code and "__pycache__" not in p.parts}
    missing = sorted(str(p.relative_to(PACKAGE)) for p in data_files - declared)
    assert not missing, f"not in [tool.setuptools.package-data] of pyproject.toml: {missing}"


def test_bundled_calibrations_are_among_the_declared_files():
    if PACKAGE != ROOT / "src" / "servesim":
        pytest.skip("servesim is not imported from this source tree")
    declared = {f for pattern in _package_data_patterns() for f in PACKAGE.glob(pattern)}
    assert {"default", "fit-split"} <= set(calibration.bundled_calibrations())
    for name in calibration.bundled_calibrations():
        assert calibration.bundled_calibration(name) in declared, name


def test_missing_bundled_default_is_an_error_not_an_empty_calibration(tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "DEFAULT_CALIBRATION", tmp_path / "calibrations" / "default.yaml")
    with pytest.raises(ConfigError, match="installation is incomplete"):
        calibration.load_calibration(None)
