"""Admin pages: capacity monitoring of filters and their snapshots.

Models do no Redis I/O, so everything that touches Redis goes through the
services here: creating a filter in the admin creates its key, deleting it
deletes the key, and the figures come from ``monitoring.cached_stats``. The
blocklist's pages live in ``ipblock/admin.py``, shared pieces in ``ops/admin_support.py``.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_bloom import services
from django_bloom.engine.kinds import layout_class, layout_names
from django_bloom.exceptions import FilterNotFound, FilterUnavailable
from django_bloom.ipblock import admin as blocklist_admin  # noqa: F401  (registers its admin)
from django_bloom.models import BloomFilter, FilterSnapshot
from django_bloom.ops import counters, deletion, family_admin, formatting, monitoring
from django_bloom.ops.admin_support import (
    ADMIN_CSS,
    RedisWritesAsErrors,
    WriteFailed,
    bar_html,
    breaker_notes,
    build_locked,
    capacity_figures,
    counters_text,
    filter_handle,
    filter_stats,
    grouped,
    health_html,
    items_text,
    reachable_first,
    start_background_rebuild,
    sub_filters_text,
    unreachable,
    validator_figures,
)


def layout_choices() -> list[tuple[str, str]]:
    """The registered layouts (``engine.layouts``), each with its one-line description."""
    out = []
    for name in layout_names():
        description = layout_class(name).description
        out.append((name, f"{name}: {description}" if description else name))
    return out


# The add form's default error rate is the API's (create_filter's keyword default).
DEFAULT_ERROR_RATE = inspect.signature(services.create_filter).parameters["error_rate"].default


class OptionsField(forms.JSONField):
    """JSON layout options; an empty box (never "null", blanks too) means none."""

    def to_python(self, value):
        if isinstance(value, str) and not value.strip():
            return None
        return super().to_python(value)

    def prepare_value(self, value):
        return "" if value is None else super().prepare_value(value)


class BloomFilterCreateForm(forms.ModelForm):
    layout = forms.TypedChoiceField(choices=layout_choices, initial=BloomFilter.Layout.STANDARD)
    # Not the model's own field names: those are not editable (set once, by create_filter).
    make_family = forms.BooleanField(
        required=False,
        label=_("Filter family"),
        help_text=_(
            "One filter of this capacity and error rate per member (e.g. per user), each "
            "created by its first write."
        ),
    )
    member_ttl_seconds = forms.IntegerField(
        required=False,
        min_value=1,
        label=_("Member expiry (seconds)"),
        help_text=_("A member expires this long after its last write. Empty: never."),
    )
    layout_options = OptionsField(
        required=False,
        label=_("Layout options"),
        help_text=_(
            'JSON, e.g. {"slices": 24, "slice_seconds": 3600} for a rotating filter or '
            '{"growth": 2} for a scalable one. Empty: the layout\'s defaults.'
        ),
    )
    EXTRA_FIELDS = ["layout_options", "make_family", "member_ttl_seconds"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["error_rate"].initial = DEFAULT_ERROR_RATE

    def clean_layout_options(self):
        options = self.cleaned_data.get("layout_options")
        if options is None:  # an empty box (or JSON null): no options
            options = {}
        if not isinstance(options, dict):
            raise forms.ValidationError(_("A JSON object, e.g. {\"slices\": 24}."))
        layout = self.cleaned_data.get("layout") or BloomFilter.Layout.STANDARD
        capacity, error_rate = (self.cleaned_data.get(f) for f in ("capacity", "error_rate"))
        try:
            options = layout_class(layout).validate_options(options)
            if capacity and error_rate:  # valid (their fields' checks): the whole life
                layout_class(layout).geometry(capacity, error_rate, options)
        except (ValueError, TypeError) as exc:
            raise forms.ValidationError(str(exc)) from None
        return options

    def clean(self):
        data = super().clean()
        kind = data.get("kind") or BloomFilter.Kind.GENERIC
        source = data.get("source") or ""
        try:
            services.validate_binding(
                data.get("layout") or BloomFilter.Layout.STANDARD,
                bool(source) or kind == BloomFilter.Kind.BLOCKLIST,
                source or _("its blocklist entries"),
            )
        except ValueError as exc:
            self.add_error("layout", str(exc))
        try:  # a layout the server cannot hold (native without RedisBloom)
            services.validate_server(
                data.get("layout") or BloomFilter.Layout.STANDARD,
                data.get("cache_alias") or services.get_config()["CACHE_ALIAS"],
            )
        except ValueError as exc:
            self.add_error("layout", str(exc))
        except FilterUnavailable:
            pass  # Redis does not answer: saving says so, as for every layout
        try:
            services.validate_family(
                data.get("make_family", False),
                data.get("member_ttl_seconds"),
                data.get("layout") or BloomFilter.Layout.STANDARD,
                data.get("kind") or BloomFilter.Kind.GENERIC,
                data.get("source") or "",
            )
        except (ValueError, TypeError) as exc:
            raise forms.ValidationError(str(exc)) from None
        return data

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
    def changelist_view(self, request, extra_context=None):
        # One PING per cache alias in use first, so the status line above the list
        # shows the circuit breakers as this very page found Redis.
        for alias in set(BloomFilter.objects.values_list("cache_alias", flat=True)):
            services.redis_answers(alias)
        context = {"bloom_breakers": breaker_notes(), **(extra_context or {})}
        return super().changelist_view(request, context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = BloomFilterCreateForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ["num_bits", "num_hashes"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return [*BloomFilterCreateForm.Meta.fields, *BloomFilterCreateForm.EXTRA_FIELDS]
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
        if obj.family:
            return health_html(family_admin.family_health(family_admin.family_stats(obj)))
        return health_html(monitoring.health(filter_stats(obj)))

    @admin.display(description=_("items / capacity"), ordering="capacity")
    def items_display(self, obj):
        if obj.family:
            return family_admin.members_html(family_admin.family_stats(obj))
        stats = filter_stats(obj)
        if stats is None:
            return formatting.DASH
        label = items_text(stats, decimals=0)
        title = _("%(fill)s of the bits set") % {"fill": formatting.percent(stats.fill_ratio)}
        return bar_html(stats.capacity_used, label, title)

    @admin.display(description=_("false positives"))
    def fpr_display(self, obj):
        if obj.family:
            return _("target %(rate)s per member") % {"rate": formatting.one_in(obj.error_rate)}
        stats = filter_stats(obj)
        if stats is None:
            return formatting.DASH
        return format_html(
            '{}<br><span class="bloom-quiet">{}</span>',
            formatting.fpr_words(stats.current_fpr),
            _("target %(rate)s") % {"rate": formatting.one_in(obj.error_rate)},
        )

    @admin.display(description=_("Layout options"))
    def options_display(self, obj):
        """The layout's parameters (slices, growth, segments...), as stored; "-" for none."""
        options = obj.options or {}
        return ", ".join(f"{key}={value}" for key, value in sorted(options.items())) or "-"

    @admin.display(description=_("rebuild state"))
    def rebuild_state_display(self, obj):
        """The state's label in the active language, not its stored value ("done")."""
        try:
            return BloomFilter.RebuildState(obj.rebuild_state).label
        except ValueError:
            return obj.rebuild_state

    @admin.display(description=_("memory"))
    def memory_display(self, obj):
        if obj.family:
            return family_admin.memory_text(family_admin.family_stats(obj))
        # The figure, and under it (quiet, so the column stays narrow) why it is more
        # than one plain bitmap: sub-filters, or counters.
        stats = filter_stats(obj)
        memory = formatting.human_bytes(stats.memory_bytes if stats else None)
        note = (sub_filters_text(stats) or counters_text(stats)) if stats else ""
        if not note:
            return memory
        return format_html('{}<br><span class="bloom-quiet">{}</span>', memory, note)

    @admin.display(description=_("last rebuild"), ordering="last_rebuild_at")
    def last_rebuild_display(self, obj):
        if obj.rebuild_state == BloomFilter.RebuildState.RUNNING:
            total = obj.rebuild_total or 0
            return _("running %(done)s / %(total)s") % {
                "done": formatting.number(obj.rebuild_done),
                "total": formatting.number(total) if total else "?",
            }
        if obj.is_stale or obj.rebuild_state == BloomFilter.RebuildState.FAILED:
            label = _("stale") if obj.is_stale else _("failed")
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
            handle = filter_handle(obj)
            stats = monitoring.cached_stats(handle, refresh=True) if handle else None
            snapshots = list(obj.snapshots.order_by("-recorded_at")[:200])[::-1]
            validator = None
            if handle is not None and obj.kind == BloomFilter.Kind.UNIQUE:
                try:
                    validator = validator_figures(counters.read_counters(handle))
                except FilterUnavailable:
                    validator = None
            if obj.family:
                family = family_admin.family_stats(obj, refresh=True)
                extra_context.update(
                    bloom_family=True,
                    bloom_family_figures=family_admin.family_figures(family) if family else None,
                )
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
        families = [obj.name for obj in queryset if obj.family]
        if families:
            family_admin.forget_family_stats()
            self.message_user(
                request,
                _("Filter families have no snapshots; their figures were refreshed: %(names)s")
                % {"names": ", ".join(families)},
                messages.INFO,
            )
        for obj in queryset:
            if obj.family:
                continue
            handle = filter_handle(obj)
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
            if obj.rebuild_state == BloomFilter.RebuildState.RUNNING and build_locked(obj):
                self.message_user(
                    request,
                    _("%(name)s: a rebuild is already running") % {"name": obj.name},
                    messages.WARNING,
                )
                continue
            if not obj.is_bound:
                self.message_user(
                    request,
                    _("%(name)s: no bound source to rebuild from") % {"name": obj.name},
                    messages.ERROR,
                )
                continue
            if unreachable([obj]):
                self.message_user(
                    request,
                    _("%(name)s was not rebuilt: Redis did not answer.") % {"name": obj.name},
                    messages.ERROR,
                )
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

    @admin.action(description=_("Clear…"), permissions=["rebuild"])
    def clear_filters(self, request, queryset):
        """Asks first. A bound filter is rebuilt from its source, never left empty."""
        objs = list(queryset)
        bound = [obj for obj in objs if obj.is_bound]
        unbound = [obj for obj in objs if not obj.is_bound]
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
                if obj.family:
                    services.get_family(obj.name).clear()
                    family_admin.forget_family_stats()
                else:
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


@admin.register(FilterSnapshot)
class FilterSnapshotAdmin(admin.ModelAdmin):
    list_display = [
        "bloom_filter",
        "recorded_display",
        "items_display",
        "fill_display",
        "fpr_display",
    ]
    list_filter = ["bloom_filter"]
    date_hierarchy = "recorded_at"
    fields = ["bloom_filter", "recorded_display", "items_display", "fill_display", "fpr_display"]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description=_("recorded at"), ordering="recorded_at")
    def recorded_display(self, obj):
        """To the second: snapshots a minute apart or less read apart (as on the chart)."""
        return formatting.moment_at(obj.recorded_at, "second")

    @admin.display(description=_("estimated items"), ordering="estimated_items")
    def items_display(self, obj):
        return formatting.number(obj.estimated_items)

    @admin.display(description=_("bits set"), ordering="fill_ratio")
    def fill_display(self, obj):
        return formatting.percent(obj.fill_ratio)

    @admin.display(description=_("false positives"), ordering="current_fpr")
    def fpr_display(self, obj):
        return formatting.fpr_words(obj.current_fpr)
