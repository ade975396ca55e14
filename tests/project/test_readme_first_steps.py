"""The README's first steps work as written (issue 24, item 7): the install from a clone
names extras that exist, and the five-line session runs in the example site's
``manage.py shell`` and prints what the README says."""

import os
import re
import uuid
from pathlib import Path

import pytest
import redis

from tests.example_site import run_manage

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### From a clone, and a first session"


def first_steps() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert SECTION in readme, "the README's install section has no first steps from a clone"
    section = readme.split(SECTION, 1)[1]
    return re.split(r"^## ", section, maxsplit=1, flags=re.M)[0]


def fenced(text: str, language: str) -> str:
    (block,) = re.findall(rf"```{language}\n(.*?)```", text, re.S)
    return block


def test_install_from_a_clone_uses_extras_that_exist():
    commands = fenced(first_steps(), "bash")
    match = re.search(r'pip install -e "\.\[([\w,]+)\]"', commands)
    assert match, commands
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = set(
        re.findall(r"^(\w+) = \[", pyproject.split("[project.optional-dependencies]")[1], re.M)
    )
    listed = re.sub(r"\([^)]*\)", "", re.search(r"extras: (.*)", commands)[1])
    named = set(match[1].split(",")) | {name.strip() for name in listed.split(",")}
    assert len(named) > 3 and named - extras == set()
    assert "cd example_site" in commands and "manage.py shell" in commands


def test_the_five_line_session_runs_in_the_example_site(tmp_path):
    session = fenced(first_steps(), "pycon")
    assert len([line for line in session.splitlines() if line.startswith(">>> ")]) == 5
    prefix = f"test-readme-{uuid.uuid4().hex[:8]}"
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    env = {
        **os.environ,
        "EXAMPLE_DB": str(tmp_path / "db.sqlite3"),
        "BLOOM_KEY_PREFIX": prefix,
        "REDIS_URL": url,
        "DJANGO_SETTINGS_MODULE": "example_site.settings",
    }
    run = (
        "import doctest, sys\n"
        f"test = doctest.DocTestParser().get_doctest({session!r}, {{}}, 'README', None, 0)\n"
        "runner = doctest.DocTestRunner()\n"
        "runner.run(test)\n"
        "sys.exit(1 if runner.failures or not runner.tries else 0)\n"
    )
    try:
        migrated = run_manage(env, "migrate", "--noinput", "-v", "0")
        assert migrated.returncode == 0, migrated.stderr
        done = run_manage(env, "shell", "-c", run)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)


@pytest.mark.parametrize("line", ["get_filter(\"first-steps\")", "f.delete()"])
def test_it_says_how_to_come_back_and_clean_up(line):
    assert line in first_steps()
