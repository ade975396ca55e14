"""Admin pages: capacity monitoring for filters, and the blocklist's entries.

Models do no Redis I/O, so everything that touches Redis goes through the
services here: creating a filter in the admin creates its key, deleting it
deletes the key, and the figures come from ``monitoring.cached_stats``.
"""

from __future__ import annotations

import threading
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers, widgets
from django.core.exceptions import PermissionDenied
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_bloom import blocklist, counters, formatting, monitoring, services
from django_bloom.exceptions import BloomError, FilterNotFound, FilterUnavailable
from django_bloom.models import BlockedEntry, BloomFilter, FilterSnapshot

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
        "items_added": _("items added"),
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


_translate_field_labels()


def _handle(obj: BloomFilter) -> services.Filter | None:
    try:
        return services.get_filter(obj.name)
    except FilterNotFound:
        return None


def _stats(obj: BloomFilter) -> Any | None:
    handle = _handle(obj)
    return monitoring.cached_stats(handle) if handle else None


def _build_locked(obj: BloomFilter) -> bool:
    """A rebuild really runs: its Redis lock is held (a row left "running" by a
    process that died does not block a new rebuild once the lock is gone)."""
    handle = _handle(obj)
    if handle is None:
        return False
    try:
        return handle.storage.build_running(handle.layout)
    except FilterUnavailable:
        return True  # cannot tell: do not start a second one


def is_bound(obj: BloomFilter) -> bool:
    """Filled from a source of truth (a model field, or the blocklist's rows)."""
    return bool(obj.source) or obj.kind == BloomFilter.Kind.BLOCKLIST


def _health_html(state: str) -> str:
    return format_html(
        '<strong class="bloom-health bloom-health-{}">{} {}</strong>',
        state.replace(" ", "-"),
        HEALTH_SYMBOLS[state],
        HEALTH_LABELS[state],
    )


def _bar(fraction: float, label: str, title: str) -> str:
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


class BloomFilterCreateForm(forms.ModelForm):
    class Meta:
        model = BloomFilter
        fields = [
            "name",
            "description",
            "kind",
            "capacity",
            "error_rate",
            "layout",
            "cache_alias",
            "source",
            "normalizer",
            "encoder",
        ]


