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

import re
import string
from collections.abc import Callable
from typing import Any

from pydantic import BeforeValidator


def _per_item(convert: Callable[[str], str]) -> Callable[[Any], Any]:
    """``convert`` each comma-separated part of a string (azure-ai-ml's ``_csv_parser``); other values pass."""

    def transform(value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        return ",".join(convert(part.strip()) for part in value.split(","))

    return transform


def _camel_to_snake(text: str) -> str:
    text = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", text)
    return re.sub("([a-z0-9])([A-Z])", r"\1_\2", text).lower()


def _snake_to_pascal(text: str) -> str:
    return string.capwords(text.replace("_", " ")).replace(" ", "")


lower = _per_item(str.lower)
camel_to_snake = _per_item(_camel_to_snake)
snake_to_pascal = _per_item(_snake_to_pascal)

AnyCase = BeforeValidator(lower)
"""For ``Annotated[Literal[...], AnyCase]``: lower-case values Azure ML compares case-insensitively."""
CamelOrSnakeCase = BeforeValidator(camel_to_snake)
"""Identity types: ``SystemAssigned`` and ``system_assigned`` alike."""
SnakeOrPascalCase = BeforeValidator(snake_to_pascal)
"""``public_network_access``: ``disabled`` and ``Disabled`` alike."""
