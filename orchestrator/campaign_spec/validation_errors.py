"""A pydantic validation error of a spec as the lines a person reads: file, key path, problem
and the allowed values, one line each, with other tools' names and unsupported features named
(what `spec_from_dict` raises as its SpecError)."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.common.errors import excerpt
from orchestrator.campaign_spec.campaign import CampaignSpec
from orchestrator.campaign_spec.unsupported import our_name, unsupported_feature

MAX_PROBLEMS = 5  # a spec's problems described together, one line each


def describe(exc: ValidationError, source: str, within: tuple[str, ...] = ()) -> str:
    """Each of a spec's problems as a line (file, key path, problem, allowed values), so one
    run names them all: the first error of each section entry (a union's other branches
    only restate it); `within`: the key path of the section that was validated on its own."""
    first: dict[tuple, dict] = {}
    for err in exc.errors():
        first.setdefault(tuple(err["loc"][:2]), err)
    lines = [_describe_one(err, source, within) for err in first.values()]
    return "\n".join(dict.fromkeys(lines[:MAX_PROBLEMS]))


def _describe_one(err: dict, source: str, within: tuple[str, ...]) -> str:
    err = {**err, "loc": (*within, *err["loc"])}
    msg = err["msg"].removeprefix("Value error, ")
    if not err["loc"]:  # cross-field checks, each message line starting with its key path
        return "\n".join(f"{source}: {line}" for line in msg.splitlines())
    if err["type"] == "extra_forbidden":
        path, model, tagged = _walk(err["loc"][:-1])
        key = ".".join(path + [excerpt(str(err["loc"][-1]), 40, quote=False)])
        if feature := unsupported_feature(path + [str(err["loc"][-1])]):
            return f"{source}: {key}: {feature} is not supported yet; remove the key"
        if ours := our_name(path + [str(err["loc"][-1])]):
            return f"{source}: {key}: unknown key; ParaTune calls it {ours}"
        allowed = list(getattr(model, "model_fields", {}))
        hint = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
        of_kind = f" for {path[-1]} {tagged[0]} {tagged[1]!r}" if tagged and path else ""
        return f"{source}: {key}: unknown key{of_kind}{hint}"
    path, _, _ = _walk(err["loc"])
    key = ".".join(path)
    if err["type"] == "union_tag_invalid":
        field = _field_at(err["loc"])
        tag_key = field.discriminator if field is not None else "kind"
        tags = ", ".join(_tagged_members(field)) if field is not None else ""
        return (f"{source}: {key}.{tag_key}: unknown {path[-1]} {tag_key} "
                f"{err.get('ctx', {}).get('tag')!r}; choose one of {tags}")
    if err["type"] == "missing":
        return f"{source}: {key}: required key is missing; add it"
    if err["type"] in MAPPING_ERRORS and err.get("input", ...) is None:  # `trial:`, trial=null
        field = _field_at(err["loc"])
        optional = field is not None and not field.is_required()
        give = ("a preset's name, a preset file or a mapping of its keys"
                if key in ("model", "cluster") else "its keys as a mapping")
        return (f"{source}: {key}: empty (null); give {give}"
                + (", or leave it out for the defaults" if optional else ""))
    if "input" in err and err["type"] not in ("value_error",):
        msg = f"{msg} (got {excerpt(err['input'])})"
    if err["type"] == "string_type" and not isinstance(err.get("input"), (dict, list)):
        msg += "; YAML read it as another type: put it in quotes"  # name: 2024-06-01
    elif err["type"] in NUMBER_ERRORS and _yaml_float_text(err.get("input")):
        msg += _number_hint(err["input"], whole=err["type"].startswith("int"))
    if msg.startswith((key + ".", key + ":")):  # a section's check names the key itself
        return f"{source}: {msg}"
    return f"{source}: {key}: {msg}"


NUMBER_ERRORS = ("float_type", "float_parsing", "int_type", "int_parsing")
MAPPING_ERRORS = ("model_type", "model_attributes_type", "dict_type")


def _yaml_float_text(value: Any) -> bool:
    """A string YAML 1.1 did not read as a number but Python does (3e3, 3.0e3, 1E-4)."""
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return "e" in value.lower()


def _number_hint(text: str, whole: bool) -> str:
    """How to write `text`, a number YAML read as text, so that YAML reads that number: a
    whole number in full; any other with a point and a signed exponent (1.0e+308), or in full
    where that is short. Each spelling offered is one the spec's YAML reader takes for it."""
    from decimal import Decimal, InvalidOperation

    try:
        exact = Decimal(text.replace("_", "").strip())
    except InvalidOperation:
        return ""
    said = f"; YAML reads {excerpt(text, 40, quote=False)} as text"
    value = float(exact)
    if abs(value) == float("inf") or (value == 0 and exact != 0):
        return f"{said}, out of a float's range (sizes 5e-324 to 1.8e+308); change it"
    if whole:
        if exact != exact.to_integral_value():
            return f"{said}, and it is not a whole number; give one"
        full = str(int(exact))
        return f"{said}: write it in full ({full})" if len(full) <= 24 else f"{said}; make it smaller"
    pointed = next(_with_point(f"{value:.{digits}e}") for digits in range(17)
                   if float(f"{value:.{digits}e}") == value)
    plain = f"{exact:f}"
    forms = []
    if _yaml_reads_as(pointed, value):
        forms.append(f"with a point and a signed exponent ({pointed})")
    if len(plain) <= 24 and _yaml_reads_as(plain, value):
        forms.append(f"in full ({plain})")
    return f"{said}: write it {' or '.join(forms)}" if forms else said


