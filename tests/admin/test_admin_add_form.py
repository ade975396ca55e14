"""The admin's add form, as a newcomer meets it (issue 24, item 3): no "null" in the
options box, labels capitalised like Django's own, the API's default error rate, and an
empty options box means no options."""

import inspect
import re

import pytest
from django.urls import reverse

import django_bloom
from django_bloom.models import BloomFilter
from tests.admin.test_admin import filter_form

pytestmark = pytest.mark.django_db

ADD = "admin:django_bloom_bloomfilter_add"


def form(**overrides):
    """test_admin's add-form data, with the extra fields the add form posts (empty)."""
    return filter_form(**{"layout_options": "", "member_ttl_seconds": "", **overrides})


def options_box(html):
    return re.search(r"<textarea name=\"layout_options\"[^>]*>(.*?)</textarea>", html, re.S)[1]


def labels(html):
    return re.findall(r"<label[^>]*>(.*?)</label>", html)


def test_the_options_box_is_empty_not_null(admin_client):
    html = admin_client.get(reverse(ADD)).content.decode()
    assert options_box(html).strip() == ""
    # shown again after an error elsewhere: still empty
    html = admin_client.post(reverse(ADD), form(capacity="0")).content.decode()
    assert "errornote" in html and options_box(html).strip() == ""


def test_labels_are_capitalised_like_the_others(admin_client):
    found = labels(admin_client.get(reverse(ADD)).content.decode())
    assert "Layout options:" in found and "Filter family" in found
    assert "Member expiry (seconds):" in found
    assert [label for label in found if label[:1].islower()] == []


def test_error_rate_defaults_to_create_filters_default(admin_client):
    default = inspect.signature(django_bloom.create_filter).parameters["error_rate"].default
    html = admin_client.get(reverse(ADD)).content.decode()
    field = re.search(r"<input[^>]*name=\"error_rate\"[^>]*>", html)[0]
    assert f'value="{default}"' in field


@pytest.mark.parametrize("typed", ["", "   ", "null", "{}"])
def test_an_empty_options_box_means_no_options(admin_client, typed):
    response = admin_client.post(reverse(ADD), form(layout_options=typed))
    assert response.status_code == 302, response.content.decode()[:3000]
    assert BloomFilter.objects.get(name="via-admin").options == {}
    django_bloom.get_filter("via-admin").delete()


def test_an_empty_options_box_gives_a_kind_its_defaults(admin_client):
    response = admin_client.post(reverse(ADD), form(layout="rotating"))
    assert response.status_code == 302, response.content.decode()[:3000]
    options = BloomFilter.objects.get(name="via-admin").options
    assert options and "slices" in options  # the rotating kind's own defaults


def test_options_that_are_not_an_object_are_refused(admin_client):
    html = admin_client.post(reverse(ADD), form(layout_options="[1, 2]")).content.decode()
    assert "A JSON object" in html
    assert not BloomFilter.objects.filter(name="via-admin").exists()
