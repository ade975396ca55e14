"""``bloom export``, ``bloom import`` and ``bloom merge`` (issue 37): files and pipes, what
they say, and exit 2 with nothing written when the dump or the filters do not fit."""

import io

import pytest
from django.core.management import CommandError, call_command

import django_bloom
from django_bloom.services import get_handle

pytestmark = pytest.mark.django_db
ITEMS = [f"user-{i}@example.org" for i in range(200)]


def bloom(*args, stdin=None):
    out, err = io.StringIO(), io.StringIO()
    call_command("bloom", *args, stdout=out, stderr=err, stdin=stdin)
    return out.getvalue(), err.getvalue()


def test_export_to_a_file_then_import_it_as_a_new_filter(tmp_path):
    django_bloom.create_filter("emails", capacity=1000, normalizer="email").add_many(ITEMS)
    path = str(tmp_path / "emails.dump")
    said, _ = bloom("export", "emails", path)
    assert "Exported 'emails'" in said and "hash key" in said
    assert not (tmp_path / "emails.dump.part").exists()
    said, _ = bloom("import", "copy", path)
    assert "Created (standard, capacity 1,000) 'copy'" in said
    copy = django_bloom.get_filter("copy")
    assert copy.meta.normalizer == "email" and all(copy.contains_many(ITEMS))
    said, _ = bloom("import", "copy", path)  # again: replaced in place
    assert "Replaced the bits of 'copy'" in said


def test_export_to_stdout_and_import_from_stdin():
    django_bloom.create_filter("piped", capacity=1000).add_many(ITEMS)
    out = io.BytesIO()
    err = io.StringIO()
    call_command("bloom", "export", "piped", "-", "--without-key", stdout=out, stderr=err)
    assert "without its hash key" in err.getvalue() and out.getvalue().startswith(b"django-bloom")
    get_handle("piped").clear()
    said, _ = bloom("import", "piped", "-", stdin=io.BytesIO(out.getvalue()))
    assert "Replaced" in said and all(django_bloom.get_filter("piped").contains_many(ITEMS))


def test_a_bad_dump_is_exit_2_naming_what_is_wrong_and_writes_nothing(tmp_path):
    django_bloom.create_filter("kept", capacity=1000).add_many(ITEMS)
    path = tmp_path / "kept.dump"
    bloom("export", "kept", str(path))
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(CommandError, match="truncated") as info:
        bloom("import", "kept", str(path))
    assert info.value.returncode == 2 and all(django_bloom.get_filter("kept").contains_many(ITEMS))
    with pytest.raises(CommandError, match="truncated"):
        bloom("import", "fresh", str(path))
    assert not django_bloom.models.BloomFilter.objects.filter(name="fresh").exists()
    with pytest.raises(CommandError, match="cannot read"):
        bloom("import", "fresh", str(tmp_path / "nowhere"))


def test_an_export_that_fails_leaves_no_file(tmp_path):
    django_bloom.create_filter("window", capacity=100, layout="rotating")
    with pytest.raises(CommandError, match="rotating window") as info:
        bloom("export", "window", str(tmp_path / "w.dump"))
    assert info.value.returncode == 2 and list(tmp_path.iterdir()) == []


def test_merge_says_what_it_did_and_refuses_filters_made_apart(tmp_path):
    django_bloom.create_filter("all", capacity=300).add_many(ITEMS[:100])
    bloom("export", "all", str(tmp_path / "all.dump"))
    bloom("import", "part", str(tmp_path / "all.dump"))
    django_bloom.get_filter("part").add_many(ITEMS)
    said, warned = bloom("merge", "all", "part")
    assert said.startswith("Merged 'part' into 'all': about") and not warned
    assert all(django_bloom.get_filter("all").contains_many(ITEMS))
    django_bloom.create_filter("apart", capacity=300)
    with pytest.raises(CommandError, match="hash key") as info:
        bloom("merge", "all", "apart")
    assert info.value.returncode == 2


def test_a_dump_is_data_its_callables_are_taken_only_on_trust(tmp_path):
    django_bloom.create_filter("coded", capacity=100, encoder="tests.encoders.point")
    path = str(tmp_path / "coded.dump")
    bloom("export", "coded", path)
    with pytest.raises(CommandError, match="tests.encoders.point.*--trust-callables"):
        bloom("import", "copy", path)
    assert not django_bloom.models.BloomFilter.objects.filter(name="copy").exists()
    said, _ = bloom("import", "copy", path, "--trust-callables")
    assert "Created" in said and get_handle("copy").meta.encoder == "tests.encoders.point"
