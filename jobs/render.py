"""Resolved specs as Azure ML CLI v2 command job files, built by azure-ai-ml itself.

Each spec becomes ``command(...)._to_job()`` and is written from that job's own serialisation, so
``az ml job create -f`` and ``azure.ai.ml.load_job`` read the file back to the same job (``amlgpu submit``
sends what ``load_job`` reads from the file).

Three corrections to azure-ai-ml's serialisation, each a place where it would
write a file that does not say what the job holds:

* ``code`` is written relative to the file's folder (``az ml job create -f`` resolves it there);
  azure-ai-ml writes the absolute path of the machine that rendered it.
* data input paths are written as declared: azure-ai-ml's serialiser prefixes ``https://``,
  ``wasbs://`` and ``abfss://`` URLs with ``azureml:``, which turns them into asset names.
* empty mappings it adds (``parameters: {}``, ``properties: {}``) are left out, as in the spec.

The files carry no ``name``: a job name can be used once per workspace, and a file that could be
submitted only once is a trap (``amlgpu submit`` names each submission ``<run>-<timestamp>``).

azure-ai-ml takes seconds to import, so it is imported only here, inside :func:`build_job`. Its serialisation is
made once per job shape and filled with each run's texts (:func:`_serialised`): the same bytes, a fraction of the time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

if TYPE_CHECKING:
    from azure.ai.ml.entities import CommandJob

SCHEMA_COMMENT = "# yaml-language-server: $schema=https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
"""Lets editors validate and complete the file without adding a key the spec does not have."""

_RENDERED_KEYS = frozenset({
    "type", "name", "display_name", "experiment_name", "description", "tags", "properties", "code", "command",
    "environment", "compute", "inputs", "outputs", "environment_variables", "resources", "distribution",
    "limits", "identity", "services", "queue_settings",
})


EXPERIMENTAL_LOGGER = "azure.ai.ml._utils._experimental"
"""Where azure-ai-ml logs "Class QueueSettings: This is an experimental class..." on the first use of each
such class: a notice for SDK users, not for someone planning a stack, and nothing they can act on."""


@contextlib.contextmanager
def quiet_azure_ai_ml() -> Iterator[None]:
    """azure-ai-ml without its notices: the experimental-class log line, and the marshmallow 4 deprecation
    warnings its own schemas raise (shown under ``python -W default`` or ``-X dev``). Errors still surface."""
    logger = logging.getLogger(EXPERIMENTAL_LOGGER)
    if logger.level != logging.ERROR:  # setLevel clears every logger's cache: 1 ms a job file on a large stack
        logger.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        try:
            from marshmallow.warnings import Marshmallow4Warning
        except ImportError:  # marshmallow 4 raises none of them
            pass
        else:
            warnings.simplefilter("ignore", Marshmallow4Warning)
        yield


def build_job(spec: dict[str, Any], *, root: Path) -> CommandJob:
    """The azure-ai-ml ``CommandJob`` for a resolved spec, ``code`` taken relative to ``root``."""
    with quiet_azure_ai_ml():
        return _build_job(spec, root=root)


def _build_job(spec: dict[str, Any], *, root: Path) -> CommandJob:
    from azure.ai.ml import Input, MpiDistribution, Output, PyTorchDistribution, TensorFlowDistribution, command
    from azure.ai.ml.entities import (
        AmlTokenConfiguration,
        BuildContext,
        Environment,
        JupyterLabJobService,
        ManagedIdentityConfiguration,
        SshJobService,
        TensorBoardJobService,
        UserIdentityConfiguration,
        VsCodeJobService,
    )

    unknown = sorted(set(spec) - _RENDERED_KEYS)
    if unknown:
        raise ValueError(f"spec keys {unknown} have no place in a command job")
    services = {
        "ssh": SshJobService, "jupyter_lab": JupyterLabJobService,
        "tensor_board": TensorBoardJobService, "vs_code": VsCodeJobService,
    }
    # Distribution objects, not the dict: given a dict, azure-ai-ml builds a four-schema union to turn it
    # into the same object, three times per job (half of what building a job cost).
    distributions = {"pytorch": PyTorchDistribution, "mpi": MpiDistribution, "tensorflow": TensorFlowDistribution}
    identities = {
        "managed_identity": ManagedIdentityConfiguration, "user_identity": UserIdentityConfiguration,
        "aml_token": AmlTokenConfiguration,
    }
    identity = dict(spec.get("identity") or {})
    distribution = dict(spec["distribution"])
    resources = spec["resources"]
    queue = spec.get("queue_settings") or {}
    environment = spec["environment"]
    if isinstance(environment, dict):  # inline: Azure ML registers it anonymously at submission
        build = environment.get("build")
        conda = environment.get("conda_file")
        environment = Environment(
            image=environment.get("image"),
            build=BuildContext(path=str(root / build["path"]), dockerfile_path=build.get("dockerfile_path"))
            if build else None,
            conda_file=str(root / conda) if conda else None,
            description=environment.get("description"),
            tags=environment.get("tags"),
        )
    node = command(
        name=spec["name"],
        display_name=spec.get("display_name"),
        experiment_name=spec.get("experiment_name"),
        description=spec.get("description"),
        tags=dict(spec.get("tags") or {}),
        properties=dict(spec.get("properties") or {}),
        code=str(root / spec["code"]) if spec.get("code") is not None else None,
        command=spec["command"],
        environment=environment,
        compute=spec["compute"],
        inputs={k: Input(**v) if isinstance(v, dict) else v for k, v in (spec.get("inputs") or {}).items()},
        outputs={k: Output(**v) for k, v in (spec.get("outputs") or {}).items()},
        environment_variables=dict(spec.get("environment_variables") or {}),
        instance_count=resources["instance_count"],
        shm_size=resources.get("shm_size"),
        docker_args=resources.get("docker_args"),
        distribution=distributions[distribution.pop("type")](**distribution),
        timeout=(spec.get("limits") or {}).get("timeout"),
        identity=identities[identity.pop("type")](**identity) if identity else None,
        services={
            name: services[fields["type"]](**{k: v for k, v in fields.items() if k != "type"})
            for name, fields in (spec.get("services") or {}).items()
        },
        job_tier=queue.get("job_tier"),
        priority=queue.get("priority"),
    )
    return node._to_job()


def _plain(value: Any) -> Any:
    """azure-ai-ml's OrderedDicts as plain, key-sorted data without empty mappings."""
    if isinstance(value, dict):
        plain = {str(k): _plain(v) for k, v in sorted(value.items())}
        return {k: v for k, v in plain.items() if v != {}}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block style; multi-line commands as literal blocks (``|``), the way people write them.

    libyaml's emitter when PyYAML has one (PyYAML's wheels do): a millisecond less per job file than
    PyYAML's own. The representers that choose styles are PyYAML's either way and the bytes are the
    same, except that libyaml escapes a few characters PyYAML writes as they are (emoji and others
    beyond the Basic Multilingual Plane as ``"\\U0001F680"``, NEL as ``"\\N"``): the same strings on reading."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump(document: dict[str, Any]) -> str:
    """A job file's body for ``document``: keys sorted, block style, lines never wrapped, text as written."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=1 << 16,
                     allow_unicode=True)


@functools.cache
def _command_job_schema() -> Any:
    """azure-ai-ml's marshmallow schema for command jobs, built once.

    ``CommandJob._to_dict()`` is ``CommandJobSchema(context={BASE_PATH_CONTEXT_KEY: "./"}).dump(job)``
    and builds that schema, hundreds of fields, for every job: 3 ms a job, most of the time a large
    stack took to render. A dump leaves the schema as it found it (the base path it pushes, it pops).
    """
    from azure.ai.ml._schema.job.command_job import CommandJobSchema
    from azure.ai.ml.constants._common import BASE_PATH_CONTEXT_KEY

    return CommandJobSchema(context={BASE_PATH_CONTEXT_KEY: "./"})


def job_document(
    spec: dict[str, Any], *, code_relative_to: Path, root: Path, with_name: bool = False
) -> dict[str, Any]:
    """What :func:`job_yaml` writes, as data: the built job's serialisation with the corrections above.

    ``name`` is left out unless ``with_name``: Azure ML job names are unique in a workspace forever, so a
    file carrying one could be submitted once only (``az ml job create -f`` then generates a name, and
    ``amlgpu submit`` gives each submission its own)."""
    document = _serialised(spec, root)
    # abspath, not resolve(): a symlinked code folder stays where the project says it is.
    if spec.get("code") is not None:
        document["code"] = _relative(root / spec["code"], code_relative_to)
    environment = spec["environment"]
    if isinstance(environment, dict) and environment.get("build"):
        document["environment"]["build"]["path"] = _relative(root / environment["build"]["path"], code_relative_to)
    for name, declared in (spec.get("inputs") or {}).items():
        if isinstance(declared, dict) and "path" in declared:
            document["inputs"][name]["path"] = declared["path"]
    if not with_name:
        document.pop("name", None)
    return document


def _schema_dump(spec: dict[str, Any], root: Path) -> dict[str, Any]:
    """azure-ai-ml's serialisation of the job built from ``spec``, as plain data."""
    job = build_job(spec, root=root)
    with quiet_azure_ai_ml():
        return cast(dict[str, Any], _plain(_command_job_schema().dump(job)))


