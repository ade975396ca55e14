"""URLs of bench/blocklist_middleware.py: ``GET /`` answers "ok" from a sync view."""

from django.http import HttpResponse
from django.urls import path


def ok(request):
    return HttpResponse(b"ok", content_type="text/plain")


urlpatterns = [path("", ok)]
