"""Hostile layout options are refused at the entry, as errors of the form, the command or
the API, and nothing is written (issue 28, seam 6).

On the old code the admin's add form answered 500 for options nested 100,000 deep
(``RecursionError`` in ``json.loads``) and for a 5,000-digit integer (``ValueError`` from
the int conversion, which Django's ``JSONField`` does not catch); the API and
``bloom create --option`` let the same values reach ``validate_options`` (whose messages
print them: ``RecursionError`` in ``repr``, ``ValueError`` in int -> str)."""

import re

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

import django_bloom
from django_bloom.models import BloomFilter
from tests.admin.test_admin_add_form import ADD, form

pytestmark = pytest.mark.django_db

DEEP = 100_000
DEEP_TEXT = "[" * DEEP + "]" * DEEP
BIG_DIGITS = "1" * 5000
BIG_INT = (10**5000 - 1) // 9  # 5,000 ones (int("1" * 5000) is refused by Python itself)


def deep_value():
    value: list = []
    for _ in range(DEEP):
        value = [value]
    return value


def nothing_written(redis_client, prefix, name):
    assert list(redis_client.scan_iter(match=f"{prefix}:*")) == []
    assert not BloomFilter.objects.filter(name=name).exists()


HOSTILE_TEXT = {
    "deep list": '{"segments": ' + DEEP_TEXT + "}",
    "deep object": '{"a": ' * DEEP + "1" + "}" * DEEP,
    "5000 digits": '{"segments": ' + BIG_DIGITS + "}",
    "5000 digits, negative": '{"slices": -' + BIG_DIGITS + "}",
}


@pytest.mark.parametrize("text", HOSTILE_TEXT.values(), ids=HOSTILE_TEXT.keys())
@pytest.mark.parametrize("layout", ["sharded", "rotating", "scalable"])
def test_hostile_options_are_a_form_error(admin_client, redis_client, bloom_prefix, text, layout):
    response = admin_client.post(reverse(ADD), form(layout=layout, layout_options=text))
    assert response.status_code == 200
    html = response.content.decode()
    assert "errornote" in html
    assert re.search(r"Enter a valid JSON|64 bits at most", html)
    nothing_written(redis_client, bloom_prefix, "via-admin")


HOSTILE_VALUES = {
    "deep list": lambda: {"segments": deep_value()},
    "deep tightening": lambda: {"tightening": deep_value()},
    "5000 digits": lambda: {"segments": BIG_INT},
    "5000-digit tightening": lambda: {"tightening": BIG_INT},
    "5000-digit name": lambda: {BIG_INT: 1},
}


@pytest.mark.parametrize("options", HOSTILE_VALUES.values(), ids=HOSTILE_VALUES.keys())
@pytest.mark.parametrize("layout", ["standard", "sharded", "scalable"])
def test_hostile_options_are_a_value_error_of_the_api(redis_client, bloom_prefix, options, layout):
    with pytest.raises(ValueError, match="option") as info:
        django_bloom.create_filter("f", capacity=1000, layout=layout, options=options())
    assert len(str(info.value)) < 400  # names the option, not 5,000 digits
    nothing_written(redis_client, bloom_prefix, "f")


@pytest.mark.parametrize("value", [DEEP_TEXT, BIG_DIGITS, "-" + BIG_DIGITS])
def test_hostile_options_are_a_command_error(redis_client, bloom_prefix, value):
    with pytest.raises(CommandError) as info:
        call_command(
            "bloom", "create", "f", "--capacity", "1000", "--layout", "sharded",
            "--option", f"segments={value}",
        )  # fmt: skip
    assert len(str(info.value)) < 400
    nothing_written(redis_client, bloom_prefix, "f")


def test_ordinary_options_still_work(redis_client, bloom_prefix):
    f = django_bloom.create_filter(
        "f", capacity=1000, layout="scalable", options={"growth": 4, "tightening": 0.5}
    )
    assert f.meta.options == {"growth": 4, "tightening": 0.5}
    call_command("bloom", "create", "g", "--capacity", "1000", "--layout", "sharded",
                 "--option", "segments=3")  # fmt: skip
    assert BloomFilter.objects.get(name="g").options == {"segments": 3}
