"""The protocol's JSON Schemas, loaded from the shipped `schemas/` folder (the single source
of truth for wire objects) and compiled once into draft 2020-12 validators."""

from __future__ import annotations

import json
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

import dhp_data

from dhp.core.canonical import SORTED_JSON, child_path
from dhp.core.errors import InvalidInput

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from referencing import Registry

# jsonschema and referencing are imported where they are used: a command that validates
# nothing (`dhp status`, `dhp --version`) starts without them.


@cache
def registry() -> Registry:
    """Every shipped schema, addressable by its `$id` for cross-schema `$ref`s."""
    from referencing import Registry, Resource

    resources = []
    for file in sorted(dhp_data.path("schemas").glob("*.json")):
        schema = json.loads(file.read_text(encoding="utf-8"))
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@cache
def schema(name: str) -> dict:
    """A shipped schema by file stem, e.g. `schema("envelope")`."""
    file = dhp_data.path("schemas", f"{name}.json")
    return json.loads(file.read_text(encoding="utf-8"))


@cache
def validator(name: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(_inlined(schema(name)), registry=registry(),
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def _inlined(node: Any) -> Any:
    """`node` with each `$ref` to a shipped schema that has no `$ref` of its own replaced by
    an `allOf` of that schema's keywords: the same meaning in draft 2020-12 (`$ref` applies
    the target in place), without a registry lookup on every validation (a third of a
    dispatch's validation time). Targets that refer further are left as references."""
    if isinstance(node, list):
        return [_inlined(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _inlined(value) for key, value in node.items()}
    ref = node.get("$ref")
    target = _shipped_by_id().get(ref) if isinstance(ref, str) else None
    if target is not None and '"$ref"' not in json.dumps(target):
        body = {k: v for k, v in target.items() if k not in ("$id", "$schema")}
        del out["$ref"]
        out["allOf"] = [*out.get("allOf", []), body]
    return out


@cache
def _shipped_by_id() -> dict[str, dict]:
    return {s["$id"]: s for s in (json.loads(f.read_text(encoding="utf-8"))
                                  for f in dhp_data.path("schemas").glob("*.json"))}


def json_path(error: Any) -> str:
    """`$.a.b[0]`-style path of a jsonschema error."""
    out = "$"
    for part in error.absolute_path:
        out = child_path(out, part)
    return out


def errors(name: str, instance: Any) -> list[dict]:
    """Every violation of schema `name` as `{"path", "message"}`, in document order."""
    if validator(name).is_valid(instance):  # stops at the first error: cheap when valid
        return []
    found = sorted(validator(name).iter_errors(instance),
                   key=lambda e: [str(p) for p in e.absolute_path])
    return [{"path": json_path(e), "message": e.message} for e in found]


# Schema keywords that cannot look inside a member's value other than through `properties`.
_SHALLOW_ROOT = {"$schema", "$id", "title", "description", "type", "properties", "required",
                 "additionalProperties", "examples"}


@cache
def _checks_only_object_type(name: str, member: str) -> bool:
    """True when schema `name` checks of `member` that it is an object, nothing inside it
    (read from the schema, so a schema that starts to look inside turns this off)."""
    root = schema(name)
    sub = root.get("properties", {}).get(member)
    return set(root) <= _SHALLOW_ROOT and isinstance(sub, dict) \
        and set(sub) <= {"description", "type"} and sub.get("type") == "object"


def shape_key(name: str, instance: Any, member: str) -> str | None:
    """A text that decides whether `instance`, a JSON value, is valid against schema `name`,
    without the content of `member`, which that schema does not look into: the JSON of the
    instance with `member` emptied (sorted keys: one text per value). Instances that differ
    only inside `member` share a key, so a verdict can be cached by it. None when the schema
    does look into `member`, or `member` is not an object."""
    if type(instance) is dict and type(instance.get(member)) is dict \
            and _checks_only_object_type(name, member):
        return SORTED_JSON.encode({**instance, member: {}})
    return None


def check(name: str, instance: Any, *, requirement: str) -> None:
    """Raise `InvalidInput` listing every violation of schema `name`."""
    found = errors(name, instance)
    if found:
        listing = "; ".join(f"{e['path']}: {e['message']}" for e in found)
        raise InvalidInput(f"not a valid {name}: {listing}", requirement=requirement,
                           details=found)


def user_schema_validator(output_schema: dict) -> Draft202012Validator:
    """A validator for a handoff's output schema; refuses a schema that is itself invalid.
    Compiled once per distinct schema: meta-validation costs more than a whole dispatch."""
    return _compiled_user_schema(json.dumps(output_schema, sort_keys=True))


@lru_cache(maxsize=256)  # bounded: a long-lived process may see any number of schemas
def _compiled_user_schema(text: str) -> Draft202012Validator:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from referencing import Registry

    output_schema = json.loads(text)
    try:
        Draft202012Validator.check_schema(output_schema)
    except SchemaError as exc:  # raised, so never cached
        raise InvalidInput(f"output_schema is not a valid JSON Schema 2020-12: {exc.message}",
                           requirement="DHP-ENV-004") from None
    except RecursionError:
        raise InvalidInput("output_schema is nested too deeply to check",
                           requirement="DHP-LIM-004") from None
    outside = _outside_refs(output_schema)
    if outside:
        raise InvalidInput(f"output_schema refers outside itself ({outside[0]!r}); only "
                           "references inside the schema are resolved, nothing is fetched",
                           requirement="DHP-SEC-003")
    # An empty registry: no retrieval, so even a reference missed above is never fetched.
    return Draft202012Validator(output_schema, registry=Registry(),
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def _outside_refs(output_schema: Any) -> list[str]:
    """The `$ref` / `$dynamicRef` values that do not resolve inside the schema itself
    (network, file or relative references; DHP-SEC-003), found without fetching anything."""
    from referencing import Registry, Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    found: list[str] = []

    def walk(resource: Resource, resolver: Any) -> None:
        contents = resource.contents
        for key in ("$ref", "$dynamicRef"):
            ref = contents.get(key) if isinstance(contents, dict) else None
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    found.append(ref)
        for sub in resource.subresources():
            walk(sub, resolver.in_subresource(sub))

    root = DRAFT202012.create_resource(output_schema)
    walk(root, Registry().resolver_with_root(root))  # Registry() retrieves nothing
    return found
