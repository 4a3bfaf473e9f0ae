"""Name, label and key rules with the real messages (k8s.io/apimachinery/pkg/util/validation).

Each `*_errors(value)` returns the messages the real server prints after `Invalid value: "<value>": `;
an empty list means valid. Used by validation (objects) and selectors (label selectors).
"""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + r"(\." + _LABEL + r")*"
_DNS1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_CONFIG_KEY = r"[-._a-zA-Z0-9]+"
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             f"validation is '{_LABEL}')")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                 "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                 f"for validation is '{_SUBDOMAIN}')")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
               "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
               f"regex used for validation is '{_DNS1035}')")
QUALIFIED_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                 "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                 f"validation is '{_QUALIFIED}')")
LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                   "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                   f"'my_value',  or '12345', regex used for validation is '{_LABEL_VALUE}')")
CONFIG_KEY_MSG = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
                  "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
                  f"'{_CONFIG_KEY}')")


def _max_len(value: str, limit: int) -> list[str]:
    return [f"must be no more than {limit} characters"] if len(value) > limit else []


def dns1123_label_errors(value: str) -> list[str]:
    return _max_len(value, 63) + ([] if re.fullmatch(_LABEL, value) else [LABEL_MSG])


def dns1123_subdomain_errors(value: str) -> list[str]:
    return _max_len(value, 253) + ([] if re.fullmatch(_SUBDOMAIN, value) else [SUBDOMAIN_MSG])


def dns1035_label_errors(value: str) -> list[str]:
    return _max_len(value, 63) + ([] if re.fullmatch(_DNS1035, value) else [DNS1035_MSG])


def path_segment_errors(value: str) -> list[str]:
    """RBAC object names: anything that is a valid URL path segment."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in value]


def label_key_errors(key: str) -> list[str]:
    """A qualified name: optional DNS subdomain prefix, '/', and a 63-character name part."""
    parts = key.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
    else:
        return ["a qualified name " + QUALIFIED_MSG + " with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    errs: list[str] = []
    if prefix:
        errs += ["prefix part " + e for e in dns1123_subdomain_errors(prefix)]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not re.fullmatch(_QUALIFIED, name):
        errs.append("name part " + QUALIFIED_MSG)
    return errs


def label_value_errors(value: str) -> list[str]:
    return _max_len(value, 63) + ([] if re.fullmatch(_LABEL_VALUE, value) else [LABEL_VALUE_MSG])


def config_key_errors(key: str) -> list[str]:
    errs = _max_len(key, 253)
    if not re.fullmatch(_CONFIG_KEY, key):
        errs.append(CONFIG_KEY_MSG)
    if key in (".", ".."):
        errs.append(f"must not be '{key}'")
    elif key.startswith(".."):
        errs.append("must not start with '..'")
    return errs
