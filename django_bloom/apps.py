from django.apps import AppConfig


class DjangoBloomConfig(AppConfig):
    name = "django_bloom"
    verbose_name = "Bloom filters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_bloom import conf  # noqa: F401  (connects setting_changed)
        from django_bloom import checks  # noqa: F401  (registers system checks)
