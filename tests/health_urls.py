"""django-health-check's own view at /ht/ (tests/ops/test_health_check.py): 3.x serves its
plugin registry (health_check.urls), 4.x the checks named on HealthCheckView."""

from django.urls import include, path

try:
    import health_check.plugins  # noqa: F401  (3.x)
except ImportError:
    from health_check.views import HealthCheckView

    urlpatterns = [
        path(
            "ht/",
            HealthCheckView.as_view(checks=["django_bloom.contrib.health_check.BloomFilters"]),
        )
    ]
else:
    urlpatterns = [path("ht/", include("health_check.urls"))]
