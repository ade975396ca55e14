"""A django-health-check plugin (``pip install django-bloom[health]``): every filter's
Redis answers and holds its key; none is full or stale.

django-health-check 3.x (plugins)::

    INSTALLED_APPS += ["health_check", "django_bloom.contrib.health_check"]
    urlpatterns += [path("ht/", include("health_check.urls"))]

django-health-check 4.x (checks listed on the view)::

    path("ht/", HealthCheckView.as_view(checks=[
        "django_bloom.contrib.health_check.BloomFilters", ...]))

Nothing is imported here until used: the check lives in ``backends``.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "BloomFilters":
        from django_bloom.contrib.health_check.backends import BloomFilters

        return BloomFilters
    raise AttributeError(name)