_FREE_TEXT = ("name", "display_name", "experiment_name", "description", "command")
"""Spec keys whose text azure-ai-ml copies into the file as it is (marshmallow ``Str`` fields)..."""
_FREE_MAPPINGS = ("tags", "properties", "environment_variables")
"""...and mappings whose values it copies so (``Dict`` of ``Str``): a job's shape is the spec without them,
and without the names of the compute and the environment when they are written ``azureml:<name>[:<version>]``
(azure-ai-ml copies that form and rewrites others: ``gpu`` becomes ``azureml:gpu``, ``local`` stays)."""
_SLOT = "amlgpuslot"
_SHAPES = 1024
"""Distinct job shapes one process keeps rendered (a large stack has tens: runs differ mostly in their text)."""
_shapes: dict[tuple[str, str], dict[str, Any] | None] = {}


def _serialised(spec: dict[str, Any], root: Path) -> dict[str, Any]:
    """:func:`_schema_dump` of ``spec``, from azure-ai-ml once per distinct shape.

    Building a job and dumping it through azure-ai-ml's schema costs milliseconds, and the runs of a stack differ
    mostly in text the schema copies verbatim (their commands, names, tags, compute). Each such non-empty text is a
    slot (``amlgpuslot<n>``), the job with slots is serialised once, and each run's document is that one with
    its own texts put back. A shape whose slots do not come back as whole values (the schema changed one) is
    serialised run by run, as is every spec that already holds the slot marker; ``tests/jobs/test_render_shapes.py``
    compares both ways over every shipped, example and generated stack."""
    texts: dict[str, str] = {}

    def slot(value: Any, form: str = "{}") -> Any:
        if not isinstance(value, str) or not value:
            return value
        placeholder = form.format(f"{_SLOT}{len(texts)}")
        texts[placeholder] = value
        return placeholder

    shaped = dict(spec)
    for field, versioned in (("compute", False), ("environment", True)):
        if _asset_reference(shaped.get(field), versioned=versioned):
            shaped[field] = slot(shaped[field], "azureml:{}:1" if ":" in shaped[field][8:] else "azureml:{}")
    for field in _FREE_TEXT:
        if field in shaped:
            shaped[field] = slot(shaped[field])
    for field in _FREE_MAPPINGS:
        if isinstance(shaped.get(field), dict):
            shaped[field] = {name: slot(value) for name, value in shaped[field].items()}
    try:
        key = (json.dumps(shaped, sort_keys=True, ensure_ascii=False), str(root))
    except (TypeError, ValueError):  # not JSON data: nothing to compare shapes by
        return _schema_dump(spec, root)
    # The marker only where this function put it: as many times as there are slots, in no text and not in root.
    if key[0].count(_SLOT) != len(texts) or _SLOT in key[1] or any(_SLOT in text for text in texts.values()):
        return _schema_dump(spec, root)
    if key not in _shapes:
        if len(_shapes) >= _SHAPES:
            return _schema_dump(spec, root)
        template = _schema_dump(shaped, root)
        _shapes[key] = template if _slots_whole(template, set(texts)) else None
    cached = _shapes[key]
    if cached is None:
        return _schema_dump(spec, root)
    return cast(dict[str, Any], _filled(cached, texts))


