"""The wheel carries every subpackage: pyproject.toml lists each folder of the package that has an __init__.py."""

from __future__ import annotations

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from conftest import REPO


def test_every_subpackage_is_listed_in_pyproject():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {"xladiag"} | {"xladiag." + ".".join(p.parent.relative_to(REPO).parts)
                           for p in REPO.rglob("__init__.py")
                           if p.parent != REPO and p.relative_to(REPO).parts[0] not in
                           ("tests", "benchmarks", "sample_profiles", "build")
                           and not p.relative_to(REPO).parts[0].startswith(".")}
    assert found == listed, (f"missing from pyproject.toml: {sorted(found - listed)}; "
                             f"listed but gone: {sorted(listed - found)}")
    dirs = setuptools["package-dir"]
    for package in listed - {"xladiag"}:  # each top-level folder is mapped; deeper ones follow their parent
        top = ".".join(package.split(".")[:2])
        assert top in dirs, f"{top} has no package-dir entry"
