"""docs/security.md walked against the real admin (issue 34 items 4 and 5).

The page's tables are read here: every URL the app's admin registers (found from the
admin site's URL patterns, so a later page is caught), every action, every change-list
parameter and every ``bloom`` verb has a row, and every row exists. Each page is asked
for as each kind of user: a refused one answers 403 (anonymous: the login page) before
any Redis command and any query on the app's tables. No URL parameter reaches a secret
field, and no page shows the hash key or the seed."""

import re
from pathlib import Path

import django
import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.views.generic import RedirectView

import django_bloom
from django_bloom import ipblock
from django_bloom.management.commands.bloom import Command
from django_bloom.models import AllowedNetwork, BlockedEntry, BloomFilter, FilterSnapshot
from django_bloom.ops import monitoring
from django_bloom.ops.admin_support import SECRET_FIELDS, AppAdmin

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \|", re.MULTILINE)
USERS = ("anonymous", "staff", "view", "add", "change", "delete", "superuser")
GENERIC = {"q": "x", "o": "1", "p": "1", "all": "", "_facets": "1", "_popup": "1",
           "_to_field": "id", "e": "1"}  # fmt: skip
if django.VERSION < (5, 0):  # facets came with Django 5.0: before it, ?_facets= is no parameter
    del GENERIC["_facets"]
COMMAND = re.compile(rb"\*\d+\r\n\$\d+\r\n([A-Za-z_]+)\r\n")
WRITES = {b"SET", b"SETRANGE", b"BITFIELD", b"DEL", b"UNLINK", b"EVALSHA", b"EVAL", b"RENAME",
          b"EXPIRE"}  # fmt: skip (HINCRBY: pending counts a stats read flushes)
VALUES = {"status": "active", "list_name": "ip-blocklist", "recorded_at__year": "2024",
          "recorded_at__month": "1", "recorded_at__day": "1"}  # fmt: skip


def rows(prefix: str) -> dict[str, str]:
    return {k[len(prefix) :]: v for k, v in ROW.findall(DOC.read_text()) if k.startswith(prefix)}


def app_admins() -> dict:
    return {m: a for m, a in admin.site._registry.items() if m._meta.app_label == "django_bloom"}


def allowed(needs: str, user: str) -> bool:
    """The table's ``needs`` against a user: view is had by every user with a permission
    (as admins grant them: view, and view + add, view + change, view + delete)."""
    if user in ("anonymous", "staff") or needs == "nobody":
        return False
    return user == "superuser" or needs == "view" or needs == user


@pytest.fixture
def objects(redis_client):
    f = django_bloom.create_filter("secretive", capacity=1000)
    f.add("kept")
    snapshot = monitoring.record_snapshot(f)
    entry = ipblock.block("203.0.113.0/24", reason="scraper")
    allowed = AllowedNetwork.objects.create(network="198.51.100.0/24", reason="monitoring")
    return {BloomFilter: f.meta, FilterSnapshot: snapshot, BlockedEntry: entry,
            AllowedNetwork: allowed}  # fmt: skip


@pytest.fixture
def clients(objects):
    out = {"anonymous": Client()}
    for kind in USERS[1:]:
        user = User.objects.create(username=kind, is_staff=True, is_superuser=kind == "superuser")
        for model in app_admins():
            granted = {"staff": (), "superuser": (), "view": ("view",)}
            for action in granted.get(kind, ("view", kind)):
                codename = f"{action}_{model._meta.model_name}"
                user.user_permissions.add(Permission.objects.get(codename=codename))
        out[kind] = Client()
        out[kind].force_login(user)
    return out


class Watch:
    """The Redis commands sent and the queries on the app's tables while it is open."""

    def __init__(self, sent):
        self.sent = sent

    def __enter__(self):
        monitoring.forget_stats()  # a refused filter page must not find its figures cached
        self.start = len(self.sent)
        self.queries = CaptureQueriesContext(connection).__enter__()
        return self

    def __exit__(self, *exc):
        self.queries.__exit__(*exc)

    @property
    def redis(self) -> list[bytes]:
        return self.sent[self.start :]

    @property
    def app_queries(self) -> list[str]:
        return [q["sql"] for q in self.queries.captured_queries if "django_bloom_" in q["sql"]]


def page_urls(objects) -> dict[str, str]:
    """Every named URL of the app's admins -> a path (an object's pages: its object)."""
    urls = {}
    for model, model_admin in app_admins().items():
        for pattern in model_admin.urls:
            if pattern.name is None:  # Django's old-style redirect to the change page
                assert pattern.callback.view_class is RedirectView, pattern
                continue
            takes_id = "object_id" in str(pattern.pattern)
            args = [objects[model].pk] if takes_id else []
            urls[f"admin:{pattern.name}"] = reverse(f"admin:{pattern.name}", args=args)
    return urls


def test_every_page_checks_its_permission_before_any_work(objects, clients, sent_commands):
    table = {f"admin:{k}": v for k, v in rows("admin:").items()}
    urls = page_urls(objects)
    assert set(urls) == set(table), "pages without a row, or rows without a page"
    secrets = [str(objects[BloomFilter].seed), objects[BloomFilter].hasher.split("$", 1)[1]]
    for name, url in sorted(urls.items()):
        for user in USERS:
            with Watch(sent_commands) as watch:
                response = clients[user].get(url)
            ok = allowed(table[name], user)
            where = f"{name} as {user} (needs {table[name]})"
            if ok:
                assert response.status_code == 200, where
                body = response.content.decode()
                assert not any(secret in body for secret in secrets), f"a secret shown: {where}"
                continue
            expected = 302 if user == "anonymous" else 403
            assert response.status_code == expected, f"{where}: {response.status_code}"
            assert watch.redis == [], f"{where}: Redis commands before the refusal"
            assert watch.app_queries == [], f"{where}: queries before the refusal"


