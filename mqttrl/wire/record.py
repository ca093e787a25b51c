"""Typed JSON records: one declaration per message gives its encoder, its decoder's checks and
its docs table, as :mod:`mqttrl.config.settings` does for the config sections.

A record is an ``attrs`` class whose fields are declared with :func:`wire_field` (a doc line each).
Decoding is written once here for every record:

- a required field (no default) that is missing or of the wrong type refuses the message
  (:class:`~mqttrl.wire.errors.Rejected`, counted by the receiver's dispatcher);
- an optional field of the wrong type (or a non-finite number) reads as absent, as receivers did
  field by field before: a nonsense counter in a heartbeat is not worth losing the liveness it
  carries;
- keys the record does not declare are ignored, so a newer sender's extra fields reach older
  receivers harmlessly.

The types a field may have are JSON's: ``int``, ``float`` (an int is taken as a float), ``str``,
``bool``, ``dict``, ``list``, or another record (a JSON object decoded by that record's rules: a
heartbeat's game report), each optionally ``| None``. A nested record that does not decode is a
field of the wrong type: absent where optional, a refusal where required.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from typing import Any, TypeVar

import attrs

from .control import decode_json, encode_json
from .errors import Rejected

R = TypeVar("R")

#: JSON's types, as the docs tables name them
_TYPE_NAMES = {int: "int", float: "float", str: "string", bool: "bool", dict: "object", list: "list"}


def wire_field(
    doc: str, default: Any = attrs.NOTHING, *, omit_none: bool = False, factory: Any = None, key: str | None = None
) -> Any:
    """A record field with its doc line. No default: required. ``omit_none``: left out of the
    message while None (optional extras, such as a real-time worker's control periods). ``key``:
    the message's key where it cannot be the attribute's name (``return``)."""
    metadata = {"doc": doc, "omit_none": omit_none, "key": key}
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def _json_type(annotation: Any) -> tuple[type, bool]:
    """``(the JSON type, whether None is allowed)`` of a field's annotation."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_type(args[0])[0], True
    base = origin or annotation
    if base not in _TYPE_NAMES and not _is_record(base):
        raise TypeError(f"a wire record field must be one of JSON's types, not {annotation!r}")
    return base, False


def _is_record(typ: Any) -> bool:
    return isinstance(typ, type) and attrs.has(typ)


def _type_name(typ: type) -> str:
    return _TYPE_NAMES.get(typ) or f"object ({typ.__name__})"


def _fits(value: Any, typ: type) -> bool:
    if _is_record(typ):
        return isinstance(value, dict)
    if isinstance(value, bool) and typ is not bool:
        return False
    if typ is float:
        return isinstance(value, int | float) and math.isfinite(value)
    return isinstance(value, typ)


def _fields(cls: type) -> tuple[attrs.Attribute, ...]:
    attrs.resolve_types(cls)
    return attrs.fields(cls)


def _key(f: attrs.Attribute) -> str:
    return f.metadata.get("key") or f.name


class _Slot(typing.NamedTuple):
    """How one field decodes: what :func:`from_json` needs of it, worked out once per record class."""

    name: str
    key: str
    typ: type
    nullable: bool
    required: bool


@functools.cache
def _slots(cls: type) -> tuple[_Slot, ...]:
    """Each field's decoding, read off the class's annotations once: a heartbeat decodes per message
    at fleet sizes, and resolving annotations is most of a small record's decode."""
    return tuple(_Slot(f.name, _key(f), *_json_type(f.type), f.default is attrs.NOTHING) for f in _fields(cls))


def from_json(cls: type[R], data: dict) -> R:
    """The record of ``cls`` in the JSON object ``data`` (see the module's rules)."""
    values: dict[str, Any] = {}
    record_type: type = cls  # as plain ``type``: mypy reads ``type[R]`` as unhashable, which _slots' cache needs
    for f in _slots(record_type):
        if f.key not in data:
            if f.required:
                raise Rejected("bad_header", f"{cls.__name__} without {f.key!r}")
            continue
        value = data[f.key]
        if value is None and f.nullable:
            values[f.name] = None
        elif not _fits(value, f.typ):
            if f.required:
                raise Rejected("bad_value", f"{cls.__name__}.{f.key}={value!r} is not {_type_name(f.typ)}")
        elif not _is_record(f.typ):
            values[f.name] = float(value) if f.typ is float else value
        elif (nested := _nested(f, value)) is not _BAD:  # an optional one that does not decode: absent
            values[f.name] = nested
    return cls(**values)


#: a nested record that did not decode (an optional field: absent)
_BAD = object()


def _nested(f: _Slot, value: dict) -> Any:
    try:
        return from_json(f.typ, value)
    except Rejected:
        if f.required:
            raise
        return _BAD


def decode(cls: type[R], payload: bytes) -> R:
    """The record of ``cls`` in a JSON message, or :class:`Rejected` naming what is wrong."""
    return from_json(cls, decode_json(payload))


def to_json(record: Any) -> dict[str, Any]:
    """The message's fields: all of them, less the ``omit_none`` ones that are None."""
    out = {}
    for f in _fields(type(record)):
        value = getattr(record, f.name)
        if value is None and f.metadata.get("omit_none"):
            continue
        out[_key(f)] = to_json(value) if _is_record(type(value)) else value
    return out


def encode(record: Any) -> bytes:
    return encode_json(to_json(record))


def fields_table(cls: type) -> str:
    """The Markdown table of a record's fields: name, JSON type, required or not, what it is."""
    rows = ["| field | type | required | what |", "|---|---|---|---|"]
    for f in _fields(cls):
        typ, nullable = _json_type(f.type)
        name = _type_name(typ) + (" or null" if nullable and not f.metadata.get("omit_none") else "")
        required = "yes" if f.default is attrs.NOTHING else ""
        rows.append(f"| `{_key(f)}` | {name} | {required} | {f.metadata.get('doc', '')} |")
    return "\n".join(rows)


class JsonRecord:
    """Mixin for records: ``decode``/``encode``/``to_json`` as methods."""

    @classmethod
    def decode(cls: type[R], payload: bytes) -> R:
        return decode(cls, payload)

    @classmethod
    def from_json(cls: type[R], data: dict) -> R:
        return from_json(cls, data)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    def given(self) -> dict[str, Any]:
        """The fields that are not None: what a sender said, for views that show only that."""
        return {k: v for k, v in to_json(self).items() if v is not None}

    def encode(self) -> bytes:
        return encode(self)
