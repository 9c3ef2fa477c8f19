"""Will an environment's build context build? Offline, from the Dockerfile or conda file alone.

What is checked, for every package a build context installs with pip:

* it is pinned to one version (an environment version must mean one image);
* PyPI has a wheel for the base image's Python, glibc and x86_64, or a source distribution whose
  ``Requires-Python`` admits that Python: otherwise pip fails ("No matching distribution"), the case of
  ``tensorflow[and-cuda]==2.15.1`` on the Python 3.8 of ``openmpi4.1.0-cuda11.8``;
* packages whose build needs a framework (Horovod needs torch to build its PyTorch ops) are built with
  ``--no-build-isolation``, after the framework, with their ``HOROVOD_WITH_*`` switch on: pip otherwise
  builds them in an isolated environment without the framework;
* no two pins are a known-broken combination (Horovod 0.28.1 with torch >= 2.1);
* the base image is known and maintained.

The facts come from files under ``tests/fixtures/environments/``: ``base-images.json`` (each base image's
Python, glibc and status, with sources) and ``pypi-files.json`` (the files PyPI's simple index lists for each
pinned version, recorded by ``record_pypi.py``). Nothing here touches the network.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from packaging import tags
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename

FIXTURES = Path(__file__).parent / "fixtures" / "environments"

BUILD_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    # package -> (framework it compiles against, the switch that makes the build require it)
    "horovod": (("torch", "HOROVOD_WITH_PYTORCH"), ("tensorflow", "HOROVOD_WITH_TENSORFLOW")),
}
"""Packages whose build imports a framework: built in pip's isolated environment they silently lose that
framework's support (Horovod) or fail. Horovod's install guide: HOROVOD_WITH_PYTORCH=1 makes the build fail
instead of skipping PyTorch."""

INCOMPATIBLE: tuple[tuple[str, str, str, str, str], ...] = (
    ("horovod", "==0.28.1", "torch", ">=2.1", "Horovod 0.28.1 does not compile against torch >= 2.1, which needs "
     "C++17 (horovod/horovod#3996, #4014; the fix #3998 is merged but unreleased)"),
)
"""(package, its versions, other package, its versions, why): pins that cannot be built together."""

_PIP = re.compile(r"(^|/)pip3?$")
_OPTIONS_WITH_VALUE = {"-i", "--index-url", "--extra-index-url", "-c", "--constraint", "-r", "--requirement",
                       "-t", "--target", "-f", "--find-links", "--prefix", "--root", "--platform",
                       "--python-version", "--implementation", "--abi", "--progress-bar", "--cache-dir"}
_CONDA_PYTHON = re.compile(r"^python(?:==?|=)(\d+\.\d+)")


@dataclass(frozen=True)
class Install:
    """One requirement of one ``pip install``."""

    requirement: Requirement
    step: int
    """Which RUN instruction (0-based): a later step sees what an earlier one installed."""
    no_build_isolation: bool
    env: dict[str, str]
    where: str


@dataclass
class BuildContext:
    source: str
    base: str | None = None
    python: str | None = None
    """The Python the installs go into when the context creates its own (``conda create python=3.10``)."""
    installs: list[Install] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)


@cache
def base_images() -> dict[str, dict[str, str]]:
    return json.loads((FIXTURES / "base-images.json").read_text())["images"]


@cache
def recorded_files() -> dict[str, dict[str, list[dict[str, str | None]]]]:
    return json.loads((FIXTURES / "pypi-files.json").read_text())["packages"]


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[int, str, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, rest = pending.partition(" ")
        out.append((start, keyword.upper(), rest.strip()))
        pending = ""
    return out


def _pip_installs(command: list[str], step: int, where: str, context: BuildContext) -> None:
    env: dict[str, str] = {}
    words = list(command)
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if words[:1] == ["conda"] and "create" in words:
        for word in words:
            match = _CONDA_PYTHON.match(word)
            if match:
                context.python = match.group(1)
        return
    if len(words) >= 3 and words[0].startswith("python") and words[1:3] == ["-m", "pip"]:
        words = ["pip", *words[3:]]
    if not (words and _PIP.search(words[0]) and words[1:2] == ["install"]):
        return
    args = iter(words[2:])
    no_isolation = False
    for arg in args:
        if arg == "--no-build-isolation":
            no_isolation = True
        elif arg in ("-r", "--requirement"):
            context.unparsed.append(f"{where}: requirements file {next(args, '?')} (list the pins in the Dockerfile)")
        elif arg in _OPTIONS_WITH_VALUE:
            next(args, None)
        elif arg.startswith("-"):
            continue
        else:
            try:
                context.installs.append(Install(Requirement(arg), step, False, env, where))
            except InvalidRequirement as err:
                context.unparsed.append(f"{where}: cannot read requirement {arg!r}: {err}")
    if no_isolation:
        context.installs[:] = [
            Install(i.requirement, i.step, True, i.env, i.where) if i.step == step and i.where == where else i
            for i in context.installs
        ]


def parse_dockerfile(path: Path, shown: str | None = None) -> BuildContext:
    shown = shown or str(path)
    context = BuildContext(source=shown)
    step = 0
    for line, keyword, rest in _instructions(path.read_text()):
        if keyword == "FROM":
            context.base = rest.split()[0]
        elif keyword == "RUN":
            try:
                words = shlex.split(rest)
            except ValueError as err:
                context.unparsed.append(f"{shown}:{line}: {err}")
                continue
            command: list[str] = []
            for word in [*words, "&&"]:
                if word in ("&&", ";", "||"):
                    if command:
                        _pip_installs(command, step, f"{shown}:{line}", context)
                    command = []
                else:
                    command.append(word)
            step += 1
    return context


def parse_conda(path: Path, base: str | None, shown: str | None = None) -> BuildContext:
    shown = shown or str(path)
    context = BuildContext(source=shown, base=base)
    data: Any = yaml.safe_load(path.read_text()) or {}
    for dependency in data.get("dependencies", []) or []:
        if isinstance(dependency, str):
            match = _CONDA_PYTHON.match(dependency.replace(" ", ""))
            if match:
                context.python = match.group(1)
        elif isinstance(dependency, dict):
            for spec in dependency.get("pip", []) or []:
                try:
                    # Azure ML installs the pip list with one `pip install -r`: one step, isolated builds.
                    context.installs.append(Install(Requirement(str(spec)), 0, False, {}, f"{shown}: pip"))
                except InvalidRequirement as err:
                    context.unparsed.append(f"{shown}: cannot read requirement {spec!r}: {err}")
    return context


def supported_tags(python: str, glibc: str) -> frozenset[tags.Tag]:
    """Wheel tags pip accepts for CPython ``python`` on x86_64 Linux with ``glibc``."""
    major, minor = (int(p) for p in python.split("."))
    glibc_minor = int(glibc.split(".")[1])
    platforms = [f"manylinux_2_{m}_x86_64" for m in range(glibc_minor, 4, -1)]
    platforms += [legacy for legacy, needs in (("manylinux2014_x86_64", 17), ("manylinux2010_x86_64", 12),
                                                ("manylinux1_x86_64", 5)) if glibc_minor >= needs]
    platforms.append("linux_x86_64")
    version = (major, minor)
    return frozenset([*tags.cpython_tags(version, platforms=platforms),
                      *tags.compatible_tags(version, interpreter=f"cp{major}{minor}", platforms=platforms)])


def _pinned(requirement: Requirement) -> str | None:
    specs = list(requirement.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def problems(context: BuildContext) -> list[str]:
    """Why the context would not build (empty when it would), each naming the file and the package."""
    out = list(context.unparsed)
    base = base_images().get(context.base or "")
    if base is None:
        return [*out, f"{context.source}: base image {context.base!r} has no recorded Python "
                      "(add it to tests/fixtures/environments/base-images.json with its source)"]
    if base["status"] != "maintained":
        out.append(f"{context.source}: base image {context.base} is {base['status']} ({base['source']})")
    python = context.python or base["python"]
    accepted = supported_tags(python, base["glibc"])
    pins: dict[str, tuple[str, Install]] = {}
    for install in context.installs:
        name = canonicalize_name(install.requirement.name)
        label = f"{install.where}: {install.requirement}"
        if install.requirement.url:
            pins[name] = ("", install)
            out += _build_needs(name, install, context, label)
            continue
        version = _pinned(install.requirement)
        if version is None:
            out.append(f"{label} is not pinned to one version (pin it: an environment version must mean one image)")
            continue
        pins[name] = (version, install)
        files = recorded_files().get(name, {}).get(version)
        if files is None:
            out.append(f"{label}: no recorded PyPI files for {name}=={version} "
                       "(add the pin to tests/fixtures/environments/record_pypi.py and run it)")
            continue
        wheels = [f for f in files if str(f["filename"]).endswith(".whl")]
        if any(parse_wheel_filename(str(f["filename"]))[3] & accepted for f in wheels):
            continue
        sdists = [f for f in files if not str(f["filename"]).endswith(".whl")
                  and SpecifierSet(f["requires_python"] or "").contains(python)]
        if sdists:
            out += _build_needs(name, install, context, label)
            continue
        offered = sorted({tag.interpreter for f in wheels for tag in parse_wheel_filename(str(f["filename"]))[3]})
        out.append(f"{label}: no wheel for Python {python} (glibc {base['glibc']}, x86_64) and no source "
                   f"distribution; PyPI has {', '.join(offered) or 'nothing'} for it")
    for package, versions, other, other_versions, why in INCOMPATIBLE:
        mine, theirs = pins.get(package), pins.get(other)
        if mine and theirs and mine[0] and theirs[0] and SpecifierSet(versions).contains(mine[0]) \
                and SpecifierSet(other_versions).contains(theirs[0]):
            out.append(f"{mine[1].where}: {package}=={mine[0]} with {other}=={theirs[0]}: {why}")
    return out


def _build_needs(name: str, install: Install, context: BuildContext, label: str) -> list[str]:
    """Problems of building ``name`` from source when its build must see a framework."""
    out = []
    for framework, switch in BUILD_NEEDS.get(name, ()):
        wanted = install.env.get(switch) == "1"
        earlier = any(canonicalize_name(i.requirement.name) == framework and i.step < install.step
                      for i in context.installs)
        if not wanted:
            continue
        if not install.no_build_isolation:
            out.append(f"{label}: built from source in pip's isolated build environment, which has no {framework}; "
                       "install it with --no-build-isolation")
        if not earlier:
            out.append(f"{label}: {switch}=1 but {framework} is not installed in an earlier step; "
                       f"install {framework} first")
    if name in BUILD_NEEDS and not any(install.env.get(s) == "1" for _, s in BUILD_NEEDS[name]):
        frameworks = " or ".join(s for _, s in BUILD_NEEDS[name])
        out.append(f"{label}: built from source without {frameworks}=1: the build silently leaves out "
                   "framework support it cannot find")
    return out
