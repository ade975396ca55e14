"""The example site's URLs with the profile view unguarded (bench/guard_load.py, "off")."""

from accounts import views
from django.urls import path
from example_site.urls import urlpatterns as site

urlpatterns = [path("u/<str:username>/", views.profile.__wrapped__), *site]
