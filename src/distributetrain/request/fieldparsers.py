"""Parsers of a job request's fields, used by jobspec.py (and by the `plan` and `inventory` commands for the
fields they share with it: --gpus, --node-selector; --toleration is tolerations.py's).

Each takes a raw value (an argument or an environment string) and returns the typed value, or raises
ValueError or InvalidInput saying what is wrong and what a good value looks like."""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from distributetrain import naming
from distributetrain.errors import InvalidInput, InvalidQuantity
from distributetrain.naming import check_label_value, check_qualified_name, is_subdomain
from distributetrain.quantity import format_quantity, parse_quantity

MIN_GPUS = 1
# The largest GPU clusters in service hold about 100,000 GPUs; a request above that is a typo, not a plan.
MAX_GPUS = 100_000
PULL_POLICIES = ("Always", "IfNotPresent", "Never")


Parser = Callable[[Any], Any]
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds from 300, "300", "90s", "5m", "1h30m"."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"{value!r} is not a duration (examples: 300, 90s, 5m, 1h30m)") from None
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        raise ValueError(f"{value!r} is not a non-negative duration")
    return seconds


def format_duration(seconds: float) -> str:
    """A duration as parse_duration reads it, in its largest whole unit: 0, 30s, 5m, 2h."""
    if not seconds:
        return "0"
    for unit in ("d", "h", "m", "s"):
        count = seconds / _DURATION_UNITS[unit]
        if count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}"


def parse_positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"{value!r}: must be more than 0 seconds")
    return seconds


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{value!r} is not true or false")


def parse_command(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        words = [str(w) for w in value]
    else:
        text = str(value).strip()
        if text.startswith("["):
            try:
                loaded = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"{value!r} is not a JSON list: {err}") from None
            if not isinstance(loaded, list) or not all(isinstance(w, str) for w in loaded):
                raise ValueError(f"{value!r} must be a JSON list of strings")
            words = loaded
        else:
            try:
                words = shlex.split(text)
            except ValueError as err:
                raise ValueError(f"{value!r} cannot be split into words: {err}") from None
    if not words or not words[0].strip():
        raise ValueError("is empty; give the program to run on every rank, e.g. python3 /workspace/Train.py")
    return tuple(words)


_IFNAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
# The distribution reference grammar (docker/distribution reference/regexp.go), anchored.
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_IMAGE_DOMAIN = rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]+)?|\[[0-9a-fA-F:]+\](?::[0-9]+)?)"
_IMAGE = re.compile(rf"^(?:{_IMAGE_DOMAIN}/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
                    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")


def parse_gpus(value: Any) -> int:
    """A GPU count: a whole number from MIN_GPUS to MAX_GPUS (check_gpus)."""
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"\+?\d+", text):
        raise ValueError(f"{value!r} is not a whole number of GPUs")
    return check_gpus(int(text), given=value)


def check_gpus(count: int, *, given: Any = None) -> int:
    """The one rule of a GPU request, whoever parsed the number (`plan --gpus` lets click do that)."""
    if count < MIN_GPUS:
        raise ValueError(f"{count if given is None else given!r}: at least 1 GPU is needed")
    if count > MAX_GPUS:
        raise ValueError(f"{count} is beyond the sane cap of {MAX_GPUS} GPUs (more than the largest clusters "
                         "hold); check for a typo")
    return count


def parse_int_range(low: int, high: int) -> Parser:
    def parse(value: Any) -> int:
        text = str(value).strip()
        if isinstance(value, bool) or not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(f"{value!r} is not a whole number")
        number = int(text)
        if not low <= number <= high:
            raise ValueError(f"{number} is outside {low}..{high}")
        return number
    return parse


def parse_job_name(value: Any) -> str:
    text = str(value)
    if not naming.is_dns1123_label(text) or len(text) > naming.JOB_NAME_MAX:
        raise ValueError(f"{text!r} must be lower-case letters, digits and '-', starting and ending with a "
                         f"letter or digit, at most {naming.JOB_NAME_MAX} characters (e.g. resnet-6gpu)")
    return text


def parse_namespace(value: Any) -> str:
    text = str(value)
    if not naming.is_dns1123_label(text):
        raise ValueError(f"{text!r} is not a namespace name (lower-case DNS label, at most 63 characters)")
    return text


def parse_subdomain_name(value: Any) -> str:
    text = str(value)
    if not is_subdomain(text):
        raise ValueError(f"{text!r} is not a valid object name (lower-case DNS subdomain)")
    return text


def parse_image(value: Any) -> str:
    text = str(value).strip()
    if not text or len(text) > 4096 or not _IMAGE.match(text):
        raise ValueError(f"{value!r} is not an image reference like registry.example.com/team/train:1.0 "
                         "(repository lower-case, optional :tag and @sha256:digest)")
    return text


