"""End to end in a real browser: a system Chromium driven by Playwright.

Runs the example site as a live server on a free port (its own SQLite file and
Redis key prefix, time zone Asia/Shanghai), then signs up, gets refused, reads
the admin (light and dark theme, 1280 px wide), clears a bound filter through
its confirmation page, gets a 403 through a trusted proxy, and checks a
view-only staff user cannot rebuild. Screenshots go to a temporary directory;
`make screenshots` (UPDATE_SCREENSHOTS=1) writes them to docs/screenshots/, the
ones the README shows, so a plain test run leaves the checkout unchanged.

Chromium is found at $BLOOM_CHROMIUM, /usr/bin/chromium, or as chromium /
chromium-browser on PATH (never downloaded). Without one the tests are skipped
with a warning; BLOOM_REQUIRE_BROWSER=1 (set by .ci/run) turns that into a failure.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.example_site import SITE, run_manage

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SHOTS = (
    ROOT / "docs" / "screenshots"
    if os.environ.get("UPDATE_SCREENSHOTS")
    else Path(
        os.environ.get("BLOOM_SCREENSHOTS")
        or Path(tempfile.gettempdir()) / "django-bloom-screenshots"
    )
)
SITE_TIME_ZONE = "Asia/Shanghai"
# Waits allow a busy machine (Playwright's default is 30 s): they are limits, not timings.
BUSY_MACHINE_MS = 120_000
SITE_START_SECONDS = 120


def find_chromium() -> str | None:
    """$BLOOM_CHROMIUM, Debian's /usr/bin/chromium, or chromium/chromium-browser on PATH."""
    named = os.environ.get("BLOOM_CHROMIUM")
    if named:
        return named if Path(named).exists() else None
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


def no_browser(reason: str):
    """Skip loudly, or fail where a browser is required (CI sets BLOOM_REQUIRE_BROWSER=1)."""
    message = f"BROWSER TEST SKIPPED: {reason}"
    if os.environ.get("BLOOM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (BLOOM_REQUIRE_BROWSER=1: the browser test must run here)")
    import warnings

    warnings.warn(message, stacklevel=2)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manage(env, *args):
    done = run_manage(env, *args)
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def site(tmp_path_factory, redis_url, chromium):
    prefix = f"test-browser-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "EXAMPLE_DB": str(tmp_path_factory.mktemp("site") / "db.sqlite3"),
        "BLOOM_KEY_PREFIX": prefix,
        "REDIS_URL": redis_url,
        "BLOOM_TRUSTED_PROXIES": "127.0.0.1/32",
        "DJANGO_DEBUG": "1",  # runserver serves the admin static files
        "DJANGO_TIME_ZONE": SITE_TIME_ZONE,
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
    # The server's log goes to a file: a pipe nobody reads fills up (64 KiB: a few hundred
    # requests, fewer with warnings), and then runserver blocks on its next log line.
    log = tmp_path_factory.mktemp("site-log") / "runserver.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=SITE,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SITE_START_SECONDS
    while True:
        try:
            urllib.request.urlopen(base + "/", timeout=5)
            break
        except OSError as exc:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError(f"example site did not start: {log.read_text()}") from exc
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
def chromium():
    found = find_chromium()
    if found is None:
        where = os.environ.get("BLOOM_CHROMIUM") or "/usr/bin/chromium, chromium, chromium-browser"
        no_browser(f"no Chromium found ({where}); install it, e.g. apt-get install chromium")
    try:
        import playwright  # noqa: F401
    except ImportError:
        no_browser("playwright is not installed (pip install -e '.[browser]')")
    return found


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium,
            headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"],
        )
        yield b
        b.close()


def new_context(browser, **options):
    """A browser context whose waits (navigations, actions) allow a busy machine."""
    context = browser.new_context(**options)
    context.set_default_timeout(BUSY_MACHINE_MS)
    return context


@pytest.fixture
def page(browser):
    context = new_context(browser, viewport={"width": 1600, "height": 900})
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def dark_page(browser):
    """The admin follows the system's dark preference (theme toggle on "auto")."""
    context = new_context(browser, viewport={"width": 1440, "height": 900}, color_scheme="dark")
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


