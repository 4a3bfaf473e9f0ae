"""CEL for admission: an expression compiled once, evaluated over plain JSON values.

kube-apiserver evaluates ValidatingAdmissionPolicy expressions with cel-go (k8s.io/apiserver/pkg/cel,
v1.31): a base environment with the standard library, optional types (`object.?spec.?hostNetwork`) and the
strings extension, the policy's variables declared as `dyn`. This module does the same with cel-expr-python
(the cel-expr project's Python binding of its C++ runtime, which implements the same specification):
`compile` refuses what cel-go refuses at compile time (syntax, an undeclared variable or function), and
`evaluate` returns a plain Python value or raises EvalError with the runtime's reason.

Two things differ from cel-go and are bridged here: cel-cpp's runtime errors carry a status prefix
(`NOT_FOUND: Key not found in map : "foo"`), which becomes cel-go's wording for the common one (`no such
key: foo`) and is dropped otherwise; and values come back as plain Python values, not ref.Val.
Not modelled: the Kubernetes CEL libraries (lists, regex, url, quantity, ip/cidr, authorizer), runtime cost
budgets, and type-checking against the resources' OpenAPI schemas (every variable is `dyn`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext.ext_optional import ExtOptional
from cel_expr_python.ext.ext_strings import ExtStrings

_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_NO_SUCH_KEY = re.compile(r'^Key not found in map : "(.*)"$')


class CompileError(ValueError):
    """The expression does not compile; str() is the compiler's report (`ERROR: <input>:1:31: ...`)."""


class EvalError(ValueError):
    """The expression failed at run time; str() is the runtime's reason (`no such key: foo`)."""


@dataclass(frozen=True)
class Program:
    expression: str
    compiled: Any


@functools.lru_cache(maxsize=16)
def _environment(variables: tuple[str, ...]) -> Any:
    return cel.NewEnv(variables=dict.fromkeys(variables, cel.Type.DYN),
                      extensions=[ExtOptional(), ExtStrings()])


@functools.lru_cache(maxsize=1024)
def compile_expression(expression: str, variables: tuple[str, ...]) -> Program:
    """`expression` compiled against `variables` (each `dyn`); CompileError as cel-go's compiler words it:
    `compilation failed: ERROR: <input>:1:5: Syntax error: ...`."""
    try:
        return Program(expression, _environment(variables).compile(expression))
    except RuntimeError as error:
        text = _STATUS_PREFIX.sub("", str(error)).strip()
        text = re.sub(r"\s*\[INVALID_ARGUMENT\]$", "", text)
        raise CompileError(f"compilation failed: {text}") from None


def _reason(raw: Any) -> str:
    text = _STATUS_PREFIX.sub("", str(raw))
    key = _NO_SUCH_KEY.match(text)
    return f"no such key: {key.group(1)}" if key else text


def evaluate(program: Program, bindings: Mapping[str, Any]) -> Any:
    """The value of `program` over `bindings` (plain JSON-like values), or EvalError."""
    try:
        value = program.compiled.eval(data=dict(bindings))
    except RuntimeError as error:
        raise EvalError(_reason(error)) from None
    if value.type() == cel.Type.ERROR:
        raise EvalError(_reason(value.plain_value()))
    return _plain(value.plain_value())


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value
