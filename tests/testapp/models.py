from django.db import models


class Account(models.Model):
    """A model with fields to bind filters to in tests."""

    username = models.CharField(max_length=150, unique=True)
    email = models.EmailField(max_length=254, unique=True)

    def __str__(self) -> str:
        return self.username