def _with_point(text: str) -> str:
    """`1e+308` as YAML reads a float: `1.0e+308`."""
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}"


def _yaml_reads_as(text: str, value: float) -> bool:
    """Whether the spec's YAML reader takes `text` for the number `value`."""
    import yaml

    from orchestrator.campaign_spec.yaml_input import parse_yaml

    try:
        read = parse_yaml(text)
    except yaml.YAMLError:
        return False
    return isinstance(read, (int, float)) and not isinstance(read, bool) and read == value


def _walk(loc: tuple) -> tuple[list[str], Any, tuple[str, str] | None]:
    """Follow an error location down the spec's models.

    Returns the key path as a user writes it (the tags pydantic puts in the location of a
    tagged union left out), the model at its end (None past the models), and the last
    (tag key, tag) chosen on the way, e.g. ("kind", "slurm") below `backend`.
    """
    path: list[str] = []
    model: Any = CampaignSpec
    tagged = None
    parts = [excerpt(str(p), 40, quote=False) for p in loc]
    index = 0
    while index < len(parts):
        part = parts[index]
        if isinstance(loc[index], int) and path:  # an item of a list: `configs[0]`
            path[-1] += f"[{part}]"
            index += 1
            continue
        field = getattr(model, "model_fields", {}).get(part)
        path.append(part)
        index += 1
        if field is None:
            model = None
            continue
        members = _tagged_members(field)
        if members and index < len(parts) and parts[index] in members:
            model, tagged = members[parts[index]], (field.discriminator, parts[index])
            index += 1
        else:
            model, tagged = _model_of(field.annotation), None
    return path, model, tagged


def _field_at(loc: tuple) -> Any:
    """The field the location ends at, looked up through _walk's parent model."""
    _, parent, _ = _walk(loc[:-1])
    return getattr(parent, "model_fields", {}).get(str(loc[-1]))


def _tagged_members(field: Any) -> dict[str, type[BaseModel]]:
    """tag -> model for a field that is a union chosen by a discriminator, else {}."""
    if not isinstance(getattr(field, "discriminator", None), str):
        return {}
    members = {}
    for model in typing.get_args(field.annotation):
        tag_field = getattr(model, "model_fields", {}).get(field.discriminator)
        for tag in typing.get_args(tag_field.annotation) if tag_field else ():
            members[tag] = model
    return members


def _model_of(annotation: Any) -> Any:
    """The model an annotation names, also when optional (`FidelitySpec | None`) or the items
    of a list (`list[LayoutSpec]`)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _model_of(models[0]) if len(models) == 1 else None
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return item
    return annotation