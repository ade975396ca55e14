"""The source tables of ``bench.rebuild_source`` (one bound field) and ``bench.signup``,
created with ``migrate --run-syncdb`` (the app has no migrations)."""

from django.db import models

from django_bloom.validators import BloomUniqueMixin, BloomUniqueValidator


class Person(models.Model):
    email = models.CharField(max_length=254)

    class Meta:
        app_label = "sourceapp"


class Account(BloomUniqueMixin, models.Model):
    """``bench.signup``'s ModelForm and ``full_clean()`` paths with the app: ``unique=True``,
    the validator on the model field, the model mixin."""

    email = models.EmailField(
        max_length=254,
        unique=True,
        validators=[
            BloomUniqueValidator(
                "bench-accounts", "sourceapp.Account", "email", "email_ci", max_length=254
            )
        ],
    )

    class Meta:
        app_label = "sourceapp"


class PlainAccount(models.Model):
    """The same table as plain Django has it: ``unique=True``, nothing else."""

    email = models.EmailField(max_length=254, unique=True)

    class Meta:
        app_label = "sourceapp"
        db_table = "sourceapp_account"
        managed = False
