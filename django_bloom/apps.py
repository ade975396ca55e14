from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DjangoBloomConfig(AppConfig):
    name = "django_bloom"
    verbose_name = _("Bloom filters")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # checks registers the system checks; conf connects setting_changed.
        from django_bloom.unique import sync  # noqa: F401

        sync.connect_bindings()
