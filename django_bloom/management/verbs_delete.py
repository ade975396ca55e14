"""``bloom delete NAME``: the filter's row and every Redis key it has, as the admin's delete.

Asks first, as Django's ``flush`` does: only ``yes`` deletes; ``--noinput`` (``--no-input``)
skips the question. A run that cannot be asked (no terminal, stdin closed: cron, CI)
deletes nothing without ``--noinput``. Exit codes: 0 deleted, 1 cancelled or not asked,
2 error (unknown filter, a filter bound in settings, Redis unavailable).
"""

from __future__ import annotations

from django_bloom.management.cli import add_noinput_option, arg, confirm, fail, verb


def settings_binding(name: str) -> str | None:
    """Why the settings still need filter ``name`` (None: they do not)."""
    from django.conf import settings

    from django_bloom.conf import get_config

    config = get_config()
    spec = (config.get("BINDINGS") or {}).get(name)
    if spec is not None:
        return (
            f"it is declared in DJANGO_BLOOM['BINDINGS'] (bound to {spec.get('source')}): the "
            f"validator and the bound model's saves use it, and the next save or `bloom rebuild "
            f"{name}` would create it again. Remove its BINDINGS entry (and the validators "
            "naming it) first, then delete it"
        )
    middleware = "django_bloom.middleware.BlocklistMiddleware"
    if name == config["BLOCKLIST_FILTER"] and middleware in settings.MIDDLEWARE:
        return (
            "it is the blocklist BlocklistMiddleware checks (DJANGO_BLOOM['BLOCKLIST_FILTER']): "
            "without it blocked addresses get through (FAIL_OPEN) or every request gets a 503. "
            f"To start it afresh use `bloom rebuild {name}`; to stop blocking, remove the "
            "middleware from MIDDLEWARE first, then delete it"
        )
    return None


class DeleteVerbs:
    """Mixed into ``bloom``'s Command (uses its say)."""

    @verb(
        "Delete a filter: its row and every Redis key (asks first; --noinput does not).",
        arg("name"),
        add_noinput_option,
    )
    def cmd_delete(self, name, interactive=True, **_):
        from django_bloom.exceptions import FilterNotFound
        from django_bloom.models import BloomFilter
        from django_bloom.ops.deletion import delete_filter

        obj = BloomFilter.objects.filter(name=name).first()
        if obj is None:
            raise FilterNotFound(f"no Bloom filter named {name!r}")
        reason = settings_binding(name)
        if reason is not None:
            raise fail(f"refusing to delete filter {name!r}: {reason}.")
        what = (
            f"filter family {name!r}: its row, its control key and every member's key"
            if obj.family
            else f"Bloom filter {name!r}: its row and every Redis key it has"
        )
        if interactive:
            confirm(
                f"You have requested to delete {what}.\n"
                "Every item in it is lost; this cannot be undone.\n"
                "Are you sure you want to do this?\n\n"
                "    Type 'yes' to continue, or 'no' to cancel: ",
                "Cancelled: nothing was deleted.",
                unanswered=f"Nothing was deleted: no answer to the confirmation (stdin closed?). "
                f"To delete {name!r} where nobody can answer, run: manage.py bloom delete {name} "
                "--noinput",
            )
        removed = delete_filter(obj)
        members = f" ({removed:,} member key(s))" if obj.family else ""
        self.say(f"Deleted {name!r}{members}.")
