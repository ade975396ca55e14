"""URLs of the cache-penetration guard tests: one view per guard style, on Account.username."""

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path
from django.views.generic import DetailView, View

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


@bloom_guard(FILTER, kwarg="username")
async def async_decorated(request, username):
    return await account_email(username)


async def account_email(username):
    account = await Account.objects.filter(username=username).afirst()
    if account is None:
        raise Http404("no such account")
    return HttpResponse(account.email)


class AsyncAccountView(BloomGuardMixin, View):
    bloom_filter = FILTER
    bloom_kwarg = "username"

    async def get(self, request, username):
        return await account_email(username)


def helper(request, username):
    return HttpResponse(get_object_or_404_guarded(Account, FILTER, username=username).email)


def create(request, username):
    Account.objects.create(username=username, email=f"{username}@example.org")
    return HttpResponse("created", status=201)


urlpatterns = [
    path("decorated/<str:username>/", decorated),
    path("mixin/<str:username>/", AccountView.as_view()),
    path("helper/<str:username>/", helper),
    path("async-decorated/<str:username>/", async_decorated),
    path("async-mixin/<str:username>/", AsyncAccountView.as_view()),
    path("create/<str:username>/", create),
]
