from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DjangoBloomConfig(AppConfig):
    name = "django_bloom"
    verbose_name = _("Bloom filters")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # checks registers the system checks (a regression test: test_checks.py
        # runs them in a fresh process); conf connects setting_changed.
        from django_bloom import checks, conf  # noqa: F401
        from django_bloom.unique import sync

        sync.connect_bindings()
