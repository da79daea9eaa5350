"""What a Hugging Face Space needs from this repository: front matter that builds, binary files in LFS."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import tomllib
from pathlib import Path

import gradio
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def front_matter() -> dict[str, str]:
    """The README's YAML front matter, as Spaces reads it (flat `key: value` lines are all it holds here)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, "README.md must open with Spaces' YAML front matter"
    fields = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "-")):
            fields[key.strip()] = value.strip().strip("'\"")
    return fields


def space_python() -> Version:
    return Version(front_matter()["python_version"])


def requirements(path: Path) -> list[Requirement]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith("-")]


def installed_closure(roots: list[Requirement], python: Version) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions `roots` need on `python`, dependencies included (markers evaluated there)."""
    environment = {**default_environment(), "python_version": f"{python.major}.{python.minor}",
                   "python_full_version": str(python)}
    seen: dict[str, importlib.metadata.Distribution] = {}
    pending = list(roots)
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in seen or (requirement.marker and not requirement.marker.evaluate({**environment, "extra": ""})):
            continue
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            continue  # only needed elsewhere (e.g. CUDA wheels on a GPU machine): pip resolves those there
        seen[name] = distribution
        pending.extend(Requirement(text) for text in distribution.requires or [])
    return seen


def test_the_space_python_is_one_the_project_supports():
    requires_python = SpecifierSet(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"])
    assert space_python() in requires_python
    assert Version("3.10") not in requires_python  # no transformers>=5.23 installs on 3.10


@pytest.mark.slow
def test_every_runtime_requirement_installs_on_the_space_python():
    python = space_python()
    closure = installed_closure(requirements(ROOT / "requirements.txt"), python)
    assert {"torch", "transformers", "gradio", "charset-normalizer", "matplotlib"} <= set(closure)
    refused = {name: dist.metadata["Requires-Python"] for name, dist in closure.items()
               if dist.metadata["Requires-Python"]
               and python not in SpecifierSet(dist.metadata["Requires-Python"])}
    assert not refused, f"these do not install on Python {python}: {refused}"
    for requirement in requirements(ROOT / "requirements.txt"):
        version = importlib.metadata.version(requirement.name)
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)


def test_the_space_runs_the_gradio_we_test_with():
    fields = front_matter()
    assert fields["sdk"] == "gradio" and fields["sdk_version"] == gradio.__version__
    assert (ROOT / fields["app_file"]).is_file()


def tracked_files() -> list[str]:
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [name for name in listing.decode().split("\0") if name and (ROOT / name).is_file()]


def is_binary(path: Path) -> bool:
    head = path.read_bytes()[:8192]
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a multi-byte character cut at the 8 KB edge is still text
    return False


def lfs_filtered(names: list[str]) -> set[str]:
    out = subprocess.run(["git", "check-attr", "-z", "filter", "--", *names], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode().split("\0")
    return {out[i] for i in range(0, len(out) - 2, 3) if out[i + 2] == "lfs"}


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_every_tracked_binary_file_goes_through_lfs():
    names = tracked_files()
    binaries = [name for name in names if is_binary(ROOT / name)]
    assert "longqa/demo_model/model.safetensors" in binaries  # the check sees binaries at all
    escaped = sorted(set(binaries) - lfs_filtered(binaries))
    assert not escaped, f"binary files a Space push would refuse (add their type to .gitattributes): {escaped}"
    assert "app.py" not in lfs_filtered(["app.py", "README.md"])  # text stays text
