"""Translations: every marked string has a Simplified Chinese translation, the
compiled catalog matches it, and pages render translated."""

import ast
import gettext
from pathlib import Path

import pytest
from django.test import RequestFactory
from django.urls import reverse

import django_bloom
from django_bloom import middleware
from django_bloom.ops import monitoring

LOCALE = Path(django_bloom.__file__).parent / "locale" / "zh_Hans" / "LC_MESSAGES"


def po_entries(path):
    """(msgid, msgstrs, flags) of each entry of a .po file (enough of the format for a check)."""
    entries, current, field = [], None, None
    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip():
            if current:
                entries.append(current)
            current, field = None, None
            continue
        current = current or {"msgid": "", "msgstr": [], "flags": ""}
        if line.startswith("#,"):
            current["flags"] += line
        elif line.startswith("msgid "):
            field, current["msgid"] = "msgid", ast.literal_eval(line[6:])
        elif line.startswith("msgid_plural "):
            field, current["plural"] = "plural", True
        elif line.startswith("msgstr"):
            field = "msgstr"
            current["msgstr"].append(ast.literal_eval(line.split(" ", 1)[1]))
        elif line.startswith('"') and field == "msgid":
            current["msgid"] += ast.literal_eval(line)
        elif line.startswith('"') and field == "msgstr":
            current["msgstr"][-1] += ast.literal_eval(line)
    return [e for e in entries if e["msgid"]]


def test_every_string_is_translated_and_compiled():
    entries = po_entries(LOCALE / "django.po")
    assert len(entries) > 100
    untranslated = [e["msgid"] for e in entries if not all(e["msgstr"]) or "fuzzy" in e["flags"]]
    assert untranslated == []
    with open(LOCALE / "django.mo", "rb") as fh:
        catalog = gettext.GNUTranslations(fh)

    def compiled(e):  # Python 3.10's gettext() does not look plural entries up
        msgid = e["msgid"]
        return catalog.ngettext(msgid, msgid, 1) if e.get("plural") else catalog.gettext(msgid)

    stale = [e["msgid"] for e in entries if compiled(e) != e["msgstr"][0]]
    assert stale == [], "django.mo is older than django.po: run make messages"


@pytest.mark.django_db
def test_admin_pages_render_in_chinese(admin_client, settings):
    settings.LANGUAGE_CODE = "zh-hans"
    monitoring.forget_stats()
    f = django_bloom.create_filter("emails", capacity=1000, error_rate=0.0001)
    html = admin_client.get(reverse("admin:django_bloom_bloomfilter_changelist")).content
    html = html.decode()
    assert "健康状态" in html and "正常" in html  # column and health word
    assert "目标 10000 分之一" in html and "无（过滤器为空）" in html
    detail = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    ).content.decode()
    assert "容量" in detail and "暂无历史数据" in detail and "误判率" in detail


def test_refusal_page_and_detail_in_chinese(settings):
    settings.LANGUAGE_CODE = "zh-hans"
    request = RequestFactory().get("/", HTTP_ACCEPT="text/html")
    request.bloom_client_ip = "203.0.113.9"
    page = middleware.refusal(request, 403, None).content.decode()
    assert "访问被拒绝" in page and "来自您网络地址的访问已被封禁。" in page
    assert 'lang="zh-hans"' in page
    unavailable = middleware.refusal(request, 503, None).content.decode()
    assert "服务暂时不可用" in unavailable
