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
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from django_bloom import blocklist, counters, monitoring, services
from django_bloom.exceptions import BloomError, FilterNotFound, FilterUnavailable
from django_bloom.models import BlockedEntry, BloomFilter, FilterSnapshot

HEALTH_COLOURS = {
    monitoring.OK: "#1b6e3a",
    monitoring.FILLING: "#8a5a00",
    monitoring.OVER: "#a3161b",
    monitoring.UNAVAILABLE: "#5b6773",
}
HEALTH_SYMBOLS = {
    monitoring.OK: "✔",
    monitoring.FILLING: "▲",
    monitoring.OVER: "✖",
    monitoring.UNAVAILABLE: "?",
}


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


def _bar(fraction: float, label: str) -> str:
    width = max(0.0, min(fraction, 1.0)) * 100
    colour = (
        "#a3161b" if fraction > 1 else "#8a5a00" if fraction >= monitoring.FILLING_AT else "#2f6fb3"
    )
    return format_html(
        '<div class="bloom-bar" title="{}" style="width:120px;height:10px;background:#e3e7ec;'
        'border-radius:5px;display:inline-block;vertical-align:middle;margin-right:6px">'
        '<div style="width:{}%;height:10px;background:{};border-radius:5px"></div></div>'
        '<span class="bloom-bar-label">{}</span>',
        label,
        f"{width:.1f}",
        colour,
        label,
    )


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


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
class BloomFilterAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "kind",
        "capacity_display",
        "fill_display",
        "items_display",
        "fpr_display",
        "memory_display",
        "last_rebuild_display",
        "health_display",
    ]
    list_filter = ["kind"]
    search_fields = ["name", "description"]
    actions = ["recompute_stats", "rebuild_from_source", "clear_filters"]
    change_form_template = "admin/django_bloom/bloomfilter/change_form.html"
    readonly_fields = [
        "kind",
        "capacity",
        "error_rate",
        "num_bits",
        "num_hashes",
        "seed",
        "layout",
        "format_version",
        "cache_alias",
        "source",
        "normalizer",
        "encoder",
        "items_added",
        "last_rebuild_at",
        "rebuild_state",
        "rebuild_done",
        "rebuild_total",
        "rebuild_error",
        "created_at",
        "updated_at",
    ]

    # -- create / delete go through the services (the Redis key follows the row) --
    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = BloomFilterCreateForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ["num_bits", "num_hashes"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return BloomFilterCreateForm.Meta.fields
        return ["name", "description", *self.readonly_fields]

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
        for obj in queryset:
            self.delete_model(request, obj)

    # -- columns ---------------------------------------------------------------
    @admin.display(description="capacity", ordering="capacity")
    def capacity_display(self, obj):
        return f"{obj.capacity:,}"

    @admin.display(description="fill ratio")
    def fill_display(self, obj):
        stats = _stats(obj)
        return "—" if stats is None else f"{stats.fill_ratio:.1%}"

    @admin.display(description="estimated items / capacity")
    def items_display(self, obj):
        stats = _stats(obj)
        if stats is None:
            return "—"
        est = stats.estimated_items
        label = (
            f"{est:,.0f} / {obj.capacity:,} ({stats.capacity_used:.0%})"
            if est != float("inf")
            else "full"
        )
        return _bar(stats.capacity_used, label)

    @admin.display(description="FPR now vs target")
    def fpr_display(self, obj):
        stats = _stats(obj)
        if stats is None:
            return "—"
        return f"{stats.current_fpr:.2e} vs {obj.error_rate:.0e}"

    @admin.display(description="memory")
    def memory_display(self, obj):
        stats = _stats(obj)
        return _human_bytes(stats.memory_bytes if stats else None)

    @admin.display(description="last rebuild", ordering="last_rebuild_at")
    def last_rebuild_display(self, obj):
        if obj.rebuild_state == "running":
            total = obj.rebuild_total or 0
            pct = f" {obj.rebuild_done / total:.0%}" if total else ""
            return f"running{pct} ({obj.rebuild_done:,}/{total:,})"
        if obj.rebuild_state in ("failed", "stale"):
            return f"{obj.rebuild_state}: {obj.rebuild_error[:80]}"
        return obj.last_rebuild_at.strftime("%Y-%m-%d %H:%M") if obj.last_rebuild_at else "never"

    @admin.display(description="health")
    def health_display(self, obj):
        state = monitoring.health(_stats(obj))
        return format_html(
            '<strong class="bloom-health bloom-health-{}" style="color:{}">{} {}</strong>',
            state.replace(" ", "-"),
            HEALTH_COLOURS[state],
            HEALTH_SYMBOLS[state],
            state,
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
            if handle is not None:
                try:
                    validator = counters.read_counters(handle)
                except FilterUnavailable:
                    validator = None
            extra_context.update(
                bloom_stats=stats,
                bloom_health=monitoring.health(stats),
                bloom_counters=validator,
                bloom_chart=mark_safe(monitoring.chart_svg(snapshots, obj.capacity)),
                bloom_projection=monitoring.projection(snapshots, obj.capacity),
                bloom_snapshots=len(snapshots),
                bloom_memory=_human_bytes(stats.memory_bytes if stats else None),
                bloom_fill=f"{stats.fill_ratio:.1%}" if stats else "",
                bloom_used=f"{stats.capacity_used:.1%}" if stats else "",
            )
        return super().change_view(request, object_id, form_url, extra_context)

    # -- actions (each declares the permission it needs) ---------------------------
    def has_rebuild_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    @admin.action(description="Recompute stats (records a snapshot)", permissions=["change"])
    def recompute_stats(self, request, queryset):
        done, failed = 0, []
        for obj in queryset:
            handle = _handle(obj)
            try:
                monitoring.record_snapshot(handle)
                done += 1
            except (FilterUnavailable, AttributeError):
                failed.append(obj.name)
        self.message_user(request, f"Recorded {done} snapshot(s).", messages.SUCCESS)
        if failed:
            self.message_user(request, f"Unavailable: {', '.join(failed)}", messages.WARNING)

    @admin.action(description="Rebuild from source (in the background)", permissions=["rebuild"])
    def rebuild_from_source(self, request, queryset):

        started = []
        for obj in queryset:
            if obj.rebuild_state == "running" and _build_locked(obj):
                self.message_user(
                    request, f"{obj.name}: a rebuild is already running", messages.WARNING
                )
                continue
            if not obj.source and obj.kind != BloomFilter.Kind.BLOCKLIST:
                self.message_user(
                    request, f"{obj.name}: no bound source to rebuild from", messages.ERROR
                )
                continue
            BloomFilter.objects.filter(pk=obj.pk).update(rebuild_state="running", rebuild_done=0)
            start_background_rebuild(obj.name)
            started.append(obj.name)
        if started:
            self.message_user(
                request,
                f"Rebuilding {', '.join(started)} in the background; progress shows under "
                "'last rebuild' (reload the page).",
                messages.SUCCESS,
            )

    @admin.action(description="Clear (empty the filter)", permissions=["rebuild"])
    def clear_filters(self, request, queryset):
        for obj in queryset:
            handle = _handle(obj)
            try:
                handle.clear()
            except (FilterUnavailable, AttributeError) as exc:
                self.message_user(request, f"{obj.name}: {exc}", messages.ERROR)
                continue
            monitoring.forget_stats()
            self.message_user(request, f"Cleared {obj.name}.", messages.SUCCESS)


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
    list_display = ["bloom_filter", "recorded_at", "estimated_items", "fill_ratio", "current_fpr"]
    list_filter = ["bloom_filter"]
    date_hierarchy = "recorded_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


# -- blocklist ------------------------------------------------------------------------
class ActiveFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("active", "active"), ("expired", "expired")]

    def queryset(self, request, queryset):
        if self.value() == "active":
            return queryset.active()
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=timezone.now())
        return queryset


