"""Check what the built distributions ship (run by `make package` after `python -m build`).

The wheel must contain the templates, migrations, translations (.po and .mo), static
files and py.typed, and nothing from tests/ or example_site/; the sdist must not carry
the example site's database. Exit 1 with the reasons when anything is wrong.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path

REQUIRED = {
    "py.typed": lambda n: n == "django_bloom/py.typed",
    "templates": lambda n: n.startswith("django_bloom/templates/") and n.endswith(".html"),
    "admin templates": lambda n: n.startswith("django_bloom/templates/admin/"),
    "migrations": lambda n: n == "django_bloom/migrations/0001_initial.py",
    "translations (.po)": lambda n: n.startswith("django_bloom/locale/") and n.endswith(".po"),
    "compiled translations (.mo)": lambda n: (
        n.startswith("django_bloom/locale/") and n.endswith(".mo")
    ),
    "static files": lambda n: n.startswith("django_bloom/static/django_bloom/"),
}
FORBIDDEN_TOP = ("tests/", "example_site/", "bench/", "scripts/", "docs/")


def wheel_problems(names: list[str], source: Path) -> list[str]:
    problems = [f"missing {what}" for what, test in REQUIRED.items() if not any(map(test, names))]
    problems += [f"{n} should not be in the wheel" for n in names if n.startswith(FORBIDDEN_TOP)]
    problems += [f"{n} should not be in the wheel" for n in names if "__pycache__" in n]
    # Every data file in the package tree must have made it into the wheel.
    for kind in ("templates", "static", "locale", "migrations"):
        for path in (source / "django_bloom" / kind).rglob("*"):
            rel = path.relative_to(source).as_posix()
            if path.is_file() and "__pycache__" not in rel and rel not in names:
                problems.append(f"{rel} is in the source tree but not in the wheel")
    return problems


def main(dist: Path, source: Path) -> int:
    wheels = sorted(dist.glob("django_bloom-*.whl"))
    sdists = sorted(dist.glob("django_bloom-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {dist}, found {wheels + sdists}")
        return 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    problems = wheel_problems(names, source)
    with tarfile.open(sdists[0]) as sdist:
        databases = [n for n in sdist.getnames() if n.endswith(".sqlite3")]
    problems += [f"{n} should not be in the sdist" for n in databases]
    for problem in problems:
        print(f"{wheels[0].name}: {problem}")
    if not problems:
        summary = f"{len(names)} files, package data complete, no tests or example site"
        print(f"{wheels[0].name}: {summary}")
    return 1 if problems else 0


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else root / "dist", root))
