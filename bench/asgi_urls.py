"""URLs of bench/asgi_settings.py: ``GET /`` answers "ok" from an async view.

``ThreadedBlocklistMiddleware`` is the blocklist middleware's async path as it was
before the async API (the whole check in ``sync_to_async(thread_sensitive=True)``),
kept here only so bench/asgi_middleware.py can measure old and new in one run.
"""

from asgiref.sync import sync_to_async
from django.http import HttpResponse
from django.urls import path

from django_bloom.middleware import BlocklistMiddleware, decide


async def ok(request):
    return HttpResponse(b"ok", content_type="text/plain")


urlpatterns = [path("", ok)]


class ThreadedBlocklistMiddleware(BlocklistMiddleware):
    async def __acall__(self, request):
        refused = await sync_to_async(decide, thread_sensitive=True)(request)
        if refused is not None:
            return refused
        return await self.get_response(request)
