"""What a request field is besides its name, type and default: how it is given (its option, its DT_*
variable), documented (a line for --help, the long doc) and parsed. Declared once, on the field itself.

`JobSpec` (jobspec.py) declares each field as `name: type = field(default=..., metadata=describe(...))`. The
command line's options (cli/options.py), the reading of arguments and variables (`read`) and the messages
that name a field's option or variable are all made from `request_fields(JobSpec)`, so adding a field is one
edit and no field can lack its option or variable.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass
from fractions import Fraction
from typing import Any

from distributetrain.errors import InvalidInput
from distributetrain.request.fieldparsers import (
    Parser,
    format_amount,
    format_duration,
    optional,
    parse_choice,
)

# One variable per field: `DT_` + the field's name in capitals.
ENV_PREFIX = "DT_"
_KEY = "distributetrain.request"


@dataclass(frozen=True)
class _Described:
    """What `describe` stores in a dataclass field's metadata."""

    parse: Parser | None
    metavar: str | None
    help: str
    doc: str
    option: str | None
    short: str | None
    choices: tuple[str, ...]
    multiple: bool


def describe(parse: Parser | None = None, metavar: str | None = None, *, help: str, doc: str,
             option: str | None = None, short: str | None = None, choices: tuple[str, ...] = (),
             multiple: bool = False) -> dict[str, Any]:
    """The metadata of a request field. `parse`: raw text (an argument or a variable) to the typed value;
    with `choices` it may be left out (the value must be one of them). `help`: one line for --help; `doc`:
    what the field means in full. `option`: the long option when it is not --field-name; `short`: a one-letter
    alias. `multiple`: the option may be repeated, and the variable holds the values comma-separated."""
    return {_KEY: _Described(parse=parse, metavar=metavar, help=help, doc=doc, option=option, short=short,
                             choices=choices, multiple=multiple)}


@dataclass(frozen=True)
class RequestField:
    """One field of a request, resolved: all that the command line, the environment and the docs need."""

    name: str
    default: Any  # dataclasses.MISSING: required
    env: str
    option: str
    short: str | None
    metavar: str | None
    help: str
    doc: str
    choices: tuple[str, ...]
    multiple: bool
    parse: Parser

    @property
    def required(self) -> bool:
        return self.default is MISSING

    @property
    def flag(self) -> bool:
        """A true/false field: an --x/--no-x option pair."""
        return isinstance(self.default, bool)

    @property
    def default_text(self) -> str | None:
        """The default as a user would type it (parsing it gives the default back; a unit test checks that),
        None when the field is required or off by default."""
        default = self.default
        if default is MISSING or default is None or default == ():
            return None
        if isinstance(default, bool):
            return "on" if default else "off"
        if isinstance(default, Fraction):
            return format_amount(default)
        if isinstance(default, float):  # every float field with a default is a duration, in seconds
            return format_duration(default)
        if isinstance(default, tuple):
            return shlex.join(default)
        return str(default)


def request_fields(record: type) -> tuple[RequestField, ...]:
    """Every field of a dataclass whose fields were declared with `describe`, in declaration order."""
    return tuple(_resolve(spec_field) for spec_field in dataclasses.fields(record))


def _resolve(spec_field: dataclasses.Field[Any]) -> RequestField:
    described = spec_field.metadata.get(_KEY)
    if not isinstance(described, _Described):
        raise TypeError(f"request field {spec_field.name} has no describe(...) metadata")
    parse = described.parse or parse_choice(described.choices)
    if spec_field.default is None:
        parse = optional(parse)  # a field that may be unset is unset by an empty value (DT_X="")
    return RequestField(
        name=spec_field.name, default=spec_field.default, env=ENV_PREFIX + spec_field.name.upper(),
        option=described.option or "--" + spec_field.name.replace("_", "-"), short=described.short,
        metavar=described.metavar, help=described.help, doc=described.doc, choices=described.choices,
        multiple=described.multiple, parse=parse)


@dataclass(frozen=True)
class Reading:
    """The fields read from arguments and variables: the parsed values (a field left out: not given and no
    default, or not valid), where each given one came from (its option or variable), and every problem."""

    values: Mapping[str, Any]
    sources: Mapping[str, str]
    problems: tuple[str, ...]

    def check(self, heading: str) -> None:
        """Raise InvalidInput listing every problem under `heading`, if there is any."""
        if self.problems:
            raise invalid(heading, self.problems)


def invalid(heading: str, problems: Iterable[str]) -> InvalidInput:
    """The error of a bad request: every problem, one a line, under `heading`."""
    return InvalidInput(f"{heading}:\n  " + "\n  ".join(problems))


def read(fields: Iterable[RequestField], args: Mapping[str, Any], env: Mapping[str, str], *,
         given_as: Mapping[str, str] | None = None, hint: Mapping[str, str] | None = None) -> Reading:
    """Each field from its argument (args[name], None: not given), else its variable, else its default.
    Problems name the field and where the bad value came from: the option (or `given_as[name]`, e.g. a
    positional JOB) or the variable. `hint[name]`: said after a missing required field's problem."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    problems: list[str] = []
    for spec_field in fields:
        name = spec_field.name
        raw, where = args.get(name), (given_as or {}).get(name, spec_field.option)
        if raw is None and spec_field.env in env:
            raw, where = env[spec_field.env], spec_field.env
        if raw is None:
            if spec_field.required:
                more = f"; {hint[name]}" if hint and name in hint else ""
                problems.append(f"{name}: required; give {where} or set {spec_field.env}{more}")
            else:
                values[name] = spec_field.default
            continue
        sources[name] = where
        try:
            values[name] = spec_field.parse(raw)
        except (ValueError, InvalidInput) as err:
            problems.append(f"{name} ({where}): {err}")
    return Reading(values=values, sources=sources, problems=tuple(problems))