@admin.register(BloomFilter)
class BloomFilterAdmin(RedisWritesAsErrors, admin.ModelAdmin):
    # Health first: it is what matters at a glance. Every column fits a 1280 px
    # screen beside the navigation (no filter sidebar: a site has a handful of
    # filters, and the search box finds them by name or description).
    list_display = [
        "name",
        "health_display",
        "items_display",
        "fpr_display",
        "memory_display",
        "last_rebuild_display",
        "kind",
    ]
    search_fields = ["name", "description"]
    actions = ["recompute_stats", "rebuild_from_source", "clear_filters"]
    change_form_template = "admin/django_bloom/bloomfilter/change_form.html"
    change_list_template = "admin/django_bloom/bloomfilter/change_list.html"
    # The name is part of the Redis keys (renaming would orphan them); the seed is
    # not shown at all: whoever knows it can craft colliding items.
    readonly_fields = [
        "name",
        "kind",
        "capacity_grouped",
        "error_rate",
        "num_bits_grouped",
        "num_hashes",
        "layout",
        "format_version",
        "cache_alias",
        "source",
        "normalizer",
        "encoder",
        "items_added_grouped",
        "last_rebuild_at",
        "rebuild_state",
        "rebuild_done_grouped",
        "rebuild_total_grouped",
        "rebuild_error",
        "created_at",
        "updated_at",
    ]

    class Media:
        css = ADMIN_CSS

    capacity_grouped = grouped("capacity")
    num_bits_grouped = grouped("num_bits")
    items_added_grouped = grouped("items_added")
    rebuild_done_grouped = grouped("rebuild_done")
    rebuild_total_grouped = grouped("rebuild_total")

    # -- create / delete go through the services (the Redis key follows the row) --
    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = BloomFilterCreateForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ["num_bits", "num_hashes"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return BloomFilterCreateForm.Meta.fields
        return ["name", "description", *self.readonly_fields[1:]]

    def save_model(self, request, obj, form, change):
        if change:
            obj.save(update_fields=["description", "updated_at"])
            return
        handle = services.create_filter(
            obj.name,
            capacity=obj.capacity,
            error_rate=obj.error_rate,
            description=obj.description,
            kind=obj.kind,
            cache_alias=obj.cache_alias,
            source=obj.source,
            normalizer=obj.normalizer,
            encoder=obj.encoder or None,
            layout=obj.layout,
        )
        obj.pk = handle.meta.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        handle = _handle(obj)
        if handle is not None:
            handle.delete()
        else:
            obj.delete()

    def delete_queryset(self, request, queryset):
        failed = []
        for obj in queryset:
            try:
                self.delete_model(request, obj)
            except FilterUnavailable as exc:
                failed.append(f"{obj.name} ({exc})")
        if failed:
            raise WriteFailed(
                _("Redis did not answer, so nothing was deleted for: %(names)s")
                % {"names": "; ".join(failed)}
            )

    # -- columns ---------------------------------------------------------------
    @admin.display(description=_("health"))
    def health_display(self, obj):
        return _health_html(monitoring.health(_stats(obj)))

    @admin.display(description=_("items / capacity"), ordering="capacity")
    def items_display(self, obj):
        stats = _stats(obj)
        if stats is None:
            return formatting.DASH
        if stats.estimated_items == float("inf"):
            label = _("full")
        else:
            label = (
                f"{formatting.number(stats.estimated_items)} / {formatting.number(obj.capacity)}"
            )
            label += f" ({formatting.percent(stats.capacity_used, 0)})"
        title = _("%(fill)s of the bits set") % {"fill": formatting.percent(stats.fill_ratio)}
        return _bar(stats.capacity_used, label, title)

    @admin.display(description=_("false positives"))
    def fpr_display(self, obj):
        stats = _stats(obj)
        if stats is None:
            return formatting.DASH
        return format_html(
            '{}<br><span class="bloom-quiet">{}</span>',
            formatting.fpr_words(stats.current_fpr),
            _("target %(rate)s") % {"rate": formatting.one_in(obj.error_rate)},
        )

    @admin.display(description=_("memory"))
    def memory_display(self, obj):
        stats = _stats(obj)
        return formatting.human_bytes(stats.memory_bytes if stats else None)

    @admin.display(description=_("last rebuild"), ordering="last_rebuild_at")
    def last_rebuild_display(self, obj):
        if obj.rebuild_state == "running":
            total = obj.rebuild_total or 0
            return _("running %(done)s / %(total)s") % {
                "done": formatting.number(obj.rebuild_done),
                "total": formatting.number(total) if total else "?",
            }
        if obj.rebuild_state in ("failed", "stale"):
            label = _("failed") if obj.rebuild_state == "failed" else _("stale")
            return format_html(
                '<span title="{}">{}</span>',
                obj.rebuild_error,
                f"{label}: {obj.rebuild_error[:60]}",
            )
        if obj.last_rebuild_at is None:
            return _("never")
        return format_html(
            '<span title="{}">{}</span>',
            formatting.moment(obj.last_rebuild_at),
            formatting.ago(obj.last_rebuild_at),
        )

    # -- detail page -------------------------------------------------------------
    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = extra_context or {}
        obj = self.get_object(request, object_id)
        if obj is not None:
            handle = _handle(obj)
            stats = monitoring.cached_stats(handle, refresh=True) if handle else None
            snapshots = list(obj.snapshots.order_by("-recorded_at")[:200])[::-1]
            validator = None
            if handle is not None and obj.kind == BloomFilter.Kind.UNIQUE:
                try:
                    validator = validator_figures(counters.read_counters(handle))
                except FilterUnavailable:
                    validator = None
            extra_context.update(
                bloom_unique=obj.kind == BloomFilter.Kind.UNIQUE,
                bloom_figures=capacity_figures(stats) if stats else None,
                bloom_counters=validator,
                bloom_chart=mark_safe(monitoring.chart_svg(snapshots, obj.capacity)),
                bloom_projection=monitoring.projection(snapshots, obj.capacity),
                bloom_snapshots=len(snapshots),
            )
        return super().change_view(request, object_id, form_url, extra_context)

    # -- actions (each declares the permission it needs) ---------------------------
    def has_rebuild_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    @admin.action(description=_("Recompute stats (records a snapshot)"), permissions=["change"])
    def recompute_stats(self, request, queryset):
        done, failed = 0, []
        for obj in queryset:
            handle = _handle(obj)
            try:
                monitoring.record_snapshot(handle)
                done += 1
            except (FilterUnavailable, AttributeError):
                failed.append(obj.name)
        if done:
            self.message_user(
                request,
                ngettext("Recorded %(n)d snapshot.", "Recorded %(n)d snapshots.", done)
                % {"n": done},
                messages.SUCCESS,
            )
        if failed:
            self.message_user(
                request,
                _("Unavailable (Redis down or key lost), nothing recorded: %(names)s")
                % {"names": ", ".join(failed)},
                messages.ERROR,
            )

    @admin.action(description=_("Rebuild from source (in the background)"), permissions=["rebuild"])
    def rebuild_from_source(self, request, queryset):
        self._start_rebuilds(request, list(queryset))

    def _start_rebuilds(self, request, objs) -> None:
        started = []
        for obj in objs:
            if obj.rebuild_state == "running" and _build_locked(obj):
                self.message_user(
                    request,
                    _("%(name)s: a rebuild is already running") % {"name": obj.name},
                    messages.WARNING,
                )
                continue
            if not is_bound(obj):
                self.message_user(
                    request,
                    _("%(name)s: no bound source to rebuild from") % {"name": obj.name},
                    messages.ERROR,
                )
                continue
            try:
                _handle(obj).exists_in_redis()  # Redis answers? else say so, start nothing
            except FilterUnavailable as exc:
                self.message_user(
                    request,
                    _("%(name)s was not rebuilt: %(error)s") % {"name": obj.name, "error": exc},
                    messages.ERROR,
                )
                continue
            BloomFilter.objects.filter(pk=obj.pk).update(rebuild_state="running", rebuild_done=0)
            start_background_rebuild(obj.name)
            started.append(obj.name)
        if started:
            self.message_user(
                request,
                _(
                    "Rebuilding %(names)s from the source in the background; progress shows "
                    "under “last rebuild” (reload the page)."
                )
                % {"names": ", ".join(started)},
                messages.SUCCESS,
            )

    @admin.action(description=_("Clear…"), permissions=["rebuild"])
    def clear_filters(self, request, queryset):
        """Asks first. A bound filter is rebuilt from its source, never left empty."""
        objs = list(queryset)
        bound = [obj for obj in objs if is_bound(obj)]
        unbound = [obj for obj in objs if not is_bound(obj)]
        if request.POST.get("confirm") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": _("Clear Bloom filters"),
                "opts": self.opts,
                "bound": bound,
                "unbound": unbound,
                "queryset": objs,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "media": self.media,
            }
            request.current_app = self.admin_site.name
            return TemplateResponse(
                request, "admin/django_bloom/bloomfilter/clear_confirmation.html", context
            )
        for obj in unbound:
            try:
                services.get_filter(obj.name).clear()
            except (FilterUnavailable, FilterNotFound) as exc:
                self.message_user(
                    request,
                    _("%(name)s was not cleared: %(error)s") % {"name": obj.name, "error": exc},
                    messages.ERROR,
                )
                continue
            monitoring.forget_stats()
            self.message_user(
                request,
                _("Cleared %(name)s: every item added before now reads absent.")
                % {"name": obj.name},
                messages.SUCCESS,
            )
        self._start_rebuilds(request, bound)


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
        (_("health"), _health_html(monitoring.health(stats))),
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
        (_("memory in Redis"), formatting.human_bytes(stats.memory_bytes)),
        (_("items added (app count)"), formatting.number(stats.items_added)),
    ]


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


