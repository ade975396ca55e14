"""The blocklist's admin: entries (add, edit, expire, delete; their hits and last seen) and
the netset import; the allowlist's networks. Every write goes through ``entries`` (the
filter, the caches, the signals); Django's own views check permission before any work."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers, widgets
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_bloom.exceptions import FilterUnavailable, NotABlocklist
from django_bloom.ipblock import entries, service
from django_bloom.models import AllowedNetwork, BlockedEntry
from django_bloom.ops import formatting
from django_bloom.ops.admin_support import AppAdmin, admin_page


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


# Worded when a form is shown, so it names the time zone active then.
EXPIRY_HELP = lazy(expiry_help, str)()


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
        help_text=EXPIRY_HELP,
    )


class NetworkForm(forms.ModelForm):
    """A network normalised (or refused) as ``block``/``allow`` would; a future expiry."""

    def clean_network(self):
        from django_bloom.ipblock import ip as iplib

        try:
            return iplib.normalize_network(self.cleaned_data["network"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_expires_at(self):
        value = self.cleaned_data["expires_at"]
        if self.instance.pk and "expires_at" not in self.changed_data:
            return value  # an expired entry keeps its date while its reason is edited
        return future_expiry(value)


class BlockedEntryForm(NetworkForm):
    class Meta:
        model = BlockedEntry
        fields = ["network", "reason", "expires_at", "cooldown", "list_name"]
        help_texts = {"expires_at": EXPIRY_HELP}

    def clean_list_name(self):
        """Only a blocklist filter's name (or a new one): never another filter's."""
        name = self.cleaned_data["list_name"]
        try:
            return service.refuse_foreign_list(name)
        except NotABlocklist:
            raise forms.ValidationError(
                _(
                    "“%(name)s” names a filter that is not a blocklist (another kind, a "
                    "family, or a bound field's): entries may only go into a blocklist."
                )
                % {"name": name}
            ) from None


class AllowedNetworkForm(NetworkForm):
    class Meta:
        model = AllowedNetwork
        fields = ["network", "reason", "expires_at"]
        help_texts = {"expires_at": EXPIRY_HELP}


class NetworkAdmin(AppAdmin):
    """What the blocked and the allowed networks' pages share."""

    list_filter = [ActiveFilter]
    search_fields = ["network", "reason"]

    @admin.display(description=_("active"), boolean=True)
    def active_display(self, obj):
        return obj.is_active()

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(AllowedNetwork)
class AllowedNetworkAdmin(NetworkAdmin):
    """Networks never refused: read before the blocklist, beside the ALLOWLIST setting."""

    form = AllowedNetworkForm
    list_display = ["network", "reason", "created_at", "expires_at", "active_display"]

    def save_model(self, request, obj, form, change):
        obj.save()  # the form normalised the network and checked it is not listed twice
        entries.after_write()  # this process's caches, then other processes' (the filter)

    def delete_model(self, request, obj):
        entries.disallow(obj.network)


@admin.register(BlockedEntry)
class BlockedEntryAdmin(NetworkAdmin):
    form = BlockedEntryForm
    list_display = [
        "network", "reason", "list_name", "hits", "last_seen_at", "created_at", "expires_at",
        "active_display",
    ]  # fmt: skip
    list_filter = [ActiveFilter, "list_name"]
    readonly_fields = ["hits", "last_seen_at"]
    actions = ["expire_now"]
    change_list_template = "admin/django_bloom/blockedentry/change_list.html"

    def save_model(self, request, obj, form, change):
        # block() writes the row and the filter together (the filter first: a hit
        # is confirmed against the row, so an extra filter item is harmless). An
        # edit that moves the entry blocks the new network, then unblocks the old.
        if not obj.is_active():  # expired (kept as a record): blocks nothing, writes no filter
            obj.save()
            return
        entry = entries.block(
            obj.network, obj.reason, obj.expires_at, obj.list_name, cooldown=obj.cooldown
        )
        if change:
            old = (form.initial.get("network"), form.initial.get("list_name"))
            if old != (entry.network, entry.list_name):
                entries.unblock(*old)
        obj.pk = entry.pk
        obj.refresh_from_db()

    def delete_model(self, request, obj):
        entries.unblock(obj.network, obj.list_name)

    @admin.action(description=_("Expire now (stop blocking)"), permissions=["change"])
    def expire_now(self, request, queryset):
        count = entries.expire(queryset)
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
                result = entries.import_netset(
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
        return admin_page(
            self,
            request,
            "admin/django_bloom/blockedentry/import.html",
            adminform=helpers.AdminForm(form, fieldsets, {}),
            form=form,
            errors=helpers.AdminErrorList(form, []),
            media=self.media + form.media,
            result=result,
            title=_("Import a blocklist (netset)"),
        )
