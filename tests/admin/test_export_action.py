"""The admin's Export action (issue 37): a streamed download of one filter's dump, the hash
key left out, for users with the view permission; nobody else gets a byte."""

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

import django_bloom
from django_bloom.models import BloomFilter

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_bloom_bloomfilter_changelist"


def staff(client, *codenames):
    user = User.objects.create_user("staff", is_staff=True)  # no password: no hashing
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


def export(client, *names):
    pks = [BloomFilter.objects.get(name=n).pk for n in names]
    return client.post(reverse(CHANGELIST), {"action": "export_filter", "_selected_action": pks})


def test_a_viewer_downloads_a_dump_without_the_key_that_restores_the_filter(client):
    f = django_bloom.create_filter("downloads", capacity=1000)
    f.add_many(["a", "b", "c"])
    viewer = staff(client, "view_bloomfilter")
    assert "export_filter" in viewer.get(reverse(CHANGELIST)).content.decode()
    response = export(viewer, "downloads")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == 'attachment; filename="downloads.bloomdump"'
    dump = b"".join(response.streaming_content)
    assert f.meta.hasher.partition("$")[2] not in dump.decode("latin-1")
    f.clear()
    f.load(dump)
    assert all(f.contains_many(["a", "b", "c"]))


def test_no_view_permission_no_download(client):
    django_bloom.create_filter("secret", capacity=100).add("x")
    response = export(staff(client), "secret")
    assert response.status_code == 403 and not getattr(response, "streaming", False)


def test_one_filter_at_a_time_and_a_kind_that_cannot_says_why(client):
    django_bloom.create_filter("one", capacity=100)
    django_bloom.create_filter("window", capacity=100, layout="rotating")
    viewer = staff(client, "view_bloomfilter")
    page = export(viewer, "one", "window")
    assert not getattr(page, "streaming", False)
    assert "Select one filter to export." in viewer.get(reverse(CHANGELIST)).content.decode()
    export(viewer, "window")
    assert "rotating window" in viewer.get(reverse(CHANGELIST)).content.decode()