def start_background_rebuild(name: str) -> threading.Thread:
    """Rebuild in a thread so the admin answers at once; state lives on the row."""

    def run() -> None:
        from django_bloom import sync

        close_old_connections()
        try:
            sync.rebuild_from_source(name)
        except (BloomError, ValueError, LookupError):
            pass  # recorded on the row as rebuild_state="failed"
        finally:
            monitoring.forget_stats()
            close_old_connections()

    thread = threading.Thread(target=run, name=f"bloom-rebuild-{name}", daemon=True)
    thread.start()
    return thread


@admin.register(FilterSnapshot)
class FilterSnapshotAdmin(admin.ModelAdmin):
    list_display = ["bloom_filter", "recorded_at", "items_display", "fill_display", "fpr_display"]
    list_filter = ["bloom_filter"]
    date_hierarchy = "recorded_at"
    fields = ["bloom_filter", "recorded_at", "items_display", "fill_display", "fpr_display"]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description=_("estimated items"), ordering="estimated_items")
    def items_display(self, obj):
        return formatting.number(obj.estimated_items)

    @admin.display(description=_("bits set"), ordering="fill_ratio")
    def fill_display(self, obj):
        return formatting.percent(obj.fill_ratio)

    @admin.display(description=_("false positives"), ordering="current_fpr")
    def fpr_display(self, obj):
        return formatting.fpr_words(obj.current_fpr)


# -- blocklist ------------------------------------------------------------------------
class ActiveFilter(admin.SimpleListFilter):
    title = _("status")
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("active", _("active")), ("expired", _("expired"))]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.active()
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=timezone.now())
        return queryset


def expiry_help() -> str:
    return _(
        "Leave empty for no expiry. Date and time in the site's time zone (%(zone)s); "
        "it must lie in the future: to stop blocking now, use the “Expire now” action."
    ) % {"zone": timezone.get_current_timezone_name()}