def _asset_reference(value: Any, *, versioned: bool) -> bool:
    """``value`` is ``azureml:<name>`` (or ``azureml:<name>:<version>`` when ``versioned``), names in ASCII letters,
    digits, ``_``, ``-`` (and ``.`` in an environment's)."""
    if not isinstance(value, str) or not value.startswith("azureml:"):
        return False
    name, colon, version = value[8:].partition(":")
    if colon and not (versioned and version):
        return False
    allowed = "_-." if versioned else "_-"
    plain = all(c.isascii() and (c.isalnum() or c in allowed) for c in name + version)
    return plain and name[:1].isalnum() and name.lower() != "local"


def _slots_whole(value: Any, slots: set[str]) -> bool:
    """Every slot marker in ``value`` is a whole string value, one of ``slots``: never part of a text or a key."""
    if isinstance(value, dict):
        return all(_SLOT not in str(k) and _slots_whole(v, slots) for k, v in value.items())
    if isinstance(value, list):
        return all(_slots_whole(v, slots) for v in value)
    if isinstance(value, str) and _SLOT in value:
        return value in slots
    return True


def _filled(value: Any, texts: dict[str, str]) -> Any:
    """A copy of ``value`` with each slot replaced by its text."""
    if isinstance(value, dict):
        return {k: _filled(v, texts) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, texts) for v in value]
    if isinstance(value, str):
        return texts.get(value, value)
    return value


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(start))).as_posix()


def job_yaml(spec: dict[str, Any], *, code_relative_to: Path, root: Path, with_name: bool = False) -> str:
    """The CLI v2 command job file for ``spec``, to be written in the folder ``code_relative_to`` (without
    ``name`` unless ``with_name``: see :func:`job_document`).

    Byte-identical for the same input: keys sorted, no timestamps, no machine-specific paths.
    """
    document = job_document(spec, code_relative_to=code_relative_to, root=root, with_name=with_name)
    return SCHEMA_COMMENT + dump(document)
