"""A bound filter's certain "absent", kept for Django's own uniqueness checks.

When the filter bound to a field says a value is certainly absent, no row holds it,
so the query Django is about to make for that value (``Model.validate_unique`` for
``unique=True``, ``UniqueConstraint.validate``, ``UserCreationForm.clean_username``)
can only answer "free". The validator records that answer on the model instance
being validated (``record``: the field, the exact value, the normaliser, the model
whose rows the filter holds); the mixins of ``django_bloom.validators`` leave that
one query out when ``stands`` says all of this holds:

- the instance is being added (an update keeps Django's checks);
- the value about to be saved is still the certified one (``clean()`` may change it);
- the filter holds the rows of the model that defines the field (its bound source);
- the check is about that field alone: ``unique=True`` (when no ``unique_together``
  or ``unique_for_*`` involves the field), or an unconditional ``UniqueConstraint``
  of the field alone or of ``Lower(field)``; other constraints keep their queries;
- the normaliser is at least as coarse as the database's comparison: any normaliser
  covers exact equality (PostgreSQL, SQLite; a field without ``db_collation``, not
  citext), ``username`` and ``email_ci`` cover ``Lower()``, ``username`` covers
  ``iexact``. A value holding a character whose case Python and SQL map differently
  (``İ``, ``ı``, Greek sigma) keeps the query.

A certificate lives on the instance until its next validation starts (``reset``);
once the row is saved (no longer being added) it counts for nothing.
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
    is their own ``unique=True`` query (excluding a field drops every check naming it)."""
    exclude = set(exclude or ())
    for name in set(getattr(instance, ATTRIBUTE, {})) - exclude:
        field = instance._meta.get_field(name)
        alone = field.unique and not field.primary_key and not _checked_with_others(instance, name)
        if alone and stands(instance, name, getattr(instance, field.attname), EXACT):
            exclude.add(name)
    return exclude


def _checked_with_others(instance: Any, name: str) -> bool:
    """Is ``name`` in a ``unique_together`` or a ``unique_for_date/month/year`` check?"""
    opts = instance._meta
    for model in (type(instance), *opts.get_parent_list()):
        if any(name in together for together in model._meta.unique_together):
            return True
    dates = ("unique_for_date", "unique_for_month", "unique_for_year")
    return any(
        getattr(field, date) and name in (field.name, getattr(field, date))
        for field in opts.fields
        for date in dates
    )


def constraints_to_validate(instance: Any, constraints: list) -> list:
    """``Model.get_constraints()`` without the certified single-field unique constraints."""
    if not getattr(instance, ATTRIBUTE, None):
        return constraints
    kept = []
    for model, model_constraints in constraints:
        kept.append((model, [c for c in model_constraints if not _certified(instance, c)]))
    return kept


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
    if name not in getattr(instance, ATTRIBUTE):
        return False
    field = instance._meta.get_field(name)
    return stands(instance, name, getattr(instance, field.attname), comparison)
