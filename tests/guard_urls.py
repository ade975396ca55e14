"""URLs of the cache-penetration guard tests: one view per guard style, on Account.username."""

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path
from django.views.generic import DetailView

from django_bloom.guard import BloomGuardMixin, bloom_guard, get_object_or_404_guarded
from tests.testapp.models import Account

FILTER = "account-names"


@bloom_guard(FILTER, kwarg="username")
def decorated(request, username):
    return HttpResponse(get_object_or_404(Account, username=username).email)


class AccountView(BloomGuardMixin, DetailView):
    model = Account
    bloom_filter = FILTER
    bloom_kwarg = "username"
    slug_field = "username"
    slug_url_kwarg = "username"

    def render_to_response(self, context, **kwargs):
        return HttpResponse(self.object.email)


def helper(request, username):
    return HttpResponse(get_object_or_404_guarded(Account, FILTER, username=username).email)


def create(request, username):
    Account.objects.create(username=username, email=f"{username}@example.org")
    return HttpResponse("created", status=201)


urlpatterns = [
    path("decorated/<str:username>/", decorated),
    path("mixin/<str:username>/", AccountView.as_view()),
    path("helper/<str:username>/", helper),
    path("create/<str:username>/", create),
]
