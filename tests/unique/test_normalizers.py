import pytest

from django_bloom.unique.normalizers import email, email_ci, get_normalizer, identity, username


def test_username_is_nfkc_and_casefolded():
    assert username("Ａｌｉｃｅ") == username("ALICE") == username("alice") == "alice"
    assert username("Straße") == "strasse"


def test_email_lowercases_domain_only_and_email_ci_everything():
    assert email("  Bob.Smith@Example.COM ") == "Bob.Smith@example.com"
    assert email_ci("  Bob.Smith@Example.COM ") == "bob.smith@example.com"
    assert email("no-at-sign") == "no-at-sign"


def test_get_normalizer_resolves_names_paths_and_callables():
    assert get_normalizer("username") is username
    assert get_normalizer(None) is identity and get_normalizer("") is identity
    assert get_normalizer("django_bloom.unique.normalizers.email_ci") is email_ci
    assert get_normalizer(str.upper)("a") == "A"
    with pytest.raises(ValueError, match="unknown normalizer"):
        get_normalizer("nope")
