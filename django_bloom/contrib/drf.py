"""A Django REST Framework validator: "is this value taken?" without a query when it is not.

``pip install django-bloom[drf]``. Used like DRF's own ``UniqueValidator``, on a
serializer field::

    from django_bloom.contrib.drf import BloomUniqueValidator

    class SignupSerializer(serializers.ModelSerializer):
        email = serializers.EmailField(
            max_length=254,
            validators=[BloomUniqueValidator("emails", Account, normalizer="email_ci")],
        )

Declaring the field replaces the ``UniqueValidator`` that ``ModelSerializer``
adds for a ``unique=True`` model field (one query on every request).

The decisions are the form validator's (``django_bloom.validators``):
"absent" from the filter is certain, so no query; "maybe" is confirmed with
one indexed query; with Redis unavailable, the key lost or the filter stale,
the database decides. On an update (``serializer.instance`` set), the row
being edited is not its own duplicate.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from rest_framework import serializers

from django_bloom.validators import BloomUniqueValidator as _Decision
from django_bloom.validators import identity, storable


class BloomUniqueValidator:
    """DRF field validator; ``field`` defaults to the serializer field's source."""

    requires_context = True
    message = _Decision.message
    unstorable_message = _Decision.unstorable_message

    def __init__(
        self,
        filter_name: str,
        model: str | type[Model],
        field: str | None = None,
        normalizer: str | None = None,
        max_length: int | None = None,
        message: str | None = None,
    ):
        self.filter_name = filter_name
        self.model = model if isinstance(model, str) else model._meta.label
        self.field = field
        self.normalizer = normalizer
        self.max_length = max_length
        if message is not None:
            self.message = message
        self._decisions: dict[str, _Decision] = {}

    def decision(self, field: str) -> _Decision:
        """The form validator that decides for ``field`` (one per model field)."""
        found = self._decisions.get(field)
        if found is None:
            found = self._decisions[field] = _Decision(
                self.filter_name, self.model, field, self.normalizer, self.max_length
            )
        return found

    def __call__(self, value: Any, serializer_field: Any) -> None:
        if isinstance(value, str) and not storable(value):
            raise serializers.ValidationError(self.unstorable_message, code="invalid_characters")
        field = self.field or serializer_field.source_attrs[-1]
        exclude_pk = getattr(self._instance(serializer_field), "pk", None)
        if self.decision(field).is_taken(value, exclude_pk=exclude_pk):
            raise serializers.ValidationError(
                self.message % {"field": field, "value": value}, code="unique"
            )

    def _instance(self, serializer_field: Any) -> Any:
        """The object being updated (None on create), as DRF's UniqueValidator finds it."""
        serializer = serializer_field.parent
        instance = getattr(serializer, "instance", None)
        if instance is not None and not hasattr(instance, "pk"):
            # many=True with a queryset: the child serializer's instance is the whole list
            raise RuntimeError(
                "BloomUniqueValidator cannot tell which object is being updated in a multiple "
                "update: override ListSerializer.run_child_validation() to set child.instance."
            )
        return instance

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BloomUniqueValidator) and identity(self) == identity(other)

    def __hash__(self) -> int:
        return hash(identity(self)[:3])

    def __repr__(self) -> str:
        return f"<BloomUniqueValidator(filter={self.filter_name!r}, model={self.model!r})>"
