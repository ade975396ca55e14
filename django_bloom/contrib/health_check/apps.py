"""Registers the check with django-health-check 3.x's plugin directory."""

from django.apps import AppConfig


class BloomHealthCheckConfig(AppConfig):
    name = "django_bloom.contrib.health_check"
    label = "django_bloom_health_check"
    verbose_name = "django-bloom health check"

    def ready(self) -> None:
        try:
            from health_check.plugins import plugin_dir
        except ImportError:  # 4.x: no registry; the check is named on HealthCheckView
            return
        from django_bloom.contrib.health_check.backends import BloomFilters

        if not any(plugin is BloomFilters for plugin, _options in plugin_dir._registry):
            plugin_dir.register(BloomFilters)
