"""End to end in a real browser: Debian's Chromium driven by Playwright.

Runs the example site as a live server on a free port (its own SQLite file and
Redis key prefix), then signs up, gets refused, reads the admin, gets a 403
through a trusted proxy, and checks a view-only staff user cannot rebuild.
Screenshots go to a temporary directory; `make screenshots` (UPDATE_SCREENSHOTS=1)
writes them to docs/screenshots/, the ones the README shows, so a plain test run
leaves the checkout unchanged.
"""

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "example_site"
SHOTS = (
    ROOT / "docs" / "screenshots"
    if os.environ.get("UPDATE_SCREENSHOTS")
    else Path(tempfile.gettempdir()) / "django-bloom-screenshots"
)
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(env, *args):
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=SITE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def site(tmp_path_factory, redis_url):
    prefix = f"test-browser-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "EXAMPLE_DB": str(tmp_path_factory.mktemp("site") / "db.sqlite3"),
        "BLOOM_KEY_PREFIX": prefix,
        "REDIS_URL": redis_url,
        "BLOOM_TRUSTED_PROXIES": "127.0.0.1/32",
        "DJANGO_DEBUG": "1",  # runserver serves the admin static files
        "DJANGO_SETTINGS_MODULE": "example_site.settings",
    }
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "seed_demo", "--users", "300")
    manage(
        env,
        "shell",
        "-c",
        (
            "from django.contrib.auth.models import User, Permission;"
            "u = User.objects.create_user('viewer', password='viewer-pass-42', is_staff=True);"
            "u.user_permissions.add(*Permission.objects.filter(codename__in=['view_bloomfilter','view_blockedentry']))"
        ),
    )
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=SITE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(base + "/", timeout=1)
            break
        except OSError as exc:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError(
                    "example site did not start: " + (server.stdout.read() or "")
                ) from exc
            time.sleep(0.2)
    yield base
    server.terminate()
    server.wait(timeout=10)
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*"))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="module")
def redis_url():
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"],
        )
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    pg = context.new_page()
    yield pg
    context.close()


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name), full_page=True)


def sign_up(page, base, username, email):
    page.goto(base + "/signup/")
    page.fill("#id_username", username)
    page.fill("#id_email", email)
    page.fill("#id_password1", "Correct-Horse-42-battery")
    page.fill("#id_password2", "Correct-Horse-42-battery")


def admin_login(page, base, user, password):
    page.goto(base + "/admin/login/")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("input[type=submit]")


def test_signup_then_refused_in_another_case(site, page):
    sign_up(page, site, "browser-user", "Browser.User@Example.com")
    shot(page, "signup.png")
    page.click("button[type=submit]")
    page.wait_for_url("**/signup/done/")
    assert "Welcome, browser-user" in page.inner_text("h1")

    sign_up(page, site, "someone-else", "browser.user@EXAMPLE.COM")
    page.click("button[type=submit]")
    error = page.locator(".errorlist").first.inner_text()
    assert "An account with this email address already exists." in error
    assert "/signup/done/" not in page.url
    shot(page, "signup-refused.png")


def test_admin_shows_capacity_figures_and_chart(site, page):
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    rows = page.inner_text("#result_list")
    assert "usernames" in rows and "emails" in rows and "ip-blocklist" in rows
    assert "/ 100,000" in rows  # estimated items vs capacity
    assert "vs 1e-02" in rows  # current FPR vs target
    assert "ok" in rows
    # Record snapshots through the UI action, twice, for the trend chart.
    for _ in range(2):
        page.check("#action-toggle")
        page.select_option("select[name=action]", "recompute_stats")
        page.click("button[name=index]")
        assert "Recorded" in page.inner_text(".messagelist")
    shot(page, "admin-filters.png")
    page.click("#result_list a:text-is('emails')")
    page.wait_for_url("**/change/")
    chart = page.locator("svg.bloom-chart")
    chart.wait_for(state="visible", timeout=10_000)
    assert page.locator("svg.bloom-chart circle.bloom-point").count() == 2
    assert "database queries skipped" in page.inner_text("#bloom-validator")
    shot(page, "admin-filter-detail.png")


def test_blocked_address_behind_trusted_proxy_gets_403(site, page):
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/blockedentry/add/")
    page.fill("#id_network", "2001:db8:beef::/48")
    page.fill("#id_reason", "browser test")
    page.click("input[name=_save]")
    page.fill("#searchbar", "2001:db8:beef")
    page.press("#searchbar", "Enter")
    assert "2001:db8:beef::/48" in page.inner_text("#result_list")
    shot(page, "admin-blocklist.png")

    page.goto(site + "/my-ip/?check=2001:db8:beef:7::23")
    assert page.inner_text("#verdict") == "blocked"
    shot(page, "my-ip.png")

    page.set_extra_http_headers({"X-Forwarded-For": "2001:db8:beef:7::23"})
    response = page.goto(site + "/my-ip/")
    assert response.status == 403
    shot(page, "blocked-403.png")
    page.set_extra_http_headers({"X-Forwarded-For": "8.8.4.4"})
    assert page.goto(site + "/my-ip/").status == 200
    assert page.inner_text("#resolved-ip") == "8.8.4.4"


def test_view_only_staff_cannot_rebuild(site, page):
    admin_login(page, site, "viewer", "viewer-pass-42")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    assert "usernames" in page.inner_text("#result_list")
    assert page.locator("select[name=action] option[value=rebuild_from_source]").count() == 0
    assert page.locator("select[name=action] option[value=clear_filters]").count() == 0
