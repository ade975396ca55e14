from django.db import models
from django.db.models.functions import Lower

from django_bloom.validators import BloomUniqueMixin, BloomUniqueValidator


class Account(models.Model):
    """A model with fields to bind filters to in tests."""

    username = models.CharField(max_length=150, unique=True)
    email = models.EmailField(max_length=254, unique=True)

    def __str__(self) -> str:
        return self.username


class ActiveManager(models.Manager):
    """The common soft-delete manager: hides deleted rows (which keep their unique value)."""

    def get_queryset(self):
        return super().get_queryset().filter(deleted=False)


def email_validator(name: str, model: str) -> BloomUniqueValidator:
    return BloomUniqueValidator(name, model, "email", "email_ci", max_length=254)


class Member(BloomUniqueMixin, models.Model):
    """``unique=True`` with the validator on the model field; soft-deleted rows stay."""

    email = models.EmailField(
        max_length=254, unique=True, validators=[email_validator("members", "testapp.Member")]
    )
    deleted = models.BooleanField(default=False)

    objects = ActiveManager()
    everyone = models.Manager()


class Customer(BloomUniqueMixin, models.Model):
    """Unique under ``UniqueConstraint(Lower("email"))`` and ``UniqueConstraint("email")``,
    the validator on the model field."""

    email = models.EmailField(
        max_length=254, validators=[email_validator("customers", "testapp.Customer")]
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("email"), name="testapp_customer_email_ci"),
            models.UniqueConstraint(fields=["email"], name="testapp_customer_email"),
        ]


class Seat(BloomUniqueMixin, models.Model):
    """Constraints a filter of emails cannot speak for: with a tenant, among active seats."""

    tenant = models.CharField(max_length=50)
    email = models.EmailField(max_length=254, validators=[email_validator("seats", "testapp.Seat")])
    active = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "email"], name="testapp_seat_tenant_email"),
            models.UniqueConstraint(
                fields=["email"], condition=models.Q(active=True), name="testapp_seat_active_email"
            ),
        ]
