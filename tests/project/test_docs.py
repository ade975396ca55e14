"""The documentation site stays complete: every setting documented, every page in the nav."""

from pathlib import Path

from django_bloom.conf import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting_is_documented():
    settings_page = (ROOT / "docs" / "settings.md").read_text()
    table_rows = [line for line in settings_page.splitlines() if line.startswith("| `")]
    rows = {line.split("|")[1].strip(" `") for line in table_rows}
    assert set(DEFAULTS) - rows == set()
    assert rows - set(DEFAULTS) == set()


def test_every_docs_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert {page for page in pages if f": {page}" not in nav} == set()


def test_the_architecture_page_names_only_paths_that_exist_and_the_real_capabilities():
    import re

    from django_bloom.engine.kinds import capabilities, layout_class, layout_names

    page = (ROOT / "docs" / "architecture.md").read_text()
    paths = set(re.findall(r"`((?:django_bloom|tests)/[\w/.]*)`", page))
    assert len(paths) > 20
    assert [p for p in sorted(paths) if not (ROOT / p.rstrip("/")).exists()] == []
    rows = re.findall(r"^\| `(\w+)` \| .* \| ([\w ,()]+) \|$", page, re.M)
    table = {name: kinds for name, kinds in rows if hasattr(capabilities, name)}
    assert len(table) == 13
    for name, kinds in table.items():
        capability = getattr(capabilities, name)
        have = [k for k in layout_names() if issubclass(layout_class(k), capability)]
        assert set(have) <= {k.strip().split(" ")[0] for k in kinds.split(",")}, name
