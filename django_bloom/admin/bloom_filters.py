"""The BloomFilter pages: the list (health first), the detail page, create and delete.

Create and delete go through the services, so the Redis key follows the row.
The add form is ``forms.py``, the list's actions ``actions.py``.
"""

from __future__ import annotations

from dataclasses import replace

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _

from django_bloom import counters, services
from django_bloom.admin.actions import FilterActions
from django_bloom.admin.forms import BloomFilterCreateForm
from django_bloom.exceptions import FilterUnavailable
from django_bloom.models import BloomFilter
from django_bloom.ops import deletion, formatting, monitoring
from django_bloom.ops.admin_figures import (
    capacity_figures,
    counters_text,
    family_figures,
    items_text,
    members_text,
    sub_filters_text,
    validator_figures,
)
from django_bloom.ops.admin_support import (
    ADMIN_CSS,
    FIELD_LABELS,
    AppAdmin,
    WriteFailed,
    bar_html,
    breaker_notes,
    grouped,
    health_html,
    quiet_html,
    reachable_first,
    unreachable,
)


@admin.register(BloomFilter)
class BloomFilterAdmin(FilterActions, AppAdmin):
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
    actions = ["recompute_stats", "rebuild_from_source", "clear_filters", "export_filter"]
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
        "options_display",
        "format_version",
        "cache_alias",
        "source",
        "normalizer",
        "encoder",
        "last_rebuild_at",
        "rebuild_state_display",
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
    rebuild_done_grouped = grouped("rebuild_done")
    rebuild_total_grouped = grouped("rebuild_total")

    # -- create / delete go through the services (the Redis key follows the row) --
    def changelist_context(self, request):
        # One PING per cache alias in use first, so the status line above the list
        # shows the circuit breakers as this very page found Redis.
        unreachable(BloomFilter.objects.only("name", "cache_alias"))
        return {"bloom_breakers": breaker_notes()}

    add_form = BloomFilterCreateForm  # the add page's form (as Django's UserAdmin names it)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = self.add_form
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ["num_bits", "num_hashes"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return [*self.add_form.Meta.fields, *self.add_form.EXTRA_FIELDS]
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
            options=form.cleaned_data.get("layout_options") or {},
            family=bool(form.cleaned_data.get("make_family")),
            member_ttl=form.cleaned_data.get("member_ttl_seconds"),
        )
        obj.pk = handle.meta.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        deletion.delete_filter(obj)  # every Redis key, then the row (as `bloom delete`)

    def get_actions(self, request, action_location=None):
        # action_location and Action objects: Django 6.1+; older versions pass tuples.
        extra = {} if action_location is None else {"action_location": action_location}
        actions = super().get_actions(request, **extra)
        action = actions.get("delete_selected")
        if hasattr(action, "func"):
            actions["delete_selected"] = replace(action, func=reachable_first(action.func))
        elif action is not None:
            func, name, description = action
            actions["delete_selected"] = (reachable_first(func), name, description)
        return actions

    def delete_queryset(self, request, queryset):
        # reachable_first() checked Redis; a filter that fails now is reported by name.
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
        return health_html(monitoring.health(monitoring.row_stats(obj)))

    @admin.display(description=_("items / capacity"), ordering="capacity")
    def items_display(self, obj):
        stats = monitoring.row_stats(obj)
        if stats is None:
            return formatting.DASH
        if obj.family:
            capacity = formatting.number(stats.capacity)
            each = _("family, %(capacity)s items each") % {"capacity": capacity}
            return quiet_html(members_text(stats), each)
        label = items_text(stats, decimals=0)
        title = _("%(fill)s of the bits set") % {"fill": formatting.percent(stats.fill_ratio)}
        return bar_html(stats.capacity_used, label, title)

    @admin.display(description=_("false positives"))
    def fpr_display(self, obj):
        if obj.family:
            return _("target %(rate)s per member") % {"rate": formatting.one_in(obj.error_rate)}
        stats = monitoring.row_stats(obj)
        if stats is None:
            return formatting.DASH
        return quiet_html(
            formatting.fpr_words(stats.current_fpr),
            _("target %(rate)s") % {"rate": formatting.one_in(obj.error_rate)},
        )

    @admin.display(description=_("Layout options"))
    def options_display(self, obj):
        """The layout's parameters (slices, growth, segments...), as stored; "-" for none."""
        options = obj.options or {}
        return ", ".join(f"{key}={value}" for key, value in sorted(options.items())) or "-"

    @admin.display(description=FIELD_LABELS[BloomFilter]["rebuild_state"])
    def rebuild_state_display(self, obj):
        """The state's label in the active language, not its stored value ("done")."""
        try:
            return BloomFilter.RebuildState(obj.rebuild_state).label
        except ValueError:
            return obj.rebuild_state

    @admin.display(description=_("memory"))
    def memory_display(self, obj):
        # The figure (a family's: estimated from a sample), and under it (quiet, so the
        # column stays narrow) why it is more than one plain bitmap: sub-filters, or counters.
        stats = monitoring.row_stats(obj)
        memory = formatting.human_bytes(stats.memory_bytes if stats else None)
        note = (sub_filters_text(stats) or counters_text(stats)) if stats and not obj.family else ""
        return quiet_html(memory, note)

    @admin.display(description=_("last rebuild"), ordering="last_rebuild_at")
    def last_rebuild_display(self, obj):
        if obj.rebuild_state == BloomFilter.RebuildState.RUNNING:
            total = obj.rebuild_total or 0
            return _("running %(done)s / %(total)s") % {
                "done": formatting.number(obj.rebuild_done),
                "total": formatting.number(total) if total else "?",
            }
        if obj.is_stale or obj.rebuild_state == BloomFilter.RebuildState.FAILED:
            label = _("stale") if obj.is_stale else BloomFilter.RebuildState.FAILED.label
            title, text = obj.rebuild_error, f"{label}: {obj.rebuild_error[:60]}"
        elif obj.last_rebuild_at is None:
            return _("never")
        else:  # how long ago; the moment itself in the tooltip
            when = obj.last_rebuild_at
            title, text = formatting.moment(when), formatting.ago(when)
        return format_html('<span title="{}">{}</span>', title, text)

    # -- detail page -------------------------------------------------------------
    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        # Here, not in change_view: Django has checked the permission and read the row.
        if obj is not None:
            handle = monitoring.filter_handle(obj)
            stats = monitoring.row_stats(obj, refresh=True)
            snapshots = list(obj.snapshots.order_by("-recorded_at")[:200])[::-1]
            validator = None
            if handle is not None and obj.kind == BloomFilter.Kind.UNIQUE:
                try:
                    validator = validator_figures(counters.read_counters(handle))
                except FilterUnavailable:
                    validator = None
            # A family's panel or the Capacity panel: (label, text) pairs, None when unavailable.
            figures = family_figures if obj.family else capacity_figures
            context.update(
                bloom_family=obj.family,
                bloom_unique=obj.kind == BloomFilter.Kind.UNIQUE,
                bloom_figures=figures(stats) if stats else None,
                bloom_unavailable=health_html(monitoring.UNAVAILABLE),
                bloom_counters=validator,
                bloom_chart=mark_safe(monitoring.chart_svg(snapshots, obj.capacity)),
                bloom_projection=monitoring.projection(snapshots, obj.capacity),
                bloom_snapshots=len(snapshots),
            )
        return super().render_change_form(request, context, add, change, form_url, obj)
