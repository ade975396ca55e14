"""django_bloom.testing: each use gets its own key prefix, cleans its keys, forgets handles."""

import io
import unittest

import pytest
from django.test import SimpleTestCase, TestCase, override_settings

import django_bloom
from django_bloom.conf import get_config
from django_bloom.exceptions import FilterKeyMissing
from django_bloom.pytest_plugin import bloom_isolated  # noqa: F401 - the fixture under test
from django_bloom.testing import BloomTestMixin, override_bloom, prefill

pytestmark = pytest.mark.django_db


def keys_under(redis_client, prefix):
    return list(redis_client.scan_iter(match=f"{prefix}:*"))


def test_context_manager_isolates_and_cleans_up(redis_client, bloom_prefix):
    with override_bloom() as bloom:
        assert get_config()["KEY_PREFIX"] == bloom.prefix != bloom_prefix
        prefill("f", ["x"], capacity=1000)
        inside = django_bloom.get_filter("f")
        assert keys_under(redis_client, bloom.prefix)
    assert get_config()["KEY_PREFIX"] == bloom_prefix
    assert keys_under(redis_client, bloom.prefix) == []
    after = django_bloom.get_filter("f")
    assert after is not inside  # the handle bound to the old prefix was forgotten
    with pytest.raises(FilterKeyMissing):  # the row survives (the test's transaction);
        after.contains("x")  # its keys are looked up under the outer prefix: none there


def test_keys_are_cleaned_when_the_block_raises(redis_client):
    with pytest.raises(RuntimeError), override_bloom() as bloom:
        prefill("f", ["x"])
        raise RuntimeError("test failed")
    assert keys_under(redis_client, bloom.prefix) == []


def test_each_decorated_call_gets_its_own_prefix(redis_client):
    seen = []

    @override_bloom()
    def one_test():
        prefill(f"f{len(seen)}", ["x"])
        seen.append(get_config()["KEY_PREFIX"])

    one_test()
    one_test()
    assert len(set(seen)) == 2
    assert all(keys_under(redis_client, prefix) == [] for prefix in seen)


def test_other_settings_are_kept():
    with override_settings(DJANGO_BLOOM={"METADATA_TTL": 7.0}), override_bloom():
        assert get_config()["METADATA_TTL"] == 7.0


def test_pytest_fixture(bloom_isolated, redis_client):  # noqa: F811
    assert get_config()["KEY_PREFIX"] == bloom_isolated.prefix
    handle = prefill("usernames", ["Alice"], normalizer="username", kind="unique")
    assert handle.contains("alice")  # normalised on the way in, like a binding's writes
    assert not handle.contains("bob")
    assert keys_under(redis_client, bloom_isolated.prefix)


def test_prefill_creates_a_declared_binding_from_its_entry(bloom_prefix):
    bindings = {"names": {"source": "testapp.Account.username", "normalizer": "username"}}
    with override_settings(DJANGO_BLOOM={"KEY_PREFIX": bloom_prefix, "BINDINGS": bindings}):
        with override_bloom():
            handle = prefill("names", ["ＢＯＢ"])
            assert handle.meta.source == "testapp.Account.username"
            assert handle.contains("bob")


def test_prefill_reuses_an_existing_filter():
    with override_bloom():
        first = prefill("f", ["a"], capacity=5000)
        second = prefill("f", ["b"])
        assert second.meta.pk == first.meta.pk and second.meta.capacity == 5000
        assert second.contains_many(["a", "b"]) == [True, True]


class MixinTests(BloomTestMixin, TestCase):
    def test_has_its_own_prefix(self):
        self.assertEqual(get_config()["KEY_PREFIX"], self.bloom_prefix)
        prefill("f", ["x"])
        self.assertTrue(django_bloom.get_filter("f").contains("x"))

    def test_cleans_up_after_itself(self):
        from django_redis import get_redis_connection

        client = get_redis_connection("default")
        seen = []

        class Inner(BloomTestMixin, TestCase):
            def test_it(self):
                seen.append(self.bloom_prefix)
                prefill("f", ["x"])

        Inner("test_it").run()
        self.assertEqual(len(seen), 1)
        self.assertEqual(list(client.scan_iter(match=f"{seen[0]}:*")), [])


# -- @override_bloom() on a class (issue 28 seam 5) --------------------------------------
def run_tests(case: type) -> unittest.TestResult:
    """Run ``case``'s tests as a test runner would; the result."""
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
    return unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)


@pytest.mark.parametrize(
    "base", [TestCase, SimpleTestCase, unittest.TestCase], ids=["TestCase", "Simple", "unittest"]
)
def test_a_decorated_test_case_class_runs_its_tests_each_in_its_own_prefix(
    redis_client, bloom_prefix, base
):
    seen = []

    @override_bloom()
    class Decorated(base):
        databases = {"default"}  # prefill saves a row (SimpleTestCase refuses by default)

        def setUp(self):
            seen.append(("setUp", get_config()["KEY_PREFIX"]))

        def test_passes(self):
            seen.append(("test", get_config()["KEY_PREFIX"]))
            prefill("f", ["x"])
            self.assertTrue(django_bloom.get_filter("f").contains("x"))

        def test_fails(self):
            seen.append(("test", get_config()["KEY_PREFIX"]))
            self.assertEqual(1, 2)

    assert isinstance(Decorated, type) and issubclass(Decorated, base)
    result = run_tests(Decorated)
    assert result.testsRun == 2  # not "Ran 0 tests ... OK"
    assert [test.id().rsplit(".", 1)[1] for test, _ in result.failures] == ["test_fails"]
    assert not result.errors
    prefixes = [prefix for _, prefix in seen]
    assert len(seen) == 4 and prefixes[0] == prefixes[1] != prefixes[2] == prefixes[3]
    assert bloom_prefix not in prefixes  # the decorator's own prefix, also in setUp
    assert all(keys_under(redis_client, prefix) == [] for prefix in prefixes)
    assert get_config()["KEY_PREFIX"] == bloom_prefix


def test_decorating_another_class_is_refused_at_once():
    with pytest.raises(TypeError, match="TestCase"):

        @override_bloom()
        class NotATestCase:
            def test_never_collected(self):
                raise AssertionError("not a test")