def record_snapshots(page, site, times=2):
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    for _ in range(times):
        page.check("#action-toggle")
        page.select_option("select[name=action]", "recompute_stats")
        page.click("button[name=index]")
        assert "Recorded 4 snapshots." in page.inner_text(".messagelist")


def test_admin_shows_capacity_figures_and_chart(site, page):
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    rows = page.inner_text("#result_list")
    assert "usernames" in rows and "emails" in rows and "ip-blocklist" in rows
    assert "/ 100,000" in rows  # estimated items vs capacity
    assert "target 1 in 100" in rows  # FPR in words, against its target
    assert "-0" not in rows
    assert "ok" in rows
    # Record snapshots through the UI action, twice, for the trend chart.
    record_snapshots(page, site)
    shot(page, "admin-filters.png")
    page.click("#result_list a:text-is('emails')")
    page.wait_for_url("**/change/")
    chart = page.locator("svg.bloom-chart")
    chart.wait_for(state="visible")
    # seed_demo's week (7 daily snapshots) and the 2 just recorded
    assert page.locator("svg.bloom-chart circle.bloom-point").count() == 9
    assert "database queries skipped" in page.inner_text("#bloom-validator")
    figures = page.inner_text("#bloom-capacity")
    assert "seed" not in page.inner_text("#content-main").lower()
    assert "false positives now" in figures and "1 in 100" in figures
    # The chart fills its panel (no fixed 640 px) and its ticks say what they mark.
    panel = page.locator("#bloom-trend").bounding_box()
    assert chart.bounding_box()["width"] > 0.8 * (panel["width"] - 40)
    ticks = page.locator("svg.bloom-chart text.bloom-tick").all_text_contents()
    assert ticks[0] == "0" and len(ticks) >= 3
    # The two snapshots were taken seconds apart: their labels still differ.
    first_on_chart, last_on_chart = page.locator(
        "svg.bloom-chart text.bloom-time"
    ).all_text_contents()
    assert first_on_chart != last_on_chart
    points = page.locator("svg.bloom-chart circle.bloom-point title").all_text_contents()
    assert len(set(points)) == len(points) >= 2  # every point told apart
    # One time zone: the chart's last moment is the admin's own "recorded at" of that
    # snapshot (the list reads to the second; the chart as finely as its points need).
    filter_id = page.url.rstrip("/").split("/")[-2]
    page.goto(site + f"/admin/django_bloom/filtersnapshot/?bloom_filter__id__exact={filter_id}")
    recorded = page.locator("#result_list td.field-recorded_display").first.inner_text()

    def to_the_minute(text):
        return re.sub(r"(\d:\d\d):\d\d(?:\.\d+)?", r"\1", text)

    assert to_the_minute(last_on_chart) == to_the_minute(recorded)
    assert "e-" not in page.inner_text("#result_list")  # no raw floats like 3.39e-06


def test_filling_filter_shows_its_trend_and_projection(site, page):
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    row = page.locator("#result_list tr", has=page.locator("a:text-is('newsletter-opens')"))
    assert "filling" in row.inner_text()
    row.locator("a:text-is('newsletter-opens')").click()
    page.wait_for_url("**/change/")
    assert page.locator("svg.bloom-chart circle.bloom-point").count() >= 8  # seed_demo's week
    assert page.locator("#bloom-validator").count() == 0  # a generic filter: no validator card
    trend = page.inner_text("#bloom-trend")
    assert "Projected to reach capacity around" in trend and "Already" not in trend
    assert page.inner_text("#bloom-full-at").strip()
    # the capacity label sits above its dashed line, inside the plot
    label = page.locator("svg.bloom-chart text.bloom-capacity-label").bounding_box()
    line = page.locator("svg.bloom-chart line.bloom-capacity").bounding_box()
    assert label["y"] + label["height"] <= line["y"] + 1
    shot(page, "admin-filter-detail.png")


