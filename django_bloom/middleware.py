"""``BlocklistMiddleware``: resolve the client IP, check it, refuse if blocked.

Thin on purpose: the logic lives in ``django_bloom.ipblock.ip`` and
``django_bloom.ipblock``. Per request it costs no Redis round trip (the list's filter
is mirrored: ``BLOCKLIST_MIRROR``; one without it, none for allowlisted or unknown
addresses) and, in the steady state, no database query (confirmations, prefix lengths
and the allowlist are cached per process). A refusal is counted in memory
(``ipblock.hits``: hits, last seen, a cooldown's restart, written in batches off the
request path) and announced (``request_blocked``; a receiver that raises is logged).

When the filter cannot answer (Redis unreachable, key lost, filter missing):
``FAIL_OPEN=True`` (default) lets the request through and logs a warning (at
most once a minute per process); ``FAIL_OPEN=False`` answers 503 Service
Unavailable with ``Retry-After``: the site cannot tell, so it says so rather
than calling every visitor blocked.

The refusal speaks the language Django would pick for the request (``request_language``:
the path prefix under ``i18n_patterns``, the language cookie, ``Accept-Language``, then
``LANGUAGE_CODE``, within ``LANGUAGES``), although the middleware runs before
``LocaleMiddleware``; the thread's language is restored afterwards.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.conf.urls.i18n import is_language_prefix_patterns_used
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.utils.translation import gettext

from django_bloom.conf import get_config
from django_bloom.exceptions import FilterNotFound, FilterUnavailable
from django_bloom.ipblock import hits
from django_bloom.ipblock import ip as iplib
from django_bloom.ipblock import service as blocklist
from django_bloom.ipblock.reads import warn_throttled
from django_bloom.ipblock.signals import asend_robust, request_blocked

logger = logging.getLogger("django_bloom.middleware")

RETRY_AFTER_SECONDS = 30
UNAVAILABLE = "unavailable"  # request_blocked's reason for a 503


def _accept_score(accept: str, wanted: str) -> tuple[float, int, int]:
    """(q, specificity, -position) of the most specific range in ``accept`` matching ``wanted``."""
    main = wanted.split("/", 1)[0]
    best = (0.0, -1, 0)
    for position, item in enumerate(accept.split(",")):
        media, *params = (part.strip() for part in item.split(";"))
        media = media.lower()
        if media == wanted:
            specificity = 2
        elif media == f"{main}/*":
            specificity = 1
        elif media == "*/*":
            specificity = 0
        else:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = max(0.0, min(1.0, float(value)))
                except ValueError:
                    q = 0.0
        if specificity > best[1]:
            best = (q, specificity, -position)
    return best if best[1] >= 0 else (0.0, -1, 0)


def prefers_json(request: HttpRequest) -> bool:
    """True when the Accept header ranks application/json above text/html.

    Browsers (``text/html,...,*/*;q=0.8``) get HTML; API clients
    (``application/json``, axios' ``application/json, text/plain, */*``) get JSON;
    ``*/*`` or no header gets HTML.
    """
    accept = request.META.get("HTTP_ACCEPT", "")
    if not accept:
        return False
    json_score = _accept_score(accept, "application/json")
    return json_score[0] > 0 and json_score > _accept_score(accept, "text/html")


def request_language(request: HttpRequest) -> str:
    """The language ``LocaleMiddleware`` would activate for ``request`` (it has not run yet)."""
    urlconf = getattr(request, "urlconf", settings.ROOT_URLCONF)
    i18n_patterns_used, prefixed_default_language = is_language_prefix_patterns_used(urlconf)
    language = translation.get_language_from_request(request, check_path=i18n_patterns_used)
    from_path = translation.get_language_from_path(request.path_info)
    if not from_path and i18n_patterns_used and not prefixed_default_language:
        language = settings.LANGUAGE_CODE
    return language


def refusal(request: HttpRequest, status: int, decision: blocklist.Decision | None) -> HttpResponse:
    """The 403 (blocked) or 503 (cannot tell) response, JSON or the configured template, in
    the request's language (``request_language``)."""
    language = request_language(request)
    with translation.override(language):  # restores the thread's language on the way out
        response = _refusal(request, status, decision)
    patch_vary_headers(response, ["Accept", "Accept-Language"])
    response.headers.setdefault("Content-Language", language)
    patch_cache_control(response, no_store=True)
    if status == 503:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _refusal(
    request: HttpRequest, status: int, decision: blocklist.Decision | None
) -> HttpResponse:
    address = getattr(request, "bloom_client_ip", None)
    if status == 403:
        code, detail = "blocked", gettext("Access from your network address is blocked.")
    else:
        code = "unavailable"
        detail = gettext("The address check is unavailable; try again shortly.")
    if prefers_json(request):
        response: HttpResponse = JsonResponse(
            {"error": code, "detail": detail, "ip": address}, status=status
        )
    else:
        context = {
            "ip": address,
            "status": status,
            "code": code,
            "detail": detail,
            "entry": decision.entry if decision else None,
        }
        html = render_to_string(get_config()["BLOCKED_TEMPLATE"], context)
        response = HttpResponse(html, status=status)
    return response


def decide(request: HttpRequest) -> HttpResponse | None:
    """Annotate the request (``bloom_client_ip``, ``bloom_decision``); a response if refused."""
    address = _annotate(request)
    try:
        decision = blocklist.check_ip(address)
    except (FilterUnavailable, FilterNotFound) as exc:
        decision, refused = None, _cannot_tell(request, exc)
    else:
        refused = _decided(request, decision)
    if refused is not None:
        request_blocked.send_robust(BlocklistMiddleware, **_announced(request, decision))
    return refused


async def adecide(request: HttpRequest) -> HttpResponse | None:
    """``decide`` for the async stack: the filter's read is awaited on the event loop
    (``blocklist.acheck_ip``), no thread (its rare database reads use ``sync_to_async``)."""
    address = _annotate(request)
    try:
        decision = await blocklist.acheck_ip(address)
    except (FilterUnavailable, FilterNotFound) as exc:
        decision, refused = None, _cannot_tell(request, exc)
    else:
        refused = _decided(request, decision)
    if refused is not None:
        await asend_robust(request_blocked, BlocklistMiddleware, **_announced(request, decision))
    return refused


def _announced(request: HttpRequest, decision: blocklist.Decision | None) -> dict[str, Any]:
    """``request_blocked``'s arguments: a 403 (its entry) or a 503 (none: cannot tell)."""
    if decision is None:
        return {"request": request, "entry": None, "reason": UNAVAILABLE}
    return {"request": request, "entry": decision.entry, "reason": decision.reason}


def _annotate(request: HttpRequest) -> Any:
    try:
        address = iplib.client_address(request)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DJANGO_BLOOM['TRUSTED_PROXIES']: {exc}") from None
    request.bloom_client_ip = None if address is None else str(address)  # type: ignore[attr-defined]
    request.bloom_decision = None  # type: ignore[attr-defined]
    return address


def _cannot_tell(request: HttpRequest, exc: Exception) -> HttpResponse | None:
    """``FAIL_OPEN``: let the request through (None), or a 503."""
    if get_config()["FAIL_OPEN"]:
        warn_throttled(
            logger,
            f"unavailable:{type(exc).__name__}",
            "IP blocklist cannot answer (%s); letting requests through (FAIL_OPEN=True)",
            exc,
        )
        return None
    warn_throttled(
        logger,
        f"closed:{type(exc).__name__}",
        "IP blocklist cannot answer (%s); refusing requests with 503 (FAIL_OPEN=False)",
        exc,
    )
    return refusal(request, 503, None)


def _decided(request: HttpRequest, decision: blocklist.Decision) -> HttpResponse | None:
    request.bloom_decision = decision  # type: ignore[attr-defined]
    if decision.blocked:
        logger.info("blocked %s (listed in %s)", decision.ip, decision.network)
        hits.record(decision.entry)
        return refusal(request, 403, decision)
    return None


class BlocklistMiddleware:
    """Refuse requests from blocked addresses. Works in sync and async stacks.

    In an async stack the check runs on the event loop (``adecide``): the Redis
    round trip is awaited (``Filter.acontains_many``), so concurrent requests
    are checked concurrently, with no thread per request; only the per-process
    caches' rare database reloads go through ``sync_to_async``.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any):
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        return decide(request) or self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        refused = await adecide(request)
        if refused is not None:
            return refused
        return await self.get_response(request)
