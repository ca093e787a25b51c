"""Declaring a setting once: its name, type, default, unit, one-line doc and validation.

A config section is an attrs class whose fields are made with :func:`setting`::

    @attrs.define
    class WorkerConfig:
        batch_size: int = setting(128, doc="transitions per sample message", validator=positive)

The loader (:mod:`mqttrl.config`), ``mqttrl settings``, ``--help`` and the reference tables of
docs/configuration.md all read that one declaration (:func:`describe`), and the nodes' cores
read it through typed views (:func:`view`), so a setting is added, documented and defaulted in
one edit. An algorithm plugin's hyperparameter class may use :func:`setting` too; its plain
attrs fields keep working (they simply have no doc or unit).
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Iterable
from typing import Any

import attrs

#: the key of a field's metadata under which :func:`setting` keeps its doc and unit
METADATA_KEY = "mqttrl.setting"


class ConfigError(ValueError):
    """A config key or value is wrong; the message says which and what is allowed."""


@attrs.frozen
class Help:
    """What a declaration says about its setting besides type and default."""

    doc: str
    unit: str | None = None


def setting(
    default: Any = attrs.NOTHING,
    *,
    doc: str,
    unit: str | None = None,
    validator: Callable | None = None,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """An attrs field that is a documented setting: ``doc`` is one line (markdown, as the
    reference table shows it), ``unit`` e.g. "s", "ms", "MB"; ``validator`` an attrs validator
    whose error names the key, the bad value and what is allowed (e.g. :func:`positive`).
    A mutable default is given as ``factory``."""
    if "\n" in doc or not doc.strip():
        raise ValueError(f"setting doc must be one non-empty line, got {doc!r}")
    return attrs.field(
        default=default, factory=factory, validator=validator, metadata={METADATA_KEY: Help(doc.strip(), unit)}
    )


# ---- validators: each error names the key, the bad value and what is allowed ------------------
def _allows(text: str):
    """Mark a validator with what it allows, for ``mqttrl settings`` and the reference."""

    def mark(fn):
        fn.allowed = text
        return fn

    return mark


@_allows("> 0")
def positive(inst, attribute, value):
    if value <= 0:
        raise ConfigError(f"{attribute.name}={value!r}: must be > 0")


@_allows(">= 0")
def non_negative(inst, attribute, value):
    if value < 0:
        raise ConfigError(f"{attribute.name}={value!r}: must be >= 0")


#: the seeds every generator a run seeds takes: numpy's legacy ``np.random.seed`` and Gymnasium's
#: spaces take 0 .. 2**32 - 1 only (``default_rng`` refuses a negative one, torch one past 2**64)
SEED_MAX = 2**32 - 1


@_allows(f"0 to {SEED_MAX} (2**32 - 1)")
def seed_range(inst, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SEED_MAX:
        raise ConfigError(f"{attribute.name}={value!r}: must be a whole number from 0 to {SEED_MAX} (2**32 - 1)")


@_allows("between 0 and 1")
def unit_interval(inst, attribute, value):
    if not 0 <= value <= 1:
        raise ConfigError(f"{attribute.name}={value!r}: must be between 0 and 1")


@_allows("> 0 and <= 1")
def unit_positive(inst, attribute, value):
    if not 0 < value <= 1:
        raise ConfigError(f"{attribute.name}={value!r}: must be > 0 and <= 1")


def one_of(*choices: str):
    """A validator that allows exactly ``choices``; its error lists them."""

    @_allows(" | ".join(map(json.dumps, choices)))
    def check(inst, attribute, value):
        if value not in choices:
            raise ConfigError(f"{attribute.name}={value!r}: allowed values are {', '.join(map(repr, choices))}")

    check.choices = choices
    return check


# ---- reading a declaration -------------------------------------------------------------------
@attrs.frozen
class Described:
    """One setting as the reference shows it."""

    name: str
    type: Any
    default: Any
    doc: str
    unit: str | None
    #: what the validator allows ("> 0", '"auto" | "cpu"'), or "" when it does not say
    allowed: str = ""
    #: the values a choice validator (:func:`one_of`, attrs.validators.in_) allows; None otherwise
    choices: tuple | None = None


def default_of(field: attrs.Attribute) -> Any:
    """A field's default value (a factory is called); attrs.NOTHING when it has none."""
    d = field.default
    return d.factory() if isinstance(d, attrs.Factory) else d  # type: ignore[attr-defined]


