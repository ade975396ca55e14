"""Every word the admin shows goes through the catalogue (issue 24, item 4): the rebuild
state on the filter page, the layouts' descriptions in the add form, and a check (run by
``make messages-check``) that finds a shown word with no translation."""

import re

import pytest
from django.urls import reverse

import django_bloom
from django_bloom.admin import forms as bloom_admin
from django_bloom.engine.kinds.standard import StandardLayout
from django_bloom.models import BloomFilter
from django_bloom.ops import catalogue, monitoring

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_stats():
    monitoring.forget_stats()
    yield
    monitoring.forget_stats()


def field_row(html, name):
    """The text of the change page's row for a read-only field (``field-<name>...``)."""
    match = re.search(rf'<div class="form-row field-{name}[^"]*">(.*?)</div>\s*</div>', html, re.S)
    assert match, f"no row field-{name}"
    return re.sub(r"<[^>]+>", " ", match[1])


@pytest.mark.parametrize(
    "state, words",
    [("done", "已完成"), ("failed", "失败"), ("running", "进行中"), ("", "从未重建")],
)
def test_rebuild_state_is_translated_on_the_filter_page(admin_client, settings, state, words):
    settings.LANGUAGE_CODE = "zh-hans"
    f = django_bloom.create_filter("emails", capacity=1000, error_rate=0.01)
    BloomFilter.objects.filter(pk=f.meta.pk).update(rebuild_state=state)
    html = admin_client.get(
        reverse("admin:django_bloom_bloomfilter_change", args=[f.meta.pk])
    ).content.decode()
    row = field_row(html, "rebuild_state")
    assert "重建状态" in row and words in row
    assert state == "" or state not in row  # the stored value was shown ("done")


def test_layout_choices_are_translated_in_the_add_form(admin_client, settings):
    settings.LANGUAGE_CODE = "zh-hans"
    html = admin_client.get(reverse("admin:django_bloom_bloomfilter_add")).content.decode()
    assert "standard: k 个位分布在同一个位图中的任意位置（默认）" in html
    assert "k bits anywhere" not in html


def test_every_word_the_admin_shows_translates():
    assert catalogue.untranslated("zh-hans") == []


def test_the_check_finds_a_shown_word_without_translation(monkeypatch):
    monkeypatch.setattr(StandardLayout, "description", "a plain English description")
    field = bloom_admin.BloomFilterCreateForm.base_fields["make_family"]
    monkeypatch.setattr(field, "label", "Unmarked label")
    found = catalogue.untranslated("zh-hans")
    assert any("a plain English description" in line for line in found)
    assert "BloomFilterCreateForm.make_family: 'Unmarked label'" in found


def test_the_state_labels_are_all_in_the_catalogue():
    lines = catalogue.untranslated("zh-hans")
    assert not [line for line in lines if "RebuildState" in line]
    assert len(list(catalogue.shown_strings())) > 80  # the check does look at the admin
