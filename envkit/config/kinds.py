"""The kinds of value train.yaml holds, one converter each (click's ParamType is the model), and
what one key may hold (`Field`): a key's annotation in schema.py chooses its kind (`kind_of`), and
the kind's `convert` checks a value (and converts one read from --set text) against the key's
Field, raising one line that names the key. The allowed values of a closed set are the
annotation's own (`Literal[...]`, read with get_args). No torch, no YAML."""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from envkit.errors import EnvkitError
from envkit.fsutil import check_name

AUTO = "auto"
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # torch.manual_seed, tensors and checkpoints hold 64-bit integers


def did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(str(word), sorted(options), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def describe_value(value) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


def form_fix(f: Field, where: str) -> str:
    """The `(fix: ...)` of a value of the wrong type: the form the key takes and the key written with
    one (its default when that is one), as --set or as a line of train.yaml, whichever `where` names."""
    form, example = f.kind.form, f.kind.example_for(f.default)
    path = where.rsplit(" ", 1)[-1]
    if where.startswith("--set"):
        return f"give {path} {form}, e.g. --set {path}={example}"
    return f"give {path} {form}, e.g. `{path.rpartition('.')[2]}: {example}`"


class Kind:
    """One kind of value: its name (said in "must not be empty (expected NAME)"), the form a value
    takes and an example (a wrong type's fix), and its words in the train.yaml reference."""

    name: ClassVar[str]
    form: ClassVar[str]
    example: ClassVar[Any]
    doc: ClassVar[str]
    choices: tuple | None = None  # the allowed values, where they are a closed set

    def convert(self, value: Any, f: Field, where: str, *, from_text: bool = False) -> Any:
        raise NotImplementedError

    def example_for(self, default: Any) -> Any:
        """An example of the form: the key's default where that is one."""
        if default is None or isinstance(default, (bool, list, dict)):
            return self.example
        return f"{default:g}" if isinstance(default, float) else default

    def require(self, value: Any, python_type: type, what: str, f: Field, where: str) -> Any:
        """`value` when it is a `python_type`, else the one line "expected WHAT, got ..." with the form."""
        if not isinstance(value, python_type):
            raise self.wrong(f"expected {what}, got {describe_value(value)}", f, where)
        return value

    def wrong(self, text: str, f: Field, where: str) -> EnvkitError:
        """A value of another type: one line, and the form the key takes."""
        return EnvkitError(text, where=where, fix=form_fix(f, where))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()" if self.choices is None else f"{type(self).__name__}{self.choices!r}"


def check_bounds(value: float, f: Field, where: str) -> None:
    """A number against the key's gt, min and max."""
    if f.gt is not None and not value > f.gt:
        raise EnvkitError(f"must be greater than {f.gt:g}, got {value:g}", where=where)
    if f.min is not None and value < f.min:
        raise EnvkitError(f"must be at least {f.min:g}, got {value:g}", where=where)
    if f.max is not None and value > f.max:
        raise EnvkitError(f"must be at most {f.max:g}, got {value:g}", where=where)


def not_one_of(value: Any, choices: tuple, where: str) -> EnvkitError:
    return EnvkitError(f"{value!r} is not one of {', '.join(map(str, choices))}{did_you_mean(value, choices)}", where=where)


class Bool(Kind):
    name, form, example, doc = "bool", "true or false", "true", "`true` / `false`"

    def convert(self, value, f, where, *, from_text=False):
        if isinstance(value, bool):
            return value
        raise self.wrong(f"expected true or false, got {value!r}", f, where)

    def example_for(self, default):
        return ("true" if default else "false") if isinstance(default, bool) else super().example_for(default)


class AutoBool(Bool):
    """`auto` (envkit decides, or the profile has) or a yes/no."""

    name, form, example, doc = "auto_bool", "auto, true or false", "auto", "`auto` / `true` / `false`"

    def convert(self, value, f, where, *, from_text=False):
        if value is True or value is False or value == AUTO:
            return value
        raise self.wrong(f"expected auto, true or false, got {value!r}", f, where)


class Int(Kind):
    name, form, example, doc = "int", "a whole number", 1, "integer"
    expected = "an integer"

    def convert(self, value, f, where, *, from_text=False):
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and not from_text:
                value = int(value)  # YAML's 2.0; --set text is taken as written
            else:
                raise self.wrong(f"expected {self.expected}, got {describe_value(value)}", f, where)
        if not INT_MIN <= value <= INT_MAX:
            raise EnvkitError(f"{value} is outside the range the trainer can use ({INT_MIN} .. {INT_MAX}, a 64-bit integer)",
                              where=where, fix=f"use a value up to {INT_MAX}"
                              + (" (any seed in 0 .. 2**63-1 is as good as another)" if where.endswith("seed") else ""))
        check_bounds(value, f, where)
        return value


class IntOrAuto(Int):
    """A whole number, or `auto`: envkit decides it when the run starts (training.batch_size)."""

    name, form, doc = "int_auto", "a whole number or auto", "integer or `auto`"
    expected = "an integer or auto"

    def convert(self, value, f, where, *, from_text=False):
        return value if value == AUTO else super().convert(value, f, where, from_text=from_text)


class Float(Kind):
    name, form, example, doc = "float", "a number (3e-4, 0.001, 2)", 0.001, "number"

    def convert(self, value, f, where, *, from_text=False):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str) and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+", value.strip()):
                value = float(value)  # YAML 1.1 reads `3e-4` (no dot) as a string
            else:
                raise self.wrong(f"expected a number, got {describe_value(value)}", f, where)
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise EnvkitError("must be a finite number", where=where)
        check_bounds(value, f, where)
        return value


