"""Enum values spelt the ways Azure ML accepts them.

azure-ai-ml reads a CLI v2 file's enum values through a casing transform before comparing them with the
allowed values (``StringTransformedEnum`` in ``azure/ai/ml/_schema/core/fields.py``): lower case for
distribution ``type``, data ``type``/``mode``, compute ``tier``, queue settings and services; camel to
snake case for identity types (``SystemAssigned`` -> ``system_assigned``); snake to Pascal case for
``public_network_access`` (``disabled`` -> ``Disabled``). The stack model applies the same transform, so a
value ``az ml`` accepts is accepted here and written in its canonical spelling; anything else is still
refused with the allowed values listed.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from kernel import regex as linear


def _per_item(convert: Callable[[str], str]) -> Callable[[Any], Any]:
    """``convert`` each comma-separated part of a string (azure-ai-ml's ``_csv_parser``); other values pass."""

    def transform(value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        return ",".join(convert(part.strip()) for part in value.split(","))

    return transform


_WORD_START = linear.compile("(.)([A-Z][a-z]+)")
_CAPITAL_AFTER = linear.compile("([a-z0-9])([A-Z])")


def _camel_to_snake(text: str) -> str:
    """azure-ai-ml's ``_camel_to_snake_convert`` (``azure/ai/ml/_utils/utils.py``), its two patterns on RE2."""
    text = _WORD_START.sub(r"\1_\2", text)
    return _CAPITAL_AFTER.sub(r"\1_\2", text).lower()


def _snake_to_pascal(text: str) -> str:
    return string.capwords(text.replace("_", " ")).replace(" ", "")


def _snake_to_camel(text: str) -> str:
    pascal = _snake_to_pascal(text)
    return pascal[:1].lower() + pascal[1:]


def _product(forms: list[list[str]]) -> list[tuple[str, ...]]:
    return list(itertools.product(*forms))


lower = _per_item(str.lower)
camel_to_snake = _per_item(_camel_to_snake)
snake_to_pascal = _per_item(_snake_to_pascal)


@dataclass(frozen=True)
class AzureSpelling:
    """For ``Annotated[Literal[...], AzureSpelling(transform)]``: a value whose transform is one of the
    literal's values becomes that value; any other value is refused as written (the message quotes what
    the user wrote, not its transform)."""

    transform: Callable[[Any], Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        allowed = frozenset(get_args(source))

        def spell(value: Any) -> Any:
            spelt = self.transform(value)
            return spelt if isinstance(spelt, str) and spelt in allowed else value

        spell.azure_spelling = self  # type: ignore[attr-defined]  # what the editor schema reads (stack.jsonschema)
        return core_schema.no_info_before_validator_function(spell, handler(source))

    def spellings(self, value: str) -> list[str]:
        """The spellings of ``value`` this transform accepts, beyond letter case where :attr:`any_case` (the
        editor schema lists them; stack.jsonschema)."""
        items = value.split(",")
        forms = [[item, _snake_to_pascal(item), _snake_to_camel(item)] for item in items]
        candidates = {",".join(choice) for choice in _product(forms)}
        candidates |= {", ".join(choice) for choice in _product(forms)}
        return sorted(c for c in candidates if self.transform(c) == value)

    @property
    def any_case(self) -> bool:
        """Whether every letter case of a value is accepted (the transform lower-cases it)."""
        return self.transform is lower or self.transform is snake_to_pascal


AnyCase = AzureSpelling(lower)
"""Values Azure ML compares case-insensitively (``MPI``, ``Dedicated``, ``RO_MOUNT``)."""
CamelOrSnakeCase = AzureSpelling(camel_to_snake)
"""Identity types: ``SystemAssigned`` and ``system_assigned`` alike."""
SnakeOrPascalCase = AzureSpelling(snake_to_pascal)
"""``public_network_access``: ``disabled`` and ``Disabled`` alike."""
