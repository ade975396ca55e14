"""The example site's tests, isolated with django_bloom.testing (each test its own keys)."""

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from django_bloom import get_filter
from django_bloom.testing import BloomTestMixin, prefill


@pytest.mark.django_db
def test_unknown_profile_is_404_without_a_query(bloom_isolated, client, django_assert_num_queries):
    prefill("usernames", ["alice"])  # created from its BINDINGS entry
    get_filter("usernames")  # metadata cached, as in a warm process
    with django_assert_num_queries(0):
        assert client.get("/u/mallory/").status_code == 404


@pytest.mark.django_db
def test_known_profile_is_served(bloom_isolated, client):
    User.objects.create_user("alice")
    prefill("usernames", ["alice"])
    response = client.get("/u/alice/")
    assert response.status_code == 200
    assert b"alice" in response.content


@pytest.mark.django_db
def test_profile_without_a_filter_asks_the_database(bloom_isolated, client):
    User.objects.create_user("bob")
    assert client.get("/u/bob/").status_code == 200
    assert client.get("/u/nobody/").status_code == 404


class SignupTests(BloomTestMixin, TestCase):
    def test_taken_username_is_refused_in_any_case(self):
        User.objects.create_user("Carol")
        prefill("usernames", ["Carol"])  # TestCase never commits: fill the filter by hand
        prefill("emails")
        response = self.client.post(
            "/signup/",
            {
                "username": "CAROL",
                "email": "carol@example.org",
                "password1": "a-long-enough-pass-1",
                "password2": "a-long-enough-pass-1",
            },
        )
        self.assertEqual(response.status_code, 200)
        self.assertContains(response, "This username is taken")
        self.assertEqual(User.objects.count(), 1)

    def test_a_new_name_is_signed_up_without_a_query_of_its_username_or_email(self):
        prefill("usernames", ["carol"])
        prefill("emails", ["carol@example.org"])
        get_filter("usernames"), get_filter("emails")  # metadata cached, as in a warm process
        with CaptureQueriesContext(connection) as captured:
            response = self.client.post(
                "/signup/",
                {
                    "username": "dave",
                    "email": "dave@example.org",
                    "password1": "a-long-enough-pass-1",
                    "password2": "a-long-enough-pass-1",
                },
            )
        self.assertRedirects(response, "/signup/done/", fetch_redirect_response=False)
        lookups = [
            q["sql"]
            for q in captured.captured_queries
            if q["sql"].startswith("SELECT") and "auth_user" in q["sql"]
        ]
        self.assertEqual(lookups, [])  # Django alone: username LIKE, username =
        self.assertTrue(User.objects.filter(username="dave").exists())
