"""What the admin pages share: translated field labels, health and bar HTML, the
mixin that turns a Redis failure into an error, the admin's extra pages, the breaker
notes and the background rebuild. The detail page's figures: ``admin_figures.py``."""

from __future__ import annotations

import threading
import time
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import FieldListFilter
from django.contrib.admin.utils import get_fields_from_path
from django.core.exceptions import PermissionDenied
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from django_bloom import services
from django_bloom.engine.transport import breaker
from django_bloom.exceptions import BloomError, FilterUnavailable, NotABlocklist
from django_bloom.models import AllowedNetwork, BlockedEntry, BloomFilter, FilterSnapshot
from django_bloom.ops import formatting, monitoring

# Each health state's badge: its symbol and its words (not the colour alone).
HEALTH_BADGES = {
    monitoring.OK: ("✔", _("ok")),
    monitoring.FILLING: ("▲", _("filling")),
    monitoring.OVER: ("✖", _("over capacity")),
    monitoring.UNAVAILABLE: ("?", _("unavailable")),
}
BAR_LEVELS = {monitoring.OK: "ok", monitoring.FILLING: "filling", monitoring.OVER: "over"}
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
        "cooldown": _("cooldown"),
        "hits": _("hits"),
        "last_seen_at": _("last seen"),
    },
    AllowedNetwork: {
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


def build_locked(obj: BloomFilter) -> bool:
    """A rebuild really runs: its Redis lock is held (a row left "running" by a
    process that died does not block a new rebuild once the lock is gone)."""
    handle = monitoring.filter_handle(obj)
    if handle is None:
        return False
    try:
        return handle.build_running()
    except FilterUnavailable:
        return True  # cannot tell: do not start a second one


def health_html(state: str) -> str:
    symbol, label = HEALTH_BADGES[state]
    return format_html(
        '<strong class="bloom-health bloom-health-{}">{} {}</strong>',
        state.replace(" ", "-"),
        symbol,
        label,
    )


def quiet_html(figure: str, note: str) -> str:
    """A list cell: the figure, and under it a quiet line (just the figure without a note)."""
    if not note:
        return figure
    return format_html('{}<br><span class="bloom-quiet">{}</span>', figure, note)


def bar_html(fraction: float, label: str, title: str) -> str:
    return format_html(
        '<span class="bloom-bar bloom-bar-{}" title="{}"><span style="width:{}%"></span></span>'
        '<span class="bloom-bar-label">{}</span>',
        BAR_LEVELS[monitoring.fill_level(fraction)],
        title,
        f"{max(0.0, min(fraction, 1.0)) * 100:.1f}",
        label,
    )


def admin_page(
    modeladmin: Any, request: HttpRequest, template: str, **context: Any
) -> TemplateResponse:
    """A page of ``modeladmin`` beyond Django's own (a confirmation, an import form), in the
    admin's frame: the site's context, the model's ``opts``, then ``context``."""
    context = {**modeladmin.admin_site.each_context(request), "opts": modeladmin.opts, **context}
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, template, context)


# Fields no URL parameter may reach, on any model (the seed, the hash key, a value's digest).
SECRET_FIELDS = frozenset({"seed", "hasher", "digest"})


class AppAdmin(admin.ModelAdmin):
    """The base of every admin page of the app (docs/security.md).

    - Each view checks the model permission it needs before any Redis or database work
      (Django checks an object's page after reading the object); a page's own work goes
      in ``changelist_context`` or ``render_change_form``, which run after the check.
    - A change list's URL takes no lookup but its own list filters' and date hierarchy's:
      none on another field, none reaching a secret one (``?hasher__startswith=``: 400).
    - A save or delete that needs Redis, with Redis down: a clear error, never a 500. A
      failed save shows the form again (what was typed is kept) with the error on top; a
      failed delete goes back to the confirmation page with an error message. Nothing
      says "success" for what did not happen.
    """

    def changelist_view(self, request, extra_context=None):
        self.require(self.has_view_or_change_permission(request))
        context = {**self.changelist_context(request), **(extra_context or {})}
        try:
            return super().changelist_view(request, context)
        except WriteFailed as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def changelist_context(self, request: HttpRequest) -> dict:
        """The list page's extra context, made once its permission is checked."""
        return {}

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        needed = self.has_view_or_change_permission if object_id else self.has_add_permission
        self.require(needed(request))
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except (FilterUnavailable, NotABlocklist) as exc:  # (a list name taken meanwhile)
            if request.method != "POST":
                raise
            request.bloom_write_error = exc  # get_form() puts it on the form
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        error = getattr(request, "bloom_write_error", None)
        if error is None:
            return form
        message = (
            _("Redis could not take the change, so nothing was saved: %(error)s")
            if isinstance(error, FilterUnavailable)
            else _("Nothing was saved: %(error)s")
        ) % {"error": error}

        class FormWithWriteError(form):
            def clean(self):
                super().clean()
                raise forms.ValidationError(message)

        return FormWithWriteError

    def delete_view(self, request, object_id, extra_context=None):
        self.require(self.has_delete_permission(request))
        try:
            return super().delete_view(request, object_id, extra_context)
        except FilterUnavailable as exc:
            self.message_user(
                request,
                _("Redis did not answer, so nothing was deleted: %(error)s") % {"error": exc},
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())

    def history_view(self, request, object_id, extra_context=None):
        self.require(self.has_view_or_change_permission(request))
        return super().history_view(request, object_id, extra_context)

    @staticmethod
    def require(allowed: bool) -> None:
        if not allowed:
            raise PermissionDenied

    def lookup_allowed(self, lookup, value, request=None):
        return not SECRET_FIELDS.intersection(lookup.split("__")) and lookup in (
            self.filter_parameters(request)
        )

    def to_field_allowed(self, request, to_field):
        return to_field not in SECRET_FIELDS and super().to_field_allowed(request, to_field)

    def filter_parameters(self, request) -> set[str]:
        """The URL lookups the list's filters and date hierarchy take (and nothing else)."""
        names = set()
        for item in self.get_list_filter(request):
            if isinstance(item, type):  # a SimpleListFilter
                spec = item(request, {}, self.model, self)
            else:
                path, make = item if isinstance(item, (list, tuple)) else (item, None)
                field = get_fields_from_path(self.model, path)[-1]
                make = make or FieldListFilter.create
                spec = make(field, request, {}, self.model, self, field_path=path)
            names.update(spec.expected_parameters())
        if self.date_hierarchy:
            names.update(f"{self.date_hierarchy}__{part}" for part in ("year", "month", "day"))
        return names


class WriteFailed(Exception):
    """Some selected objects could not be changed in Redis (the message says which)."""


# The name of the mixin before issue 34 (its Redis-failure handling is AppAdmin's).
RedisWritesAsErrors = AppAdmin


def grouped(field: str):
    """A read-only number of the detail page with its digits grouped (1,000,000)."""

    @admin.display(description=FIELD_LABELS[BloomFilter][field])
    def show(self, obj):
        value = getattr(obj, field)
        return self.get_empty_value_display() if value is None else formatting.number(value)

    return show


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
