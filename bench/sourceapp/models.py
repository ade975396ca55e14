"""The source table of ``bench.rebuild_source``: one bound field, created with
``migrate --run-syncdb`` (the app has no migrations)."""

from django.db import models


class Person(models.Model):
    email = models.CharField(max_length=254)

    class Meta:
        app_label = "sourceapp"
