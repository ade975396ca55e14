"""The BloomFilter list's actions: recompute stats, rebuild from source, clear, export.

A mixin of ``bloom_filters.BloomFilterAdmin`` (it uses the ModelAdmin's
``message_user``, ``admin_site``, ``opts`` and ``media``). Each action declares
the permission it needs; "rebuild" is ``has_rebuild_permission`` below.
"""

from __future__ import annotations

from itertools import chain

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpRequest, StreamingHttpResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_bloom import services
from django_bloom.exceptions import BloomError, FilterNotFound, FilterUnavailable
from django_bloom.models import BloomFilter
from django_bloom.ops import monitoring
from django_bloom.ops.admin_support import (
    admin_page,
    build_locked,
    start_background_rebuild,
    unreachable,
)


def rebuild_refusal(obj: BloomFilter) -> tuple[str, int] | None:
    """Why ``obj`` is not rebuilt now, as (message, level); None when it may start."""
    if obj.rebuild_state == BloomFilter.RebuildState.RUNNING and build_locked(obj):
        return _("%(name)s: a rebuild is already running"), messages.WARNING
    if not obj.is_bound:
        return _("%(name)s: no bound source to rebuild from"), messages.ERROR
    if unreachable([obj]):
        return _("%(name)s was not rebuilt: Redis did not answer."), messages.ERROR
    return None


class FilterActions:
    """The actions of the BloomFilter list (mixed into BloomFilterAdmin)."""

    def has_rebuild_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    @admin.action(description=_("Recompute stats (records a snapshot)"), permissions=["change"])
    def recompute_stats(self, request, queryset):
        done, failed = 0, []
        families = [obj.name for obj in queryset if obj.family]
        if families:
            monitoring.forget_stats()
            self.message_user(
                request,
                _("Filter families have no snapshots; their figures were refreshed: %(names)s")
                % {"names": ", ".join(families)},
                messages.INFO,
            )
        for obj in queryset:
            if obj.family:
                continue
            handle = monitoring.filter_handle(obj)
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
            refusal = rebuild_refusal(obj)
            if refusal is not None:
                message, level = refusal
                self.message_user(request, message % {"name": obj.name}, level)
                continue
            BloomFilter.objects.filter(pk=obj.pk).update(
                rebuild_state=BloomFilter.RebuildState.RUNNING, rebuild_done=0
            )
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

    @admin.action(description=_("Export (download, without the hash key)"), permissions=["view"])
    def export_filter(self, request, queryset):
        """One filter's dump as a streamed download, its hash key left out: it restores into
        this same filter (``bloom import``). A dump with the key is ``bloom export``'s."""
        objs = list(queryset[:2])
        if len(objs) != 1:
            self.message_user(request, _("Select one filter to export."), messages.WARNING)
            return None
        name = objs[0].name  # a slug: safe in a header
        try:
            pieces = services.get_handle(name).dump(include_key=False)
            header = next(pieces)
        except BloomError as exc:
            message = _("%(name)s was not exported: %(error)s") % {"name": name, "error": exc}
            self.message_user(request, message, messages.ERROR)
            return None
        response = StreamingHttpResponse(chain([header], pieces), "application/octet-stream")
        response["Content-Disposition"] = f'attachment; filename="{name}.bloomdump"'
        return response

    @admin.action(description=_("Clear…"), permissions=["rebuild"])
    def clear_filters(self, request, queryset):
        """Asks first. A bound filter is rebuilt from its source, never left empty."""
        objs = list(queryset)
        bound = [obj for obj in objs if obj.is_bound]
        unbound = [obj for obj in objs if not obj.is_bound]
        if request.POST.get("confirm") != "yes":
            return admin_page(
                self,
                request,
                "admin/django_bloom/bloomfilter/clear_confirmation.html",
                title=_("Clear Bloom filters"),
                bound=bound,
                unbound=unbound,
                queryset=objs,
                action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
                media=self.media,
            )
        for obj in unbound:
            try:
                services.get_handle(obj.name).clear()
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
