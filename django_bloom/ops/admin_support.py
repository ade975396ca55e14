"""What the admin pages share: translated field labels, health and bar HTML, the
detail page's figures, and the mixin that turns a Redis failure into an error."""

from __future__ import annotations

import threading
import time
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import close_old_connections
from django.http import HttpResponseRedirect
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_bloom import services
from django_bloom.engine.transport import breaker
from django_bloom.exceptions import BloomError, FilterNotFound, FilterUnavailable
from django_bloom.models import BlockedEntry, BloomFilter, FilterSnapshot
from django_bloom.ops import formatting, monitoring

HEALTH_SYMBOLS = {
    monitoring.OK: "✔",
    monitoring.FILLING: "▲",
    monitoring.OVER: "✖",
    monitoring.UNAVAILABLE: "?",
}
HEALTH_LABELS = {
    monitoring.OK: _("ok"),
    monitoring.FILLING: _("filling"),
    monitoring.OVER: _("over capacity"),
    monitoring.UNAVAILABLE: _("unavailable"),
}
ADMIN_CSS = {"all": ["django_bloom/admin.css"]}


# Field labels in the active language. Set here rather than as verbose_name= in
# models.py: Field.deconstruct() reports the original argument, so no migration follows.
FIELD_LABELS = {
    BloomFilter: {
        "name": _("name"),
        "description": _("description"),
        "kind": _("kind"),
        "capacity": _("capacity"),
        "error_rate": _("error rate"),
        "num_bits": _("bits"),
        "num_hashes": _("hash functions"),
        "seed": _("seed"),
        "layout": _("layout"),
        "format_version": _("format version"),
        "cache_alias": _("cache alias"),
        "source": _("source"),
        "normalizer": _("normalizer"),
        "encoder": _("encoder"),
        "last_rebuild_at": _("last rebuild at"),
        "rebuild_state": _("rebuild state"),
        "rebuild_done": _("rebuild done"),
        "rebuild_total": _("rebuild total"),
        "rebuild_error": _("rebuild error"),
        "created_at": _("created at"),
        "updated_at": _("updated at"),
    },
    BlockedEntry: {
        "list_name": _("list name"),
        "network": _("network"),
        "reason": _("reason"),
        "created_at": _("created at"),
        "expires_at": _("expires at"),
    },
    FilterSnapshot: {
        "bloom_filter": _("Bloom filter"),
        "recorded_at": _("recorded at"),
    },
}


def _translate_field_labels() -> None:
    for model, labels in FIELD_LABELS.items():
        for name, label in labels.items():
            model._meta.get_field(name).verbose_name = label
    # Likewise the snapshot model's names (migrations read Meta's original_attrs).
    FilterSnapshot._meta.verbose_name = _("filter snapshot")
    FilterSnapshot._meta.verbose_name_plural = _("filter snapshots")


_translate_field_labels()


def filter_handle(obj: BloomFilter) -> services.Filter | None:
    """The row's handle; None when it is gone or is a filter family (ops/family_admin.py)."""
    if obj.family:
        return None
    try:
        return services.get_filter(obj.name)
    except FilterNotFound:
        return None


def filter_stats(obj: BloomFilter) -> Any | None:
    handle = filter_handle(obj)
    return monitoring.cached_stats(handle) if handle else None


def build_locked(obj: BloomFilter) -> bool:
    """A rebuild really runs: its Redis lock is held (a row left "running" by a
    process that died does not block a new rebuild once the lock is gone)."""
    handle = filter_handle(obj)
    if handle is None:
        return False
    try:
        return handle.build_running()
    except FilterUnavailable:
        return True  # cannot tell: do not start a second one


def health_html(state: str) -> str:
    return format_html(
        '<strong class="bloom-health bloom-health-{}">{} {}</strong>',
        state.replace(" ", "-"),
        HEALTH_SYMBOLS[state],
        HEALTH_LABELS[state],
    )


def bar_html(fraction: float, label: str, title: str) -> str:
    level = "over" if fraction > 1 else "filling" if fraction >= monitoring.FILLING_AT else "ok"
    return format_html(
        '<span class="bloom-bar bloom-bar-{}" title="{}"><span style="width:{}%"></span></span>'
        '<span class="bloom-bar-label">{}</span>',
        level,
        title,
        f"{max(0.0, min(fraction, 1.0)) * 100:.1f}",
        label,
    )


