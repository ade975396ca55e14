"""The 403 page speaks the request's language although BlocklistMiddleware runs before
LocaleMiddleware (issue 24, item 2), and leaves the thread's language as it found it."""

import pytest
from django.test import Client, RequestFactory
from django.utils import translation

from django_bloom import ipblock as blocklist
from django_bloom import middleware
from tests.ipblock.test_middleware import AsyncClientAt

pytestmark = pytest.mark.django_db

BLOCKED = "203.0.113.7"
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.fixture
def installed(settings):
    # As the example site: blocklist first, LocaleMiddleware later (it never sees a 403).
    settings.MIDDLEWARE = [
        "django_bloom.middleware.BlocklistMiddleware",
        *settings.MIDDLEWARE,
        "django.middleware.locale.LocaleMiddleware",
    ]
    settings.LANGUAGE_CODE = "en-us"
    blocklist.block("203.0.113.0/24", reason="test network")


def blocked_page(client=None, **extra):
    client = client or Client()
    return client.get("/", REMOTE_ADDR=BLOCKED, HTTP_ACCEPT=BROWSER_ACCEPT, **extra)


def test_accept_language_picks_the_chinese_page(installed):
    response = blocked_page(HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9,en;q=0.5")
    assert response.status_code == 403
    page = response.content.decode()
    assert '<html lang="zh-hans">' in page  # was lang="en-us"
    assert "访问被拒绝" in page and "来自您网络地址的访问已被封禁。" in page
    assert response["Content-Language"] == "zh-hans"
    vary = {v.strip() for v in response["Vary"].split(",")}
    assert {"Accept", "Accept-Language"} <= vary


def test_the_language_cookie_wins_over_accept_language(installed, settings):
    client = Client()
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    page = blocked_page(client, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "访问被拒绝" in page


def test_english_and_languages_outside_languages_get_english(installed, settings):
    assert "Access denied" in blocked_page(HTTP_ACCEPT_LANGUAGE="en-GB").content.decode()
    settings.LANGUAGES = [("en", "English")]
    page = blocked_page(HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    assert "Access denied" in page and "访问被拒绝" not in page


def test_json_detail_is_translated_too(installed):
    response = Client().get(
        "/", REMOTE_ADDR=BLOCKED, HTTP_ACCEPT="application/json", HTTP_ACCEPT_LANGUAGE="zh-CN"
    )
    assert response.json()["detail"] == "来自您网络地址的访问已被封禁。"


def test_async_stack_speaks_the_language_too(installed):
    from asgiref.sync import async_to_sync

    async def fetch():
        headers = {"Accept": BROWSER_ACCEPT, "Accept-Language": "zh-CN"}
        return await AsyncClientAt(BLOCKED).get("/", headers=headers)

    response = async_to_sync(fetch)()
    assert response.status_code == 403 and "访问被拒绝" in response.content.decode()


def test_the_threads_language_is_restored(settings):
    settings.LANGUAGE_CODE = "en-us"
    request = RequestFactory().get("/", HTTP_ACCEPT=BROWSER_ACCEPT, HTTP_ACCEPT_LANGUAGE="zh-CN")
    request.bloom_client_ip = BLOCKED
    with translation.override("fr"):
        page = middleware.refusal(request, 403, None).content.decode()
        assert translation.get_language() == "fr"
    assert "访问被拒绝" in page
    translation.deactivate()
    middleware.refusal(request, 503, None)
    assert translation.get_language() == settings.LANGUAGE_CODE  # nothing left active
