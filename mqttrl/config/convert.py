"""TOML and ``--set`` values to a section's declared types, by cattrs, with one-line errors.

cattrs structures a section (an attrs class) from plain data: it finds each field's type and
the hook for it, fills in defaults and gathers the errors. The hooks here make it strict where
a config must be (``1`` is not ``true``, ``1.5`` is not an integer, ``"abc"`` is not a list),
let an integer widen to a float, and read TOML's ``"none"`` as unset for an optional setting.
:func:`structure` turns whatever went wrong into one :class:`ConfigError` naming the key, the
bad value and what is allowed.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, ClassValidationError

from mqttrl.config.settings import ConfigError, type_name


class Expected(ValueError):
    """A value is not of its declared type; the message says what was expected ("an integer")."""


def _strict(kind: type, what: str, widen: tuple[type, ...] = ()):
    accepted = (kind, *widen)

    def hook(value: Any, _typ: Any) -> Any:
        if isinstance(value, accepted) and (kind is bool or not isinstance(value, bool)):
            return kind(value) if widen else value
        raise Expected(what)

    return hook


def _is_union(typ: Any) -> bool:
    return typing.get_origin(typ) is typing.Union or type(typ).__name__ == "UnionType"


def _is_sequence(typ: Any) -> bool:
    return typ in (list, tuple) or typing.get_origin(typ) in (list, tuple, Sequence)


def _is_mapping(typ: Any) -> bool:
    return typ is dict or typing.get_origin(typ) in (dict, Mapping)


def _is_opaque(typ: Any) -> bool:
    """A class cattrs has no business converting (a plugin's own type): the value is kept as given."""
    return (
        isinstance(typ, type)
        and not attrs.has(typ)
        and not issubclass(typ, (enum.Enum, PurePath, bool, int, float, str, bytes, list, tuple, dict, set))
    )


def make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(detailed_validation=True)
    conv.register_structure_hook(bool, _strict(bool, "true or false"))
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(float, _strict(float, "a number", widen=(int,)))
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(Any, lambda value, _typ: value)

    def union(value: Any, typ: Any) -> Any:
        args = typing.get_args(typ)
        # TOML has no null: an optional setting is switched off with the string "none"
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() == "none")):
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return conv.structure(value, arg)
            except (Expected, ValueError, TypeError) as e:
                errors.append(e)
        first = str(errors[0]) if errors and isinstance(errors[0], Expected) else type_name(typ)
        raise Expected(first + (" or none" if type(None) in args else ""))

    def sequence(value: Any, typ: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise Expected("a list")
        args = [a for a in typing.get_args(typ) if a is not Ellipsis]
        if len(args) == 1:
            try:
                value = [conv.structure(v, args[0]) for v in value]
            except Expected as e:
                raise Expected(f"a list of {type_name(args[0])}") from e
        return tuple(value) if (typing.get_origin(typ) or typ) is tuple else list(value)

    def mapping(value: Any, _typ: Any) -> Any:
        if not isinstance(value, Mapping):
            raise Expected("a table")
        return dict(value)

    def literal(value: Any, typ: Any) -> Any:
        choices = typing.get_args(typ)
        if value in choices:
            return value
        raise Expected(f"one of {', '.join(map(repr, choices))}")

    conv.register_structure_hook_func(_is_union, union)
    conv.register_structure_hook_func(_is_sequence, sequence)
    conv.register_structure_hook_func(_is_mapping, mapping)
    conv.register_structure_hook_func(lambda t: typing.get_origin(t) is typing.Literal, literal)
    conv.register_structure_hook_func(_is_opaque, lambda value, _typ: value)
    return conv


CONVERTER = make_converter()


def structure(cls: type, data: Mapping[str, Any], path: str) -> Any:
    """An instance of the attrs class ``cls`` from ``data`` (keys already checked), or one
    :class:`ConfigError` for the first thing wrong: a value of the wrong type, then what a
    validator refused."""
    try:
        return CONVERTER.structure(dict(data), cls)
    except ClassValidationError as group:
        raise _one_line(group, data, path) from None
    except ConfigError as e:  # raised by __attrs_post_init__ outside cattrs' detailed path
        raise ConfigError(f"{path}.{e}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: {_message(e)}") from None


def _one_line(group: ClassValidationError, data: Mapping[str, Any], path: str) -> ConfigError:
    """The error to show for a failed structure: a field's wrong type first (in the order the
    data gave the keys), else what the class itself (its validators) refused."""
    by_key = {}
    for exc in group.exceptions:
        for note in getattr(exc, "__notes__", ()):
            if isinstance(note, AttributeValidationNote):
                by_key[note.name] = exc
    for key in data:
        if key in by_key:
            exc = by_key[key]
            what = str(exc) if isinstance(exc, Expected) else _message(exc)
            return ConfigError(f"{path}.{key}={data[key]!r}: expected {what}")
    exc = group.exceptions[0]
    if isinstance(exc, ConfigError):
        return ConfigError(f"{path}.{exc}")
    if isinstance(exc, ValueError) and len(exc.args) == 4 and isinstance(exc.args[1], attrs.Attribute):
        # attrs.validators.in_: (message, attribute, options, value)
        _, attribute, options, value = exc.args
        return ConfigError(f"{path}.{attribute.name}={value!r}: allowed values are {', '.join(map(repr, options))}")
    return ConfigError(f"{path}: {_message(exc)}")


def _message(exc: BaseException) -> str:
    return str(exc.args[0]) if exc.args else type(exc).__name__