class WriteFailed(Exception):
    """Some selected objects could not be changed in Redis (the message says which)."""


class RedisWritesAsErrors:
    """A save or delete that needs Redis, with Redis down: a clear error, never a 500.

    A failed save shows the form again (what was typed is kept) with the error on
    top; a failed delete goes back to the confirmation page with an error message.
    Nothing says "success" for what did not happen.
    """

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except FilterUnavailable as exc:
            if request.method != "POST":
                raise
            request.bloom_write_error = exc  # get_form() puts it on the form
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        error = getattr(request, "bloom_write_error", None)
        if error is None:
            return form
        message = _("Redis could not take the change, so nothing was saved: %(error)s") % {
            "error": error
        }

        class FormWithWriteError(form):
            def clean(self):
                super().clean()
                raise forms.ValidationError(message)

        return FormWithWriteError

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except FilterUnavailable as exc:
            self.message_user(
                request,
                _("Redis did not answer, so nothing was deleted: %(error)s") % {"error": exc},
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())

    def changelist_view(self, request, extra_context=None):
        try:
            return super().changelist_view(request, extra_context)
        except WriteFailed as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


def grouped(field: str):
    """A read-only number of the detail page with its digits grouped (1,000,000)."""

    @admin.display(description=FIELD_LABELS[BloomFilter][field])
    def show(self, obj):
        value = getattr(obj, field)
        return self.get_empty_value_display() if value is None else formatting.number(value)

    return show


def items_text(stats: Any, decimals: int = 1) -> str:
    """``850 / 1,000 (85%)``: estimated items against capacity."""
    if stats.estimated_items == float("inf"):
        return str(_("full"))
    return (
        f"{formatting.number(stats.estimated_items)} / {formatting.number(stats.capacity)} "
        f"({formatting.percent(stats.capacity_used, decimals)})"
    )


def capacity_figures(stats: Any) -> list[tuple[str, str]]:
    """The detail page's Capacity panel, as (label, text) pairs."""
    return [
        (_("health"), health_html(monitoring.health(stats))),
        (_("estimated items / capacity"), items_text(stats)),
        (
            _("bits set"),
            _("%(fill)s (%(set)s of %(all)s)")
            % {
                "fill": formatting.percent(stats.fill_ratio),
                "set": formatting.number(stats.bits_set),
                "all": formatting.number(stats.num_bits),
            },
        ),
        (_("false positives now"), formatting.fpr_words(stats.current_fpr)),
        (_("false positives, target"), formatting.one_in(stats.error_rate)),
        (_("memory in Redis"), memory_text(stats)),
        (_("items added (app count)"), formatting.number(stats.items_added)),
        *window_figures(getattr(stats, "details", None) or {}),
        *layout_figures(stats),
        *segment_figures(stats),
    ]


def segment_figures(stats: Any) -> list[tuple[str, str]]:
    """A sharded filter's keys: the memory above is the sum over them."""
    if getattr(stats, "segments", 1) <= 1 or "sub_filters" in (stats.details or {}):
        return []
    return [(_("segments (Redis keys)"), formatting.number(stats.segments))]


def window_figures(details: dict[str, Any]) -> list[tuple[str, str]]:
    """A rotating window's figures (``FilterStats.details`` of layout ``rotating``);
    nothing for layouts whose details hold no window."""
    if "window_seconds" not in details:
        return []
    return [
        (
            _("time window"),
            _("%(slices)s slices of %(seconds)s s (%(window)s s); %(live)s live")
            % {
                "slices": formatting.number(details["slices"]),
                "seconds": formatting.number(details["slice_seconds"]),
                "window": formatting.number(details["window_seconds"]),
                "live": formatting.number(details["slices_live"]),
            },
        ),
        (_("items in the window (estimate)"), formatting.number(details["items_in_window"])),
        (_("false positives over the window"), formatting.fpr_words(details["window_fpr"])),
    ]


def sub_filters_text(stats: Any) -> str:
    """``4 sub-filters`` for a filter that grows; "" for one-key filters."""
    count = (getattr(stats, "details", None) or {}).get("sub_filters")
    if count is None:
        return ""
    return ngettext("%(count)s sub-filter", "%(count)s sub-filters", count) % {
        "count": formatting.number(count)
    }


