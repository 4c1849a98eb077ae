"""What a user installing the package gets: Apache-2.0, named in the metadata; the native module
does not depend on libtorch."""

import os
import pathlib
import re
import subprocess

import weft

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_license_is_apache_2_and_the_metadata_says_so():
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'license = \{ text = "Apache-2.0" \}', pyproject)
    assert "scikit_build_core.build" in pyproject and "nanobind" in pyproject


def test_the_native_module_does_not_link_libtorch():
    native = next(pathlib.Path(weft.__file__).parent.glob("_native*.so"))
    needed = subprocess.run(["ldd", str(native)], capture_output=True, text=True).stdout
    assert "libtorch" not in needed and "libc10" not in needed
    assert "libweft" in needed


def test_the_suites_travel_with_the_package():
    suites = pathlib.Path(weft.__file__).parent / "suites"
    assert (suites / "default.json").exists() and (suites / "flux_gpt3.json").exists()
    assert os.path.getsize(suites / "default.json") > 0
