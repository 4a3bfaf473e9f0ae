"""Click options made from the request's fields (`JobSpec`, request/fields.py): a command names a field and
gets its option names, metavar, choices, help line and default from the field, so no option is written twice.

Two kinds, by where a command's values come from:
- `env=True` (run, launch, posttraining, the job commands): the option defaults to None, "not given", and
  JobSpec or JobRef falls back to the field's DT_* variable, then to its default; the help ends in
  `[env DT_X; default Y]`.
- `env=False` (plan, inventory: previews read no variables): the option's own default is the field's.
Either way the values stay the text the user gave (click checks only choices), and the field's parser reads
them once, with the messages that name the field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from distributetrain.request.fields import RequestField
from distributetrain.request.jobspec import FIELD, FIELDS

F = TypeVar("F", bound=Callable[..., Any])
# The words after `--`, instead of --command: not a field of their own, another way to give `command`.
COMMAND_ARGS = "command_args"


def field_option(name: str, *, env: bool = True, dest: str | None = None, **click_kwargs: Any
                 ) -> Callable[[F], F]:
    """The option of the request field `name`. `dest`: the command's parameter, if not the field's name;
    `click_kwargs` add to or override what the field gives (e.g. a click type that parses the value)."""
    spec_field = FIELD[name]
    kwargs: dict[str, Any] = {"metavar": spec_field.metavar, "multiple": spec_field.multiple}
    if spec_field.choices:
        kwargs["type"] = click.Choice(spec_field.choices)
    if env:
        kwargs.update(default=None, help=f"{spec_field.help}  {_env_tail(spec_field)}")
        if spec_field.multiple:
            kwargs["callback"] = _given_values
    elif spec_field.required:  # no default at all: click 8.3 takes default=None as given, never "missing"
        kwargs.update(required=True, help=spec_field.help)
    else:
        kwargs.update(default=_plain_default(spec_field), show_default=spec_field.default_text is not None,
                      help=spec_field.help)
    kwargs.update(click_kwargs)
    return click.option(*_declarations(spec_field), dest or name, **kwargs)


def request_options(command: F) -> F:
    """Every field of the request as an option falling back to its variable, in the fields' order, and the
    command's words after `--`."""
    words = click.argument(COMMAND_ARGS, nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD ARGS...]")
    command = words(command)
    for spec_field in reversed(FIELDS):
        command = field_option(spec_field.name)(command)
    return command


def request_args(params: dict[str, Any]) -> dict[str, Any]:
    """The arguments of JobSpec.from_sources from the parameters of a command with `request_options`."""
    args = {spec_field.name: params[spec_field.name] for spec_field in FIELDS}
    if params[COMMAND_ARGS]:
        args["command"] = list(params[COMMAND_ARGS])
    return args


def job_ref_options(command: F) -> F:
    """A job by name and namespace (JobRef): the name as the argument JOB, the namespace as -n; both fall back
    to their variables."""
    command = field_option("namespace")(command)
    return click.argument("job_name", metavar="[JOB]", required=False)(command)


def _declarations(spec_field: RequestField) -> Sequence[str]:
    if spec_field.flag:
        return [f"{spec_field.option}/--no-{spec_field.option.removeprefix('--')}"]
    return [spec_field.short, spec_field.option] if spec_field.short else [spec_field.option]


def _env_tail(spec_field: RequestField) -> str:
    shown = spec_field.default_text
    variable = spec_field.env + (", comma-separated" if spec_field.multiple else "")
    if spec_field.required:
        return f"[env {variable}; required]"
    return f"[env {variable}; default {shown}]" if shown else f"[env {variable}]"


def _plain_default(spec_field: RequestField) -> Any:
    if spec_field.flag:
        return spec_field.default
    return () if spec_field.multiple else spec_field.default_text


def _given_values(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[str] | None:
    """A repeatable option given no times is not given (None), so that its variable counts."""
    return list(values) if values else None