def test_every_action_is_in_the_table_and_needs_its_permission(objects, clients, sent_commands):
    table = rows("action:")
    found = set()
    factory = RequestFactory()
    for model, model_admin in app_admins().items():
        label = model._meta.model_name
        for user in USERS[1:]:
            request = factory.get("/")
            request.user = User.objects.get(username=user)
            names = set(model_admin.get_actions(request))
            found |= {f"{label}.{n}" for n in names}
            expected = {k.split(".", 1)[1] for k, needs in table.items()
                        if k.startswith(f"{label}.") and allowed(needs, user)}  # fmt: skip
            assert names == expected, f"{label} actions for {user}"
    assert found == set(table), "actions without a row, or rows without an action"
    # Posted anyway by users who may not run them: nothing runs, Redis is not written.
    item = django_bloom.get_filter("secretive")
    for key in sorted(table):
        label, action = key.split(".")
        model = next(m for m in app_admins() if m._meta.model_name == label)
        url = reverse(f"admin:django_bloom_{label}_changelist")
        data = {"action": action, "_selected_action": [objects[model].pk], "post": "yes",
                "confirm": "yes"}  # fmt: skip
        for user in ("anonymous", "staff", "view"):
            with Watch(sent_commands) as watch:
                response = clients[user].post(url, data)
            if user == "view":
                assert response.status_code in (200, 302), (key, user)  # no action ran
                writes = {n for c in watch.redis for n in COMMAND.findall(c)} & WRITES
                assert not writes, f"{key} posted by a view-only user wrote to Redis: {writes}"
            else:
                assert response.status_code in (302, 403), (key, user)
                assert watch.redis == [] and watch.app_queries == [], (key, user)
    assert item.contains("kept")
    assert FilterSnapshot.objects.count() == 1
    assert BlockedEntry.objects.get().is_active() and BloomFilter.objects.count() == 2


def test_no_url_parameter_reaches_another_field(objects, clients):
    table = rows("?")
    viewer = clients["view"]
    request = RequestFactory().get("/")
    request.user = User.objects.get(username="view")
    for model, model_admin in app_admins().items():
        label = model._meta.model_name
        listed = {k.split(":", 1)[1] for k in table if k.split(":")[0] in ("*", label)}
        listed -= {"_facets"} - set(GENERIC)
        url = reverse(f"admin:django_bloom_{label}_changelist")
        for name in probes(model):
            if name not in listed:
                status = viewer.get(url, {name: "1"}).status_code
                assert status == 400, f"{label}: ?{name}= answered {status}"
        assert isinstance(model_admin, AppAdmin), f"{label}: its admin is not an AppAdmin"
        taken = set(GENERIC) | model_admin.filter_parameters(request)
        assert taken == listed, f"{label}: parameters the admin takes vs the table"
        pk = objects.get(BloomFilter).pk
        for name in sorted(listed):
            value = VALUES.get(name, str(pk) if name.endswith("id__exact") else "1")
            value = GENERIC.get(name, value) if name in GENERIC else value
            assert viewer.get(url, {name: value}).status_code == 200, (label, name)
        for secret in SECRET_FIELDS:
            assert viewer.get(url, {"_to_field": secret}).status_code == 400


def test_the_hash_key_and_the_seed_cannot_be_guessed_through_the_list(objects, clients):
    """A yes/no per request once gave the whole key away (300-390 GETs): now a 400."""
    row = objects[BloomFilter]
    url = reverse("admin:django_bloom_bloomfilter_changelist")
    for user in ("view", "superuser"):
        for name, value in (("hasher__startswith", row.hasher[:12]), ("seed__lt", row.seed + 1),
                            ("hasher__regex", "^blake"), ("seed", row.seed)):  # fmt: skip
            assert clients[user].get(url, {name: value}).status_code == 400, (user, name)


def probes(model) -> list[str]:
    """Lookups on every field of the model and of the models its relations reach."""
    names = []
    for field in model._meta.get_fields():
        if not field.concrete:
            continue
        names += [f"{field.name}{lookup}" for lookup in ("", "__startswith", "__lt", "__isnull")]
        if field.is_relation:
            for far in field.related_model._meta.concrete_fields:
                names += [f"{field.name}__{far.name}__startswith", f"{field.name}__{far.name}"]
    return names


def test_nothing_the_admin_searches_filters_or_orders_by_is_secret():
    for model, model_admin in app_admins().items():
        paths = [*model_admin.search_fields, *(model_admin.ordering or ()),
                 *(p if isinstance(p, str) else p[0] if isinstance(p, tuple) else p.parameter_name
                   for p in model_admin.list_filter),
                 model_admin.date_hierarchy or ""]  # fmt: skip
        for column in model_admin.list_display:
            attr = getattr(model_admin, column, None) if isinstance(column, str) else column
            paths += [getattr(attr, "admin_order_field", "")]
        parts = {part.lstrip("-^=@") for path in paths if path for part in path.split("__")}
        assert not parts & SECRET_FIELDS, model


def test_every_bloom_verb_has_a_row():
    assert set(rows("bloom:")) == set(Command.verbs)