def future_expiry(value):
    """A past expiry is refused on the form (block() would refuse it too)."""
    if value is not None and value <= timezone.now():
        raise forms.ValidationError(
            _("%(moment)s is in the past. To stop blocking now, use the “Expire now” action.")
            % {"moment": formatting.moment(value)}
        )
    return value


class NetsetUploadForm(forms.Form):
    file = forms.FileField(
        label=_("Netset file"),
        help_text=_("FireHOL/ipset netset: one address or CIDR per line, # comments."),
    )
    reason = forms.CharField(label=_("Reason"), max_length=200, required=False)
    expires_at = forms.SplitDateTimeField(
        label=_("Expires at"),
        required=False,
        widget=widgets.AdminSplitDateTime,
        validators=[future_expiry],
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["expires_at"].help_text = expiry_help()


class BlockedEntryForm(forms.ModelForm):
    class Meta:
        model = BlockedEntry
        fields = ["network", "reason", "expires_at", "list_name"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["expires_at"].help_text = expiry_help()

    def clean_network(self):
        from django_bloom import ip as iplib

        try:
            return iplib.normalize_network(self.cleaned_data["network"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_expires_at(self):
        return future_expiry(self.cleaned_data["expires_at"])


@admin.register(BlockedEntry)
class BlockedEntryAdmin(RedisWritesAsErrors, admin.ModelAdmin):
    form = BlockedEntryForm
    list_display = ["network", "reason", "list_name", "created_at", "expires_at", "active_display"]
    list_filter = [ActiveFilter, "list_name"]
    search_fields = ["network", "reason"]
    actions = ["expire_now"]
    change_list_template = "admin/django_bloom/blockedentry/change_list.html"

    @admin.display(description=_("active"), boolean=True)
    def active_display(self, obj):
        return obj.is_active()

    def save_model(self, request, obj, form, change):
        # block() writes the row and the filter together (the filter first: a hit
        # is confirmed against the row, so an extra filter item is harmless). An
        # edit that moves the entry blocks the new network, then unblocks the old.
        entry = blocklist.block(obj.network, obj.reason, obj.expires_at, obj.list_name)
        if change:
            old = (form.initial.get("network"), form.initial.get("list_name"))
            if old != (entry.network, entry.list_name):
                blocklist.unblock(*old)
        obj.pk = entry.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        blocklist.unblock(obj.network, obj.list_name)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            blocklist.unblock(obj.network, obj.list_name)

    @admin.action(description=_("Expire now (stop blocking)"), permissions=["change"])
    def expire_now(self, request, queryset):
        count = queryset.update(expires_at=timezone.now())
        blocklist.forget_caches()
        self.message_user(
            request,
            ngettext("Expired %(n)d entry.", "Expired %(n)d entries.", count) % {"n": count},
            messages.SUCCESS,
        )

    def get_urls(self):
        extra = [
            path(
                "import/",
                self.admin_site.admin_view(self.import_view),
                name="django_bloom_blockedentry_import",
            )
        ]
        return extra + super().get_urls()

    def import_view(self, request):
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = NetsetUploadForm(request.POST or None, request.FILES or None)
        result = None
        if request.method == "POST" and form.is_valid():
            raw = form.cleaned_data["file"].read().decode("utf-8", errors="replace").splitlines()
            try:
                result = blocklist.import_netset(
                    raw,
                    reason=form.cleaned_data["reason"],
                    expires_at=form.cleaned_data["expires_at"],
                )
            except (FilterUnavailable, ValueError) as exc:
                self.message_user(
                    request,
                    _("Import failed, nothing written: %(error)s") % {"error": exc},
                    messages.ERROR,
                )
            else:
                self.message_user(
                    request,
                    _(
                        "Imported %(added)s new entries (%(duplicates)s already listed, "
                        "%(bad)s bad lines skipped)."
                    )
                    % {
                        "added": formatting.number(result.added),
                        "duplicates": formatting.number(result.duplicates),
                        "bad": formatting.number(len(result.errors)),
                    },
                    messages.SUCCESS if not result.errors else messages.WARNING,
                )
                if not result.errors:
                    return HttpResponseRedirect(
                        reverse("admin:django_bloom_blockedentry_changelist")
                    )
        fieldsets = [(None, {"fields": list(form.fields)})]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "adminform": helpers.AdminForm(form, fieldsets, {}),
            "form": form,
            "errors": helpers.AdminErrorList(form, []),
            "media": self.media + form.media,
            "result": result,
            "title": _("Import a blocklist (netset)"),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_bloom/blockedentry/import.html", context)
