"""A family deleted and created again (issue 23 item 7): a member handle from before
never writes where nobody reads, and never answers for the new family.

docs/families.md recovers a lost family by deleting and recreating it; another
process may still hold member handles of the old one (metadata cached up to
``METADATA_TTL``). Every member operation checks the family's generation (the
control key's value) in its one script: a stale handle raises ``FilterKeyMissing``.
"""

import pytest
from asgiref.sync import async_to_sync

import django_bloom
from django_bloom.exceptions import FilterKeyMissing

pytestmark = pytest.mark.django_db


def member_keys(redis_client, prefix, name="pushed"):
    return sorted(
        k.decode() for k in redis_client.scan_iter(match=f"{prefix}:{{{name}:m:*", count=1000)
    )


def recreate(name="pushed", **options):
    """Delete the family (as another process would) and create it again, same options."""
    django_bloom.get_family(name).delete()
    return django_bloom.create_filter(name, capacity=1000, family=True, **options)


@pytest.mark.parametrize("ttl", [None, 3600])
def test_a_member_handle_from_before_a_recreate_never_writes_where_nobody_reads(
    redis_client, bloom_prefix, ttl
):
    django_bloom.create_filter("pushed", capacity=1000, family=True, member_ttl=ttl)
    stale = django_bloom.get_filter("pushed", member=42)  # held, as a cached handle is
    stale.add("before")
    recreate(member_ttl=ttl)
    fresh = django_bloom.get_filter("pushed", member=42)
    assert fresh.identity != stale.identity  # a new generation: another key name
    assert fresh.add("new-family-item")
    keys = member_keys(redis_client, bloom_prefix)

    with pytest.raises(FilterKeyMissing, match="deleted"):
        stale.add("late")  # the old code: True, into the old generation's key
    with pytest.raises(FilterKeyMissing):
        stale.add_many(["late", "later"])
    with pytest.raises(FilterKeyMissing):
        stale.contains("new-family-item")  # the old code: "absent"
    with pytest.raises(FilterKeyMissing):
        stale.contains_many(["new-family-item"])
    with pytest.raises(FilterKeyMissing):
        stale.stats()  # not "empty"
    assert member_keys(redis_client, bloom_prefix) == keys  # nothing written anywhere
    assert fresh.contains("new-family-item")
    assert not fresh.contains("late")


def test_a_stale_member_handle_raises_in_async_code_too(redis_client, bloom_prefix):
    django_bloom.create_filter("pushed", capacity=1000, family=True)
    stale = django_bloom.get_filter("pushed", member="u1")
    async_to_sync(stale.aadd)("before")
    recreate()
    django_bloom.get_filter("pushed", member="u1").add("new-family-item")
    keys = member_keys(redis_client, bloom_prefix)
    with pytest.raises(FilterKeyMissing):
        async_to_sync(stale.aadd)("late")
    with pytest.raises(FilterKeyMissing):
        async_to_sync(stale.acontains)("new-family-item")
    with pytest.raises(FilterKeyMissing):
        async_to_sync(stale.acontains_many)(["new-family-item"])
    assert member_keys(redis_client, bloom_prefix) == keys


def test_a_member_never_written_by_a_stale_handle_is_not_created(redis_client, bloom_prefix):
    """A member the new family has no key for: the stale handle neither creates one nor
    reads "absent" from the new family's empty state."""
    django_bloom.create_filter("pushed", capacity=1000, family=True)
    stale = django_bloom.get_filter("pushed", member=7)
    recreate()
    with pytest.raises(FilterKeyMissing):
        stale.contains("anything")
    with pytest.raises(FilterKeyMissing):
        stale.add("anything")
    assert member_keys(redis_client, bloom_prefix) == []
    django_bloom.get_filter("pushed", member=7).add("anything")  # the new family's handle
    assert django_bloom.get_filter("pushed", member=7).contains("anything")


def test_a_family_created_by_the_previous_release_answers_as_before(redis_client, bloom_prefix):
    """The previous release stored the fingerprint alone as the control key's value:
    its families keep working, members and answers unchanged."""
    family = django_bloom.create_filter("pushed", capacity=1000, family=True)
    redis_client.set(family.control_key, str(family.layout.segment.fingerprint))  # as it wrote
    member = django_bloom.get_filter("pushed", member=3)
    assert member.add("kept") is True
    assert member.add("kept") is False
    assert member.contains_many(["kept", "never"]) == [True, False]
    assert django_bloom.get_filter("pushed", member=4).contains("kept") is False
    assert member.stats().bits_set > 0
