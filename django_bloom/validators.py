"""``BloomUniqueValidator``: "is this value taken?" without a query when it is not.

The filter answers first. "Absent" is certain, so the value is valid and no
database query is made. "Maybe" is confirmed with one indexed query on the
binding's keys (digests of each row's normalised value, see ``boundkeys``),
excluding the instance being edited. If the filter cannot answer (Redis down,
key lost, filter missing or marked stale), the database decides the same way:
the answer is always right, only slower.

Values are normalised with the filter's normaliser (the one used when values
were added), so 'Alice', 'alice' and 'Ａｌｉｃｅ' are one username. Values
longer than ``max_length`` are not normalised (NFKC can expand text; Django
notes this as a DoS vector) and are left to the field's own length check.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible
from django.utils.translation import gettext_lazy as _

from django_bloom import counters
from django_bloom.exceptions import FilterNotFound, FilterUnavailable
from django_bloom.normalizers import get_normalizer
from django_bloom.unique import boundkeys

_editing: contextvars.ContextVar[Any] = contextvars.ContextVar("bloom_editing", default=None)


@contextlib.contextmanager
def editing(instance: Any) -> Iterator[None]:
    """Within this block, validators ignore ``instance``'s own row."""
    token = _editing.set(instance)
    try:
        yield
    finally:
        _editing.reset(token)


def storable(value: str) -> bool:
    """Encodable as UTF-8 (a lone surrogate, e.g. from JSON's "\\ud800", is not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def identity(validator: Any) -> tuple:
    """What makes two unique validators (this one, or the DRF one) equal: filter, model,
    field, normalizer, max_length and message. The first three are its hash."""
    return (
        validator.filter_name,
        validator.model,
        validator.field,
        validator.normalizer,
        validator.max_length,
        str(validator.message),
    )


@deconstructible(path="django_bloom.validators.BloomUniqueValidator")
class BloomUniqueValidator:
    message = _("This %(field)s is already taken.")
    code = "unique"
    unstorable_message = _("This value contains characters that cannot be stored.")

    def __init__(
        self,
        filter_name: str,
        model: str,
        field: str,
        normalizer: str | None = None,
        max_length: int | None = None,
        message: str | None = None,
    ):
        self.filter_name = filter_name
        self.model = model
        self.field = field
        self.normalizer = normalizer
        self.max_length = max_length
        if message is not None:
            self.message = message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BloomUniqueValidator) and identity(self) == identity(other)

    def __hash__(self) -> int:
        return hash(identity(self)[:3])

    def __call__(self, value: Any) -> None:
        if isinstance(value, str) and not storable(value):
            raise ValidationError(self.unstorable_message, code="invalid_characters")
        instance = _editing.get()
        exclude_pk = getattr(instance, "pk", None)
        if self.is_taken(value, exclude_pk=exclude_pk):
            raise ValidationError(
                self.message, code=self.code, params={"field": self.field, "value": value}
            )

    # -- the decision ---------------------------------------------------------
    def is_taken(self, value: Any, exclude_pk: Any = None) -> bool:
        if value is None or value == "":
            return False
        value = str(value)
        if self.max_length is not None and len(value) > self.max_length:
            return False  # the field's MaxLengthValidator reports it; never normalise it
        if not storable(value):
            return False  # no row can hold it (a lone surrogate is not UTF-8)
        from django_bloom.services import get_filter

        try:
            handle = get_filter(self.filter_name)
        except FilterNotFound:  # the binding's declared normaliser, if the validator names none
            binding = self._binding()
            spec = self.normalizer or (binding.normalizer if binding else None) or None
            return self._exists(spec, value, exclude_pk)
        spec = self.normalizer or handle.meta.normalizer or None
        normalized = get_normalizer(spec)(value)
        if handle.meta.is_stale:
            counters.record(handle, "unavailable")
            return self._exists(spec, value, exclude_pk)
        try:
            maybe = handle.without_normalizer.contains(normalized)
        except FilterUnavailable:
            counters.record(handle, "unavailable")
            return self._exists(spec, value, exclude_pk)
        if not maybe:
            counters.record(handle, "db_skipped")
            return False
        found = self._exists(spec, value, exclude_pk)
        counters.record(handle, "db_confirmed" if found else "false_positives")
        return found

    def _binding(self) -> Any:
        from django_bloom.unique.sync import declared_binding

        return declared_binding(self.filter_name)

    def _exists(self, spec: Any, value: str, exclude_pk: Any) -> bool:
        """Does a row's normalised value equal the normalised ``value``?

        One indexed query on the binding's keys when they are complete
        (``boundkeys``); otherwise every row equal ignoring case, compared
        after normalising (misses rows that differ by more than case until
        ``bloom rebuild`` backfills the keys: system check W010).
        """
        model = apps.get_model(self.model)
        normalize = get_normalizer(spec)
        normalized = normalize(value)
        binding = self._binding()
        found = boundkeys.lookup(binding, model, self.field, spec, normalized, exclude_pk)
        if found is not None:
            return found
        rows = model._default_manager.filter(**{f"{self.field}__iexact": normalized})
        if exclude_pk is not None:
            rows = rows.exclude(pk=exclude_pk)
        candidates = rows.values_list(self.field, flat=True).iterator(chunk_size=100)
        return any(normalize(str(v)) == normalized for v in candidates)


class BloomUniqueMixin:
    """Model mixin: ``full_clean`` (ModelForm, admin) ignores the row being edited."""

    def clean_fields(self, exclude: Any = None) -> None:
        with editing(self):
            super().clean_fields(exclude=exclude)  # type: ignore[misc]


class BloomUniqueFormMixin:
    """Form mixin: field validators ignore ``self.instance`` (ModelForm edit forms)."""

    def _clean_fields(self) -> None:
        with editing(getattr(self, "instance", None)):
            super()._clean_fields()  # type: ignore[misc]
