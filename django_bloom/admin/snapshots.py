"""The FilterSnapshot pages: read-only history of a filter's figures."""

from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from django_bloom.models import FilterSnapshot
from django_bloom.ops import formatting
from django_bloom.ops.admin_support import FIELD_LABELS, AppAdmin


@admin.register(FilterSnapshot)
class FilterSnapshotAdmin(AppAdmin):
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

    @admin.display(description=FIELD_LABELS[FilterSnapshot]["recorded_at"], ordering="recorded_at")
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