class Str(Kind):
    name, form, example, doc = "str", "text", "name", "string"

    def convert(self, value, f, where, *, from_text=False):
        return self.require(value, str, "a string", f, where)


class Name(Str):
    """One folder name: not '.', '..', empty or holding '/' (experiment.name)."""

    name, form, doc = "name", "a folder name", "folder name"

    def convert(self, value, f, where, *, from_text=False):
        check_name(super().convert(value, f, where), where)
        return value


class Choice(Str):
    """One of a closed set of strings: the field's Literal[...]."""

    def __init__(self, choices: tuple[str, ...]):
        self.choices = self.allowed = choices

    def convert(self, value, f, where, *, from_text=False):
        value = super().convert(value, f, where)
        if value not in self.allowed:
            raise not_one_of(value, self.allowed, where)
        return value


class List(Kind):
    """A list; its items each one of `choices` when the annotation is list[Literal[...]]."""

    name, form, example, doc = "list", "a list", "[a, b]", "list"

    def __init__(self, choices: tuple | None = None):
        self.choices = choices

    def convert(self, value, f, where, *, from_text=False):
        self.require(value, list, "a list", f, where)
        allowed = self.choices or ()
        for item in value if self.choices is not None else ():
            if item not in allowed:
                raise not_one_of(item, allowed, where)
        return value

    def example_for(self, default):
        return self.example


class Dict(Kind):
    name, form, example, doc = "dict", "a mapping", "{key: value}", "mapping"

    def convert(self, value, f, where, *, from_text=False):
        return self.require(value, dict, "a mapping", f, where)

    def example_for(self, default):
        return self.example


# The annotations of train.yaml's keys with no plain Python type of their own
AutoOrBool = Literal["auto"] | bool
IntAuto = int | Literal["auto"]
FolderName = Annotated[str, Name()]

_PLAIN: dict[Any, Kind] = {bool: Bool(), int: Int(), float: Float(), str: Str(), dict: Dict(), list: List()}


def kind_of(hint: Any) -> tuple[Kind, bool]:
    """The kind of value an annotation holds, and whether it may be null (`X | None`)."""
    if get_origin(hint) is Annotated:
        return next(k for k in get_args(hint)[1:] if isinstance(k, Kind)), False
    members = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    nullable = type(None) in members
    members = tuple(m for m in members if m is not type(None))
    literals = tuple(v for m in members if get_origin(m) is Literal for v in get_args(m))
    plain = [m for m in members if get_origin(m) is not Literal]
    if len(plain) == 1 and get_origin(plain[0]) is list:  # list[Literal[...]]: each item one of them
        items = get_args(plain[0])
        return List(get_args(items[0]) if items and get_origin(items[0]) is Literal else None), nullable
    if literals == (AUTO,) and plain in ([bool], [int]):
        return (AutoBool() if plain == [bool] else IntOrAuto()), nullable
    if literals and not plain:
        return Choice(literals), nullable
    if len(plain) == 1 and not literals and plain[0] in _PLAIN:
        return _PLAIN[plain[0]], nullable
    raise TypeError(f"no kind of train.yaml value for the annotation {hint!r}")


@dataclass(frozen=True)
class Field:
    """What train.yaml may hold at one key (a dataclass field's metadata["spec"]); its kind of value
    and whether it may be null are read from the field's annotation when SCHEMA is built."""

    default: Any = None
    min: float | None = None
    max: float | None = None
    gt: float | None = None  # strictly greater than
    help: str = ""
    kind: Kind = Kind()  # read from the annotation (kind_of) when SCHEMA is built
    nullable: bool = False  # the annotation is `X | None`

    def typed(self, annotation: Any) -> Field:
        kind, nullable = kind_of(annotation)
        return dataclasses.replace(self, kind=kind, nullable=nullable)

    @property
    def choices(self) -> tuple | None:
        """The allowed values of a closed set (the annotation's Literal), else None."""
        return self.kind.choices
