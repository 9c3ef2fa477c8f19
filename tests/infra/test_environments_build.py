"""Every shipped environment build context builds: pinned packages have wheels (or buildable sources) for the
base image's Python, framework-dependent builds see their framework, bases are maintained. Offline: the facts
are recorded under tests/fixtures/environments/ (see tests/build_contexts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stack.config import from_stackfile
from stack.stackfile import read
from tests.build_contexts import BuildContext, parse_conda, parse_dockerfile, problems, recorded_files
from tests.conftest import shipped_stacks

ROOT = Path(__file__).resolve().parents[2]
STACKS = (ROOT / "Pulumi.dev.yaml", ROOT / "Pulumi.prod.yaml",
          *shipped_stacks("examples/multi-team"))
OLD_BASE = "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20240701.v1"
NEW_BASE = "mcr.microsoft.com/azureml/openmpi5.0-cuda12.4-ubuntu22.04:20260614.v1"
TF_BASE = "mcr.microsoft.com/azureml/curated/tensorflow-2.16-cuda12:31"


def shipped_contexts() -> dict[str, BuildContext]:
    """Every build context and conda file the shipped stacks use, by where it is."""
    found: dict[str, BuildContext] = {}
    for stack in STACKS:
        config = from_stackfile(read(stack), ROOT)
        for env in config.environments:
            if env.build is not None:
                dockerfile = Path(env.build.path) / env.build.dockerfile_path
                found[str(dockerfile)] = parse_dockerfile(ROOT / dockerfile, str(dockerfile))
            if env.conda_file is not None:
                base = env.image
                found[f"{env.conda_file} on {base}"] = parse_conda(ROOT / env.conda_file, base, env.conda_file)
    return found


SHIPPED = shipped_contexts()


def test_the_shipped_stacks_build_four_contexts() -> None:
    assert sorted(SHIPPED) == ["environments/deepspeed/Dockerfile", "environments/horovod/Dockerfile",
                               "environments/pytorch/Dockerfile", "environments/tensorflow/Dockerfile"]


@pytest.mark.parametrize("where", sorted(SHIPPED))
def test_shipped_build_context_builds(where: str) -> None:
    assert problems(SHIPPED[where]) == []


def test_horovod_is_built_after_torch_without_isolation() -> None:
    horovod = SHIPPED["environments/horovod/Dockerfile"]
    by_name = {i.requirement.name: i for i in horovod.installs}
    assert by_name["torch"].step < by_name["horovod"].step
    assert by_name["horovod"].no_build_isolation
    assert by_name["horovod"].env["HOROVOD_WITH_PYTORCH"] == "1"
    assert horovod.python == "3.10"


def test_every_recorded_pin_is_used_or_a_rejected_case() -> None:
    used = {(i.requirement.name, str(i.requirement.specifier).removeprefix("=="))
            for c in SHIPPED.values() for i in c.installs if not i.requirement.url}
    rejected = {("tensorflow", "2.15.1"), ("tensorflow", "2.16.2"), ("horovod", "0.28.1"), ("torch", "2.3.1"),
                ("torchvision", "0.18.1")}
    recorded = {(name, version) for name, versions in recorded_files().items() for version in versions}
    assert recorded == used | rejected


def context(tmp_path: Path, text: str) -> BuildContext:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return parse_dockerfile(path, "Dockerfile")


BAD = [
    pytest.param(
        f'FROM {OLD_BASE}\nRUN pip install --no-cache-dir "tensorflow[and-cuda]==2.15.1" \\\n    "azureml-mlflow"\n',
        ["is deprecated", "tensorflow[and-cuda]==2.15.1: no wheel for Python 3.8", "azureml-mlflow is not pinned"],
        id="issue-20-item-1-tensorflow-on-python-3.8",
    ),
    pytest.param(
        f"FROM {NEW_BASE}\nRUN pip install torch==2.3.1 torchvision==0.18.1 horovod==0.28.1\n",
        ["built from source without HOROVOD_WITH_PYTORCH", "horovod==0.28.1 with torch==2.3.1"],
        id="issue-20-item-2-horovod-from-one-requirements-list",
    ),
    pytest.param(
        f"FROM {NEW_BASE}\nRUN HOROVOD_WITH_PYTORCH=1 pip install torch==2.8.0 'horovod @ git+https://x/horovod@abc'\n",
        ["isolated build environment, which has no torch", "torch is not installed in an earlier step"],
        id="horovod-in-the-same-step-as-torch",
    ),
    pytest.param(f"FROM {TF_BASE}\nRUN pip install tensorflow==2.9.0\n", ["no recorded PyPI files"], id="unrecorded"),
    pytest.param("FROM ubuntu:22.04\nRUN pip install torch==2.8.0\n", ["has no recorded Python"], id="unknown-base"),
    pytest.param(f"FROM {TF_BASE}\nRUN pip install -r requirements.txt\n", ["requirements file"], id="requirements"),
    pytest.param(f"FROM {NEW_BASE}\nRUN conda create -p /env python=3.8 -y && /env/bin/pip install torch==2.8.0\n",
                 ["torch==2.8.0: no wheel for Python 3.8"], id="own-python-too-old"),
]


@pytest.mark.parametrize(("dockerfile", "expected"), BAD)
def test_a_context_that_cannot_build_is_rejected(tmp_path: Path, dockerfile: str, expected: list[str]) -> None:
    found = problems(context(tmp_path, dockerfile))
    for fragment in expected:
        assert any(fragment in p for p in found), (fragment, found)
    assert len(found) == len(expected), found


def test_a_buildable_context_passes(tmp_path: Path) -> None:
    text = f"FROM {NEW_BASE}\nRUN pip install torch==2.8.0\nRUN pip install transformers==4.44.2 accelerate==0.33.0\n"
    assert problems(context(tmp_path, text)) == []


def test_conda_file_on_the_old_base_is_rejected(tmp_path: Path) -> None:
    conda = tmp_path / "conda.yaml"
    conda.write_text("dependencies:\n  - pip\n  - pip:\n      - tensorflow==2.16.2\n")
    found = problems(parse_conda(conda, OLD_BASE, "conda.yaml"))
    assert any("tensorflow==2.16.2: no wheel for Python 3.8" in p for p in found), found
    conda.write_text("dependencies:\n  - python=3.11\n  - pip:\n      - tensorflow==2.16.2\n")
    assert [p for p in problems(parse_conda(conda, NEW_BASE, "conda.yaml")) if "tensorflow" in p] == []