def layout_figures(stats: Any) -> list[tuple[str, str]]:
    """What a layout adds to the Capacity panel (``FilterStats.details``)."""
    details = getattr(stats, "details", None) or {}
    if "sub_filters" not in details:
        return []
    return [
        (
            _("sub-filters"),
            _("%(count)s (growth ×%(growth)s, tightening %(tightening)s)")
            % {
                "count": formatting.number(details["sub_filters"]),
                "growth": details["growth"],
                "tightening": details["tightening"],
            },
        ),
        (_("items in the newest sub-filter"), formatting.number(details["items_in_newest"])),
        (_("capacity before the next growth"), formatting.number(details["capacity"])),
        (_("false positives, bound"), formatting.one_in(details["fpr_bound"])),
    ]


def memory_text(stats: Any) -> str:
    """Redis memory; for a counting filter, why it is several times a plain filter's."""
    text = formatting.human_bytes(stats.memory_bytes if stats else None)
    per = getattr(stats, "bits_per_position", 1) if stats else 1
    if per > 1:
        text = _("%(memory)s (counting: %(bits)s bits per position, %(bits)sx a plain filter)") % {
            "memory": text,
            "bits": per,
        }
    return text


def counters_text(stats: Any) -> str:
    """``counting, 4x a plain filter`` for a counting filter; "" otherwise."""
    per = getattr(stats, "bits_per_position", 1)
    return _("counting, %(bits)sx a plain filter") % {"bits": per} if per > 1 else ""


def validator_figures(found: dict[str, Any]) -> list[tuple[str, str]]:
    """The Unique validator panel: what the filter saved the database."""
    observed = found["observed_fpr"]
    if observed is None:
        rate = formatting.DASH
    elif observed == 0:
        rate = _("none observed")
    else:
        rate = formatting.fpr_words(observed)
    return [
        (_("database queries skipped (“absent”)"), formatting.number(found["db_skipped"])),
        (_("“maybe” confirmed by the database"), formatting.number(found["db_confirmed"])),
        (_("observed false positives"), formatting.number(found["false_positives"])),
        (_("observed false-positive rate"), rate),
        (
            _("answered by the database (filter unavailable)"),
            formatting.number(found["unavailable"]),
        ),
    ]


def breaker_notes() -> list[str]:
    """One sentence per cache alias whose circuit breaker is not closed (this process)."""
    notes = []
    for state in breaker.states():
        if state["state"] == breaker.CLOSED:
            continue
        retry = state["retry_at"]
        wait = max(0, round(retry - time.time())) if retry else 0
        notes.append(
            _(
                "Redis of cache alias %(alias)s is not answering (%(error)s): filters on it "
                'answer "unavailable" at once, the validator asks the database and the '
                "blocklist middleware follows FAIL_OPEN. Next check in %(wait)s s."
            )
            % {
                "alias": state["alias"],
                "error": state["last_error"] or state["state"],
                "wait": wait,
            }
        )
    return notes


def unreachable(objs) -> list[str]:
    """Names of the filters whose Redis does not answer (one PING per cache alias)."""
    answers = {alias: services.redis_answers(alias) for alias in {o.cache_alias for o in objs}}
    return [obj.name for obj in objs if not answers[obj.cache_alias]]


def reachable_first(delete_selected):
    """The bulk delete, confirmed only when every selected filter's Redis answers:
    otherwise nothing is deleted (and nothing is logged as deleted)."""

    def delete(modeladmin, request, queryset):
        down = unreachable(queryset) if request.POST.get("post") else []
        if down:
            modeladmin.message_user(
                request,
                _("Redis did not answer for %(names)s, so nothing was deleted.")
                % {"names": ", ".join(down)},
                messages.ERROR,
            )
            return None
        return delete_selected(modeladmin, request, queryset)

    return delete


def start_background_rebuild(name: str) -> threading.Thread:
    """Rebuild in a thread so the admin answers at once; state lives on the row."""

    def run() -> None:
        from django_bloom.unique import sync

        close_old_connections()
        try:
            sync.rebuild_from_source(name)
        except (BloomError, ValueError, LookupError):
            pass  # recorded on the row as rebuild_state "failed"
        finally:
            monitoring.forget_stats()
            close_old_connections()

    thread = threading.Thread(target=run, name=f"bloom-rebuild-{name}", daemon=True)
    thread.start()
    return thread
