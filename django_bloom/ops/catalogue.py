"""The words the admin shows that do not come from a template: field labels and help,
choices and states, column and action names, form labels, the layouts' descriptions.

``untranslated(language)`` lists those that the catalogue does not translate; ``make
messages-check`` (scripts/messages.sh) fails on any. makemessages only finds strings
marked for translation; this finds a word shown unmarked (a state printed as its stored
value, a description kept as plain text).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from django.apps import apps
from django.contrib import admin
from django.utils import translation
from django.utils.functional import Promise

LANGUAGES = ("zh-hans",)
# The same in every language: names, units and symbols.
SAME_EVERYWHERE = {"Redis", "JSON", "IP", "FPR", "-", "—", "✔", "▲", "✖", "?"}


def _text(value: Any) -> Iterator[str | Promise]:
    if isinstance(value, (str, Promise)) and str(value).strip():
        yield value


def _choices(choices: Any) -> Iterator[Any]:
    for _value, label in choices or ():
        if isinstance(label, (list, tuple)):  # an optgroup
            yield from _choices(label)
        else:
            yield from _text(label)


def _form_fields(form_class: Any) -> Iterator[tuple[str, Any]]:
    for name, field in getattr(form_class, "base_fields", {}).items():
        where = f"{form_class.__name__}.{name}"
        for text in (*_text(field.label), *_text(field.help_text)):
            yield where, text
        for text in _choices(getattr(field, "choices", None)):
            yield f"{where} choice", text


def shown_strings() -> Iterator[tuple[str, Any]]:
    """(where, lazy string) for every admin word of django_bloom outside templates."""
    from django_bloom.models import BloomFilter
    from django_bloom.ops import admin_support

    config = apps.get_app_config("django_bloom")
    yield "app", config.verbose_name
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != "django_bloom":
            continue
        label = model.__name__
        yield f"{label} verbose_name", model._meta.verbose_name
        yield f"{label} verbose_name_plural", model._meta.verbose_name_plural
        named = {
            *(model_admin.fields or ()),
            *model_admin.list_display,
            *model_admin.readonly_fields,
            *(model_admin.list_filter or ()),
        }
        for field in model._meta.get_fields():
            if not hasattr(field, "verbose_name") or field.auto_created:
                continue
            shown = field.name in named or (model_admin.fields is None and field.editable)
            if not shown:
                continue
            for text in (*_text(field.verbose_name), *_text(getattr(field, "help_text", ""))):
                yield f"{label}.{field.name}", text
            for text in _choices(getattr(field, "choices", None)):
                yield f"{label}.{field.name} choice", text
        names = {*model_admin.list_display, *model_admin.readonly_fields, *model_admin.actions}
        for name in sorted(n for n in names if isinstance(n, str)):
            attribute = getattr(model_admin, name, None)
            description = getattr(attribute, "short_description", None)
            for text in _text(description):
                yield f"{type(model_admin).__name__}.{name}", text
        yield from _form_fields(model_admin.form)
        yield from _form_fields(getattr(model_admin, "add_form", None))  # get_form picks it
    for choices in (BloomFilter.Kind, BloomFilter.RebuildState, BloomFilter.Layout):
        for text in _choices(choices.choices):
            yield f"BloomFilter.{choices.__name__}", text
    for state, (_symbol, text) in admin_support.HEALTH_BADGES.items():
        yield f"health {state}", text


def _evaluated(language: str) -> list[tuple[str, str]]:
    """The shown strings as ``language`` renders them (choices are built in it, too)."""
    with translation.override(language):
        return [(where, str(text)) for where, text in shown_strings()]


def untranslated(language: str) -> list[str]:
    """'where: text' of each shown string the catalogue leaves as it is in ``language``."""
    english, translated = _evaluated("en"), _evaluated(language)
    out = [
        f"{where}: {text!r}"
        for (where, text), (_where, other) in zip(english, translated, strict=True)
        if text == other and text not in SAME_EVERYWHERE
    ]
    return sorted(set(out))


def main() -> int:
    """``python -m django_bloom.ops.catalogue`` (Django set up by the caller's settings)."""
    import django

    django.setup()
    missing = [f"{language} {line}" for language in LANGUAGES for line in untranslated(language)]
    for line in missing:
        print(f"untranslated admin string: {line}", file=sys.stderr)
    if missing:
        print(
            "Mark them for translation (gettext_lazy), run 'make messages', translate the new "
            "entries, commit the .po and the .mo.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
