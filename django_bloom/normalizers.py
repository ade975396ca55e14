"""One normaliser per filter, shared by writes (sync, rebuild) and reads (validator).

A value must be normalised the same way when it goes into the filter and when
it is looked up, or a registered value could be reported "absent".
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

from django.utils.module_loading import import_string

Normalizer = Callable[[str], str]


def identity(value: str) -> str:
    return value


def username(value: str) -> str:
    """Django's username normalisation (NFKC), then casefold: 'Ａｌｉｃｅ' -> 'alice'."""
    return unicodedata.normalize("NFKC", value).casefold()


def email(value: str) -> str:
    """Trim, lower-case the domain; the local part keeps its case (RFC 5321)."""
    value = value.strip()
    local, at, domain = value.rpartition("@")
    return f"{local}@{domain.lower()}" if at else value


def email_ci(value: str) -> str:
    """Trim and lower-case the whole address (local parts compared case-insensitively)."""
    return value.strip().lower()


BUILTIN: dict[str, Normalizer] = {
    "": identity,
    "identity": identity,
    "username": username,
    "email": email,
    "email_ci": email_ci,
}


def get_normalizer(spec: str | Normalizer | None) -> Normalizer:
    """A normaliser from a built-in name, a dotted path, or a callable."""
    if spec is None:
        return identity
    if callable(spec):
        return spec
    if spec in BUILTIN:
        return BUILTIN[spec]
    try:
        found = import_string(spec)
    except ImportError:
        raise ValueError(
            f"unknown normalizer {spec!r}: use one of {', '.join(sorted(k for k in BUILTIN if k))} "
            "or a dotted path to a callable"
        ) from None
    if not callable(found):
        raise ValueError(f"normalizer {spec!r} is not callable")
    return found
