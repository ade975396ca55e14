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