def _allowed(validator: Any) -> str:
    if validator is None:
        return ""
    text = getattr(validator, "allowed", None)
    if text:
        return text
    options = getattr(validator, "options", None)  # attrs.validators.in_
    if options is not None:
        return " | ".join(json.dumps(o) if isinstance(o, str) else repr(o) for o in options)
    inner = getattr(validator, "_validators", None)  # attrs.validators.and_
    return ", ".join(filter(None, map(_allowed, inner))) if inner else ""


def describe(cls: type, skip: Iterable[str] = ()) -> list[Described]:
    """Every field of the attrs class ``cls`` as a :class:`Described`, in declaration order; a
    plain attrs field (a third-party plugin's) has doc "" and no unit."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in attrs.fields(cls):
        if f.name in skip:
            continue
        help_ = f.metadata.get(METADATA_KEY) or Help("")
        choices = getattr(f.validator, "choices", None) or getattr(f.validator, "options", None)
        out.append(
            Described(
                name=f.name,
                type=hints.get(f.name, Any),
                default=default_of(f),
                doc=help_.doc,
                unit=help_.unit,
                allowed=_allowed(f.validator),
                choices=tuple(choices) if isinstance(choices, (list, tuple)) else None,
            )
        )
    return out


def type_name(typ: Any) -> str:
    """A type as a user reads it: "integer", "number or none", "list of integer"."""
    origin = typing.get_origin(typ)
    if origin is typing.Union or type(typ).__name__ == "UnionType":
        args = typing.get_args(typ)
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or none" if type(None) in args else "")
    if origin is typing.Literal:
        return " | ".join(map(json.dumps, typing.get_args(typ)))
    args = typing.get_args(typ)
    base = origin or typ
    names = {bool: "bool", int: "integer", float: "number", str: "string", dict: "table", list: "list", tuple: "list"}
    if base in names:
        return names[base] + (f" of {type_name(args[0])}" if base in (list, tuple) and args else "")
    return "any" if typ is Any else getattr(typ, "__name__", str(typ))


def toml_value(value: Any) -> str:
    """``value`` written as TOML (``none`` for None: TOML has no null)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}" if value else "{}"
    return repr(value)


# ---- typed views of a section ------------------------------------------------------------------
def view(*sections: type) -> Callable[[type], type]:
    """Class decorator: a frozen attrs class whose annotated fields named like a setting (or a
    property) of ``sections`` take that declaration's default and doc. The view lists only
    names and types; a type that disagrees with the declaration fails at import. Fields the
    sections do not have are declared by the view as usual (with their own defaults)."""

    def make(cls: type) -> type:
        declared = {f.name: (s, f) for s in sections for f in attrs.fields(s)}
        derived = {n: s for s in sections for n, v in vars(s).items() if isinstance(v, property)}
        for name in inspect.get_annotations(cls):
            if name in cls.__dict__:
                continue  # the view declares this one itself
            if name in declared:
                _, f = declared[name]
                setattr(cls, name, attrs.field(default=f.default, metadata=f.metadata))
            elif name in derived:
                setattr(cls, name, attrs.field(factory=lambda s=derived[name], n=name: getattr(s(), n)))
        new = attrs.frozen(cls)
        _check_types(new, sections)
        return new

    return make


def _check_types(view_cls: type, sections: tuple[type, ...]) -> None:
    hints = typing.get_type_hints(view_cls)
    for section in sections:
        theirs = typing.get_type_hints(section)
        for name, typ in hints.items():
            if name in theirs and theirs[name] != typ:
                raise TypeError(f"{view_cls.__qualname__}.{name}: {typ} but {section.__name__} declares {theirs[name]}")


def from_section(view_cls: type, section: Any, **extra: Any) -> Any:
    """An instance of ``view_cls`` holding ``section``'s values of the settings (and properties) it
    views; ``extra`` gives the fields that are not in the section (or overrides them)."""
    values = {f.name: getattr(section, f.name) for f in attrs.fields(view_cls) if hasattr(section, f.name)}
    return view_cls(**{**values, **extra})
