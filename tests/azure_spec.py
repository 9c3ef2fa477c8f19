"""Azure REST API definitions (Swagger 2.0, as Azure/azure-rest-api-specs writes them) as JSON Schema validators.

Swagger's ``allOf`` + ``additionalProperties: false`` and its ``discriminator`` (a property naming which
derived definition an object is) are not JSON Schema; :func:`validator` turns them into it: each definition is
flattened with its ``allOf`` parents into one object schema, a ``$ref`` to a discriminated base becomes "the
definition whose ``x-ms-discriminator-value`` the object names" (an object naming none of the excerpted ones is
invalid), ``x-nullable`` admits ``null``, and in a request a ``readOnly`` property is refused.
References to other files (``../common-types/...``) are left unchecked; a body using a definition of this file
the excerpt left out is invalid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

Schema = dict[str, Any]


class _Converter:
    def __init__(self, definitions: dict[str, Any], *, request: bool) -> None:
        self.definitions = definitions
        self.request = request
        self.subtypes: dict[str, dict[str, str]] = {}
        for name in definitions:
            for base in self._bases(name):
                field = definitions[base].get("discriminator")
                if field:
                    value = definitions[name].get("x-ms-discriminator-value", name)
                    self.subtypes.setdefault(base, {})[value] = name

    def _bases(self, name: str) -> list[str]:
        found = []
        for parent in self.definitions[name].get("allOf", []):
            ref = parent.get("$ref", "")
            if ref.startswith("#/definitions/"):
                base = ref.removeprefix("#/definitions/")
                found += [base, *self._bases(base)]
        return found

    def flat(self, name: str) -> Schema:
        """The definition with its ``allOf`` parents' properties and required keys, as one object."""
        definition = self.definitions[name]
        properties: dict[str, Any] = {}
        required: list[str] = []
        for parent in definition.get("allOf", []):
            ref = parent.get("$ref", "")
            if ref.startswith("#/definitions/"):
                inherited = self.flat(ref.removeprefix("#/definitions/"))
                properties.update(inherited.get("properties", {}))
                required += inherited.get("required", [])
        properties.update({k: self.property(v) for k, v in definition.get("properties", {}).items()})
        required += definition.get("required", [])
        schema: Schema = {"type": "object", "properties": properties, "required": sorted(set(required))}
        if definition.get("additionalProperties") is False:
            schema["additionalProperties"] = False
        return schema

    def property(self, prop: dict[str, Any]) -> Schema | bool:
        if self.request and prop.get("readOnly"):
            return False
        schema = self.value(prop)
        return {"anyOf": [{"type": "null"}, schema]} if prop.get("x-nullable") else schema

    def value(self, prop: dict[str, Any]) -> Schema:
        ref = prop.get("$ref")
        if ref is not None:
            return self.reference(ref)
        schema = {k: v for k, v in prop.items() if k in ("type", "enum", "minLength", "pattern", "format")}
        if "items" in prop:
            schema["items"] = self.value(prop["items"])
        if isinstance(prop.get("additionalProperties"), dict):
            schema["additionalProperties"] = self.property(prop["additionalProperties"])
        if prop.get("type") == "integer":
            schema["type"] = "integer"
        return schema

    def reference(self, ref: str) -> Schema:
        if not ref.startswith("#/definitions/"):
            return {}  # common-types: outside the excerpt
        name = ref.removeprefix("#/definitions/")
        definition = self.definitions.get(name)
        if definition is None:  # a definition the excerpt left out: a body using it cannot be checked here
            return {"not": {}, "$comment": f"{name} is not in the excerpt"}
        if "enum" in definition:
            return {"type": "string", "enum": definition["enum"]}
        field = definition.get("discriminator")
        if not field:
            return self.flat(name)
        chain: Schema = {"not": {}}  # names no excerpted definition: invalid
        for value, subtype in sorted(self.subtypes.get(name, {}).items(), reverse=True):
            chain = {"if": {"properties": {field: {"const": value}}, "required": [field]},
                     "then": self.flat(subtype), "else": chain}
        return {"type": "object", "required": [field], **chain}


def validator(fixture: Path, definition: str, *, request: bool = True) -> jsonschema.protocols.Validator:
    """A validator of ``definition`` from the excerpted spec ``fixture`` (``{"definitions": {...}}``)."""
    definitions = json.loads(fixture.read_text())["definitions"]
    schema = _Converter(definitions, request=request).reference(f"#/definitions/{definition}")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)