def parse_resource(value: Any) -> str:
    text = str(value).strip()
    check_qualified_name(text, prefix_required=True)
    domain = text.split("/", 1)[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io") or text.startswith("requests."):
        raise ValueError(f"{text!r} is a native resource name, not an extended resource like nvidia.com/gpu")
    return text


def parse_node_selector(value: Any) -> dict[str, str]:
    """--node-selector values `KEY=VALUE` (several per value, comma-separated; all must match), one string
    (DT_NODE_SELECTOR), or a mapping; keys must be label keys and values label values."""
    if isinstance(value, Mapping):
        selector = {str(k): str(v) for k, v in value.items()}
    else:
        items = [str(i) for i in value] if isinstance(value, list | tuple) else [str(value)]
        selector = {}
        for item in (i for i in items if i.strip()):
            for part in item.split(","):
                key, equals, val = part.strip().partition("=")
                if not equals or not key.strip():
                    raise InvalidInput(f"--node-selector {item!r}: {part.strip()!r} is not KEY=VALUE "
                                       "(e.g. --node-selector gpu-type=a100)")
                key = key.strip()
                if key in selector and selector[key] != val.strip():
                    raise InvalidInput(f"--node-selector: {key} is given twice ({selector[key]!r} and "
                                       f"{val.strip()!r}); a node has one value per label")
                selector[key] = val.strip()
    for key, val in selector.items():
        check_qualified_name(key)
        check_label_value(val)
    return selector


def parse_label_key(value: Any) -> str:
    text = str(value).strip()
    check_qualified_name(text)
    return text


def parse_choice(choices: tuple[str, ...]) -> Parser:
    def parse(value: Any) -> str:
        text = str(value).strip()
        if text not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return text
    return parse


def parse_mount_path(value: Any) -> str:
    text = str(value)
    if not text.startswith("/") or ":" in text or ".." in text.split("/") or len(text) > 4096:
        raise ValueError(f"{text!r} must be an absolute path without ':' or '..'")
    return text


def parse_interface(value: Any) -> str:
    text = str(value).strip()
    if not _IFNAME.match(text):
        raise ValueError(f"{text!r} is not a network interface name like eth0")
    return text


def parse_amount(value: Any) -> Fraction:
    """A non-negative Kubernetes quantity (`2`, `500m`, `8Gi`); 0 turns the thing off."""
    try:
        amount = parse_quantity(str(value).strip(), what="value")
    except InvalidQuantity:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (examples: 2, 500m, 8Gi, 0)") from None
    if amount < 0:
        raise ValueError(f"{value!r} is negative")
    return amount


def format_amount(amount: Fraction) -> str:
    """A quantity as parse_amount reads it: 8Gi for whole gibibytes, 2 or 500m otherwise."""
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20)):
        if amount and amount % size == 0:
            return f"{amount // size}{suffix}"
    return format_quantity(amount)


def _words(value: Any) -> list[str]:
    """Repeated option values, or one comma-separated string (a DT_* variable)."""
    items = [str(i) for i in value] if isinstance(value, list | tuple) else [str(value)]
    return [w.strip() for item in items for w in item.split(",") if w.strip()]


def parse_names(value: Any) -> tuple[str, ...]:
    """Object names (e.g. imagePullSecrets), repeated or comma-separated; each a DNS subdomain."""
    names = _words(value)
    for name in names:
        parse_subdomain_name(name)
    return tuple(dict.fromkeys(names))


def parse_cidrs(value: Any) -> tuple[str, ...]:
    """CIDRs (`10.0.0.0/8`, `0.0.0.0/0`), repeated or comma-separated; host bits are cleared. Each may name
    one port and a protocol: `10.0.0.0/8:443`, `10.0.0.0/8:53/UDP`, `[fd00::/8]:443` (TCP by default);
    kept as `CIDR`, `CIDR:PORT/PROTO` or `[CIDR]:PORT/PROTO`."""
    out = []
    for word in _words(value):
        out.append(_cidr_port(word))
    return tuple(dict.fromkeys(out))


_PROTOCOLS = ("TCP", "UDP", "SCTP")


def _cidr_port(word: str) -> str:
    example = "a CIDR like 10.0.0.0/8 or 0.0.0.0/0, optionally with :PORT[/TCP|UDP|SCTP]"
    cidr, port = word, ""
    if word.startswith("["):
        cidr, _, rest = word[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise ValueError(f"{word!r} is not {example}")
    elif word.count(":") == 1:
        cidr, port = word.split(":")
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise ValueError(f"{word!r} is not {example}") from None
    if not port:
        return str(network)
    number, _, protocol = port.partition("/")
    protocol = (protocol or "TCP").upper()
    if not number.isdigit() or not 1 <= int(number) <= 65535 or protocol not in _PROTOCOLS:
        raise ValueError(f"{word!r} is not {example} (a port 1-65535)")
    shown = f"[{network}]" if network.version == 6 else str(network)
    return f"{shown}:{int(number)}/{protocol}"


def split_cidr_port(entry: str) -> tuple[str, int | None, str | None]:
    """(CIDR, port, protocol) of a parse_cidrs entry; port and protocol None when it names no port."""
    if entry.startswith("["):
        cidr, _, rest = entry[1:].partition("]")
        port, _, protocol = rest[1:].partition("/")
        return cidr, int(port), protocol
    if ":" in entry and "/" in entry.partition(":")[2]:
        cidr, _, rest = entry.partition(":")
        port, _, protocol = rest.partition("/")
        return cidr, int(port), protocol
    return entry, None, None


def parse_gbps(value: Any) -> float:
    """A bandwidth in GB/s (10^9 bytes per second): a positive decimal number."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ValueError(f"{value!r} is not a number of GB/s, e.g. 10 or 2.5") from None
    if not 0 < number < float("inf"):
        raise ValueError(f"{value!r}: give a positive number of GB/s")
    return number


def parse_factor(value: Any) -> float:
    """A factor above 1, e.g. 1.5: how many times slower than the others a rank may be."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ValueError(f"{value!r} is not a number, e.g. 1.5") from None
    if not 1 < number < float("inf"):
        raise ValueError(f"{value!r}: give a number above 1, e.g. 1.5 (half as fast again as the others)")
    return number


def optional(parse: Parser) -> Parser:
    def wrapped(value: Any) -> Any:
        return None if value is None or str(value).strip() == "" else parse(value)
    return wrapped


