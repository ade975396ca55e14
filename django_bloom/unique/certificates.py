"""A bound filter's certain "absent", kept for Django's own uniqueness checks.

When the filter bound to a field says a value is certainly absent, no row holds it, so
Django's query for that value (``validate_unique`` for ``unique=True``,
``UniqueConstraint.validate``, ``UserCreationForm.clean_username``) can only say "free".
The validator records the answer on the instance being validated (``record``); the
mixins of ``django_bloom.validators`` leave the query out when ``stands`` says:

- the row is being added, and the value about to be saved is still the certified one;
- the filter holds the rows of the model that defines the field (its bound source);
- the check is of that field alone: ``unique=True`` (no ``unique_together`` or
  ``unique_for_*`` naming it), an unconditional ``UniqueConstraint`` of the field or
  of ``Lower(field)``; every other check keeps its query;
- the normaliser is at least as coarse as the database's comparison: any for "="
  (PostgreSQL, SQLite; no ``db_collation``, not citext), ``username`` and ``email_ci``
  for ``Lower()``, ``username`` for ``iexact``; not for a value holding a character
  whose case Python and SQL map differently (``İ``, ``ı``, Greek sigma).

A certificate lives on the instance until its next validation starts (``reset``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.db import connections, router
from django.db.models import F, Model, UniqueConstraint
from django.db.models.functions import Lower

from django_bloom.unique.boundkeys import normalizer_name

EXACT, LOWER, IEXACT = "exact", "lower", "iexact"
# Which normalisers are at least as coarse as a case-insensitive comparison.
COARSE_ENOUGH = {LOWER: {"username", "email_ci"}, IEXACT: {"username"}}
# Python and SQL disagree on these: UPPER('ı') = 'I' but casefold keeps it; LOWER('İ') is
# 'i' in PostgreSQL, 'i̇' in Python; Python lower-cases a final sigma to 'ς'.
CASE_DISAGREEMENTS = frozenset("İıΣσς")
# Backends whose "=" on a text column without a collation of its own is exact.
EXACT_VENDORS = {"postgresql", "sqlite"}
ATTRIBUTE = "_bloom_certified"


@dataclass(frozen=True)
class Certificate:
    value: str
    normalizer: str
    model: type[Model]  # the concrete model whose rows the filter holds


def record(instance: Any, field: str, value: Any, meta: Any, normalizer: Any) -> None:
    """The filter ``meta`` said ``value`` of ``field`` is certainly absent (probed with
    ``normalizer``): keep it on ``instance`` if that means no row of its table holds it."""
    if not isinstance(instance, Model) or not isinstance(value, str):
        return
    if normalizer_name(normalizer) != normalizer_name(meta.normalizer):
        return  # the bits hold values spelled by another normaliser
    label, _, source_field = (meta.source or "").rpartition(".")
    if source_field != field:
        return
    try:
        source = apps.get_model(label)
        instance._meta.get_field(field)
    except (LookupError, ValueError, FieldDoesNotExist):
        return
    certificate = Certificate(value, normalizer_name(normalizer), source._meta.concrete_model)
    instance.__dict__.setdefault(ATTRIBUTE, {})[field] = certificate


def reset(instance: Any) -> None:
    """A new validation of ``instance`` starts: what was certified before counts no more."""
    if isinstance(instance, Model):
        instance.__dict__.pop(ATTRIBUTE, None)


def stands(instance: Any, name: str, value: Any, comparison: str) -> bool:
    """May Django's query comparing ``name`` to ``value`` (``comparison``) be left out?"""
    certificate = getattr(instance, ATTRIBUTE, {}).get(name)
    if certificate is None or not instance._state.adding or certificate.value != value:
        return False
    field = instance._meta.get_field(name)
    if field.model._meta.concrete_model is not certificate.model:
        return False
    connection = connections[router.db_for_read(field.model)]
    if connection.vendor not in EXACT_VENDORS or getattr(field, "db_collation", None):
        return False
    if "citext" in (field.db_type(connection) or "").lower():
        return False
    if comparison == EXACT:
        return True
    coarse = certificate.normalizer in COARSE_ENOUGH[comparison]
    return coarse and CASE_DISAGREEMENTS.isdisjoint(value)


def unique_exclusions(instance: Any, exclude: Any) -> set[str]:
    """``exclude`` plus the certified fields whose only check ``validate_unique`` would make
    is their own single-field query (excluding a field drops every check naming it)."""
    exclude = set(exclude or ())
    certified = set(getattr(instance, ATTRIBUTE, {})) - exclude
    if not certified:
        return exclude
    unique_checks, date_checks = instance._get_unique_checks(exclude=exclude)
    for name in certified:
        named = [check for _model, check in unique_checks if name in check]
        dated = any(name in (field, date) for _model, _kind, field, date in date_checks)
        value = getattr(instance, instance._meta.get_field(name).attname)
        if named == [(name,)] and not dated and stands(instance, name, value, EXACT):
            exclude.add(name)
    return exclude


def constraints_to_validate(instance: Any, constraints: list) -> list:
    """``Model.get_constraints()`` without the certified single-field unique constraints."""
    return [(model, [c for c in cs if not _certified(instance, c)]) for model, cs in constraints]


def _certified(instance: Any, constraint: Any) -> bool:
    if not isinstance(constraint, UniqueConstraint) or constraint.condition is not None:
        return False
    if len(constraint.fields) == 1 and not constraint.expressions:
        name, comparison = constraint.fields[0], EXACT
    elif not constraint.fields and len(constraint.expressions) == 1:
        expression = constraint.expressions[0]
        inner = expression.get_source_expressions() if isinstance(expression, Lower) else []
        if len(inner) != 1 or not isinstance(inner[0], F):
            return False
        name, comparison = inner[0].name, LOWER
    else:
        return False
    field = instance._meta.get_field(name)
    return stands(instance, name, getattr(instance, field.attname), comparison)