@pytest.mark.parametrize("width", [1280, 1440])
def test_filter_list_fits_laptop_widths_health_column_visible(site, browser, width):
    context = new_context(browser, viewport={"width": width, "height": 800})
    page = context.new_page()
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    if width == 1280:
        shot(page, "admin-filters-1280.png")
    # The list scrolls inside its own box when too wide: nothing may hide there.
    results = page.locator("#changelist .results")
    assert results.evaluate("e => e.scrollWidth <= e.clientWidth"), "columns overflow"
    right = results.bounding_box()["x"] + results.bounding_box()["width"]
    for column in ("health_display", "memory_display", "last_rebuild_display"):
        box = page.locator(f"#result_list th.column-{column}").bounding_box()
        assert box is not None and box["x"] + box["width"] <= min(right, width) + 1, column
    context.close()


def luminance(css_colour: str) -> float:
    import re

    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", css_colour)[:3])

    def lin(c):
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def contrast(a: str, b: str) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_dark_mode_is_readable(site, dark_page):
    page = dark_page
    admin_login(page, site, "admin", "bloom-demo")
    record_snapshots(page, site, times=2)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert luminance(background) < 0.1  # the admin really is dark
    health = page.locator("#result_list .bloom-health-ok").first
    assert contrast(health.evaluate("e => getComputedStyle(e).color"), background) >= 4.5
    track = page.locator(".bloom-bar").first.evaluate("e => getComputedStyle(e).backgroundColor")
    assert luminance(track) < 0.3  # not a bright white track
    shot(page, "admin-filters-dark.png")
    page.click("#result_list a:text-is('usernames')")
    page.wait_for_url("**/change/")
    tick = page.locator("svg.bloom-chart text.bloom-tick").first
    panel = page.evaluate(
        "getComputedStyle(document.querySelector('#bloom-trend')).backgroundColor"
    )
    assert contrast(tick.evaluate("e => getComputedStyle(e).fill"), panel) >= 4.5
    shot(page, "admin-filter-detail-dark.png")


def test_admin_in_the_browsers_language(site, browser):
    context = new_context(browser, viewport={"width": 1440, "height": 900}, locale="zh-CN")
    page = context.new_page()
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    header = page.inner_text("#result_list thead")
    assert "健康状态" in header and "误判率" in header
    assert "接近满载" in page.inner_text("#result_list")  # newsletter-opens is filling
    assert "布隆过滤器" in page.inner_text("#nav-sidebar")  # the app's name too
    page.click("#result_list a:text-is('newsletter-opens')")
    page.wait_for_url("**/change/")
    assert "预计达到容量的时间约为" in page.inner_text("#bloom-trend")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    page.click("#result_list a:text-is('usernames')")  # rebuilt by seed_demo
    page.wait_for_url("**/change/")
    assert "已完成" in page.inner_text("[class*='field-rebuild_state']")  # was "done"
    context.close()


def test_clear_on_a_bound_filter_asks_and_rebuilds(site, page):
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    row = page.locator("#result_list tr", has=page.locator("a:text-is('usernames')"))
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "clear_filters")
    page.click("button[name=index]")
    explanation = page.inner_text("#bloom-clear-bound")
    assert "rebuilt from their source" in explanation and "usernames" in explanation
    shot(page, "admin-clear-confirmation.png")
    page.click("input[type=submit]")
    assert "Rebuilding usernames" in page.inner_text(".messagelist")
    # Still answers "taken" for an existing user: nothing was emptied.
    sign_up(page, site, "demo-user-7", "someone.new@example.com")
    page.click("button[type=submit]")
    assert "/signup/done/" not in page.url


def test_blocklist_forms_have_date_widgets_and_refuse_the_past(site, page):
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/blockedentry/import/")
    form = page.locator("#netset-import-form")
    assert form.locator("fieldset.module.aligned").count() == 1  # like other admin forms
    assert form.locator(".datetimeshortcuts").count() >= 1  # Today / calendar / Now
    assert SITE_TIME_ZONE in form.inner_text()
    shot(page, "admin-import.png")
    page.goto(site + "/admin/django_bloom/blockedentry/add/")
    page.fill("#id_network", "2001:db8:feed::/48")
    page.fill("#id_expires_at_0", "2001-01-01")
    page.fill("#id_expires_at_1", "12:00:00")
    page.click("input[name=_save]")
    assert "is in the past" in page.inner_text(".errorlist")
    assert "/add/" in page.url


