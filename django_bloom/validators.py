"""``BloomUniqueValidator``: "is this value taken?" without a query when it is not.

The filter answers first. "Absent" is certain, so the value is valid and no
database query is made (with ``BloomUniqueMixin`` / ``BloomUniqueFormMixin``,
Django's own uniqueness query for it is left out too: ``unique.certificates``).
"Maybe" is confirmed with one indexed query on the binding's keys (digests of
each row's normalised value, see ``boundkeys``), excluding the instance being
edited. If the filter cannot answer (Redis down, key lost, filter missing or
marked stale), the database decides the same way: the answer is always right,
only slower.

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
from django_bloom.unique import boundkeys, certificates

_editing: contextvars.ContextVar[Any] = contextvars.ContextVar("bloom_editing", default=None)


@contextlib.contextmanager
def editing(instance: Any) -> Iterator[None]:
    """Within this block, validators ignore ``instance``'s own row and keep their certain
    "absent" on it (``unique.certificates``). Inside a block for the same instance (a
    ModelForm's, around the model's ``full_clean``) it joins it; else it starts afresh."""
    if instance is not None and _editing.get() is instance:
        yield
        return
    certificates.reset(instance)
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


def taken_error(message: Any, code: str, params: dict) -> ValidationError:
    """The "taken" error, raised inside a list so that a model field keeps its message.

    ``Field.run_validators`` swaps the message of an error whose code is in the field's
    ``error_messages`` ("unique" is, on every model field) for Django's "%(model_name)s
    with this %(field_label)s already exists." (params we do not have: KeyError), then
    reads the error's ``error_list``. Code, message and params stay on the outer error.
    """
    error = ValidationError(message, code=code, params=params)
    raised = ValidationError([error])
    raised.message, raised.code, raised.params = error.message, error.code, error.params
    return raised


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
        taken, certain = self.decide(value, exclude_pk=getattr(instance, "pk", None))
        if taken:
            raise taken_error(self.message, self.code, {"field": self.field, "value": value})
        if certain is not None:
            certificates.record(instance, self.field, value, *certain)

    # -- the decision ---------------------------------------------------------
    def is_taken(self, value: Any, exclude_pk: Any = None) -> bool:
        return self.decide(value, exclude_pk)[0]

    def decide(self, value: Any, exclude_pk: Any = None) -> tuple[bool, Any]:
        """(taken?, and when the filter said "certainly absent": (its row, the normaliser
        it was asked with), else None)."""
        if value is None or value == "":
            return False, None
        value = str(value)
        if self.max_length is not None and len(value) > self.max_length:
            return False, None  # the field's MaxLengthValidator reports it; never normalise it
        if not storable(value):
            return False, None  # no row can hold it (a lone surrogate is not UTF-8)
        from django_bloom.services import get_filter

        try:
            handle = get_filter(self.filter_name)
        except FilterNotFound:  # the binding's declared normaliser, if the validator names none
            binding = self._binding()
            spec = self.normalizer or (binding.normalizer if binding else None) or None
            return self._exists(spec, value, exclude_pk), None
        spec = self.normalizer or handle.meta.normalizer or None
        normalized = get_normalizer(spec)(value)
        if handle.meta.is_stale:
            counters.record(handle, "unavailable")
            return self._exists(spec, value, exclude_pk), None
        try:
            maybe = handle.without_normalizer.contains(normalized)
        except FilterUnavailable:
            counters.record(handle, "unavailable")
            return self._exists(spec, value, exclude_pk), None
        if not maybe:
            counters.record(handle, "db_skipped")
            return False, (handle.meta, spec)
        found = self._exists(spec, value, exclude_pk)
        counters.record(handle, "db_confirmed" if found else "false_positives")
        return found, None

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
        rows = model._base_manager.filter(**{f"{self.field}__iexact": normalized})
        if exclude_pk is not None:
            rows = rows.exclude(pk=exclude_pk)
        candidates = rows.values_list(self.field, flat=True).iterator(chunk_size=100)
        return any(normalize(str(v)) == normalized for v in candidates)


class BloomUniqueMixin:
    """Model mixin: ``full_clean`` (ModelForm, admin) ignores the row being edited, and on
    an added row leaves out Django's own query for a value the filter said is certainly
    new: the ``unique=True`` check and a ``UniqueConstraint`` of the field or of
    ``Lower(field)`` (``unique.certificates`` says when)."""

    def clean_fields(self, exclude: Any = None) -> None:
        with editing(self):
            super().clean_fields(exclude=exclude)  # type: ignore[misc]

    def validate_unique(self, exclude: Any = None) -> None:
        exclude = certificates.unique_exclusions(self, exclude)
        super().validate_unique(exclude=exclude)  # type: ignore[misc]

    def get_constraints(self) -> list:
        """The constraints ``validate_constraints`` checks, less the certified ones."""
        return certificates.constraints_to_validate(self, super().get_constraints())  # type: ignore[misc]


class BloomUniqueFormMixin:
    """Form mixin: field validators ignore ``self.instance`` (ModelForm edit forms) and, on
    a new row, certify a value the filter said is certainly new, so that the instance's
    ``unique=True`` check (any model) and ``UserCreationForm.clean_username``'s
    case-insensitive query (``username`` normaliser) are left out for it."""

    def full_clean(self) -> None:
        with editing(getattr(self, "instance", None)):
            super().full_clean()  # type: ignore[misc]

    def validate_unique(self) -> None:
        """ModelForm's, with the certified fields excluded."""
        instance = self.instance  # type: ignore[attr-defined]
        exclude = self._get_validation_exclusions()  # type: ignore[attr-defined]
        try:
            instance.validate_unique(exclude=certificates.unique_exclusions(instance, exclude))
        except ValidationError as exc:
            self._update_errors(exc)  # type: ignore[attr-defined]

    def clean_username(self) -> Any:
        """``UserCreationForm.clean_username`` unless the name is certified (a form without
        one, or with its own, is unchanged: that one runs)."""
        following = getattr(super(), "clean_username", None)
        username = self.cleaned_data.get("username")  # type: ignore[attr-defined]
        where = (getattr(following, "__module__", ""), getattr(following, "__qualname__", ""))
        iexact = where == ("django.contrib.auth.forms", "UserCreationForm.clean_username")
        instance = getattr(self, "instance", None)
        if following is None or (
            iexact and certificates.stands(instance, "username", username, certificates.IEXACT)
        ):
            return username  # what Django's returns when its query finds no row
        return following()