class NetsetUploadForm(forms.Form):
    file = forms.FileField(
        help_text="FireHOL/ipset netset: one address or CIDR per line, # comments."
    )
    reason = forms.CharField(max_length=200, required=False)
    expires_at = forms.DateTimeField(required=False, help_text="Leave empty for no expiry.")


class BlockedEntryForm(forms.ModelForm):
    class Meta:
        model = BlockedEntry
        fields = ["network", "reason", "expires_at", "list_name"]

    def clean_network(self):
        from django_bloom import ip as iplib

        try:
            return iplib.normalize_network(self.cleaned_data["network"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(BlockedEntry)
class BlockedEntryAdmin(admin.ModelAdmin):
    form = BlockedEntryForm
    list_display = ["network", "reason", "list_name", "created_at", "expires_at", "active_display"]
    list_filter = [ActiveFilter, "list_name"]
    search_fields = ["network", "reason"]
    actions = ["expire_now"]
    change_list_template = "admin/django_bloom/blockedentry/change_list.html"

    @admin.display(description="active", boolean=True)
    def active_display(self, obj):
        return obj.is_active()

    def save_model(self, request, obj, form, change):
        # block() writes the row and the filter together (the filter first: a hit
        # is confirmed against the row, so an extra filter item is harmless).
        entry = blocklist.block(obj.network, obj.reason, obj.expires_at, obj.list_name)
        obj.pk = entry.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        blocklist.unblock(obj.network, obj.list_name)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            blocklist.unblock(obj.network, obj.list_name)

    @admin.action(description="Expire now (stop blocking)", permissions=["change"])
    def expire_now(self, request, queryset):
        count = queryset.update(expires_at=timezone.now())
        blocklist.forget_caches()
        self.message_user(
            request, f"Expired {count} entr{'y' if count == 1 else 'ies'}.", messages.SUCCESS
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
            from django.core.exceptions import PermissionDenied

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
                self.message_user(request, f"Import failed, nothing written: {exc}", messages.ERROR)
            else:
                self.message_user(
                    request,
                    f"Imported {result.added:,} new entries ({result.duplicates:,} already listed, "
                    f"{len(result.errors)} bad lines skipped).",
                    messages.SUCCESS if not result.errors else messages.WARNING,
                )
                if not result.errors:
                    return HttpResponseRedirect(
                        reverse("admin:django_bloom_blockedentry_changelist")
                    )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "form": form,
            "result": result,
            "title": "Import a blocklist (netset)",
        }
        return TemplateResponse(request, "admin/django_bloom/blockedentry/import.html", context)