def test_blocked_address_behind_trusted_proxy_gets_403(site, page, browser):
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
    # In the visitor's language, though the middleware runs before LocaleMiddleware.
    blocked = {"X-Forwarded-For": "2001:db8:beef:7::23"}
    context = new_context(browser, locale="zh-CN", extra_http_headers=blocked)
    zh = context.new_page()
    assert zh.goto(site + "/my-ip/").status == 403
    assert zh.locator("html").get_attribute("lang") == "zh-hans"
    assert zh.inner_text("h1") == "访问被拒绝"
    context.close()


def test_an_allowed_network_lets_a_blocked_address_through(site, page, dark_page):
    """The allowlist page in the admin (light and dark), and the blocklist's hit columns."""
    admin_login(page, site, "admin", "bloom-demo")
    page.goto(site + "/admin/django_bloom/blockedentry/add/")
    page.fill("#id_network", "2001:db8:cafe::/48")
    page.fill("#id_cooldown", "1 00:00:00")
    page.click("input[name=_save]")
    visitor = {"X-Forwarded-For": "2001:db8:cafe::9"}
    page.set_extra_http_headers(visitor)
    assert page.goto(site + "/my-ip/").status == 403
    page.set_extra_http_headers({})
    page.goto(site + "/admin/django_bloom/allowednetwork/add/")
    page.fill("#id_network", "2001:db8:cafe::9")
    page.fill("#id_reason", "our uptime monitor")
    page.click("input[name=_save]")
    assert "2001:db8:cafe::9/128" in page.inner_text("#result_list")
    shot(page, "admin-allowlist.png")
    page.set_extra_http_headers(visitor)
    assert page.goto(site + "/my-ip/").status == 200  # allowed: read before the blocklist
    page.set_extra_http_headers({})
    page.goto(site + "/admin/django_bloom/blockedentry/?q=cafe")
    headers = page.inner_text("#result_list thead").lower()  # shown in capitals (CSS)
    assert "hits" in headers and "last seen" in headers
    admin_login(dark_page, site, "admin", "bloom-demo")
    dark_page.goto(site + "/admin/django_bloom/allowednetwork/")
    background = dark_page.evaluate("getComputedStyle(document.body).backgroundColor")
    cell = dark_page.locator("#result_list td.field-reason").first
    assert contrast(cell.evaluate("e => getComputedStyle(e).color"), background) >= 4.5
    shot(dark_page, "admin-allowlist-dark.png")


def test_view_only_staff_cannot_rebuild(site, page):
    admin_login(page, site, "viewer", "viewer-pass-42")
    page.goto(site + "/admin/django_bloom/bloomfilter/")
    assert "usernames" in page.inner_text("#result_list")
    assert page.locator("select[name=action] option[value=rebuild_from_source]").count() == 0
    assert page.locator("select[name=action] option[value=clear_filters]").count() == 0


def test_chromium_is_found_where_it_is(monkeypatch, tmp_path):
    fake = tmp_path / "chromium-browser"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("BLOOM_CHROMIUM", str(fake))
    assert find_chromium() == str(fake)
    monkeypatch.setenv("BLOOM_CHROMIUM", str(tmp_path / "missing"))
    assert find_chromium() is None  # named but absent: not silently another one
    monkeypatch.delenv("BLOOM_CHROMIUM")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_chromium() in ("/usr/bin/chromium", str(fake))


def test_a_missing_browser_fails_where_it_is_required(monkeypatch):
    monkeypatch.setenv("BLOOM_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="must run here"):
        no_browser("no Chromium found")
    monkeypatch.delenv("BLOOM_REQUIRE_BROWSER")
    with pytest.warns(UserWarning, match="BROWSER TEST SKIPPED"):
        with pytest.raises(pytest.skip.Exception):
            no_browser("no Chromium found")
