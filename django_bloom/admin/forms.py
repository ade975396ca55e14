"""The BloomFilter add form: layout, layout options, family; checked before anything is written."""

from __future__ import annotations

import inspect

from django import forms
from django.forms.fields import InvalidJSONInput
from django.utils.translation import gettext_lazy as _

from django_bloom import services
from django_bloom.engine.kinds import layout_choices, layout_class
from django_bloom.engine.kinds.base import check_options_shape
from django_bloom.exceptions import FilterUnavailable
from django_bloom.models import BloomFilter

# The add form's default error rate is the API's (create_filter's keyword default).
DEFAULT_ERROR_RATE = inspect.signature(services.create_filter).parameters["error_rate"].default


class OptionsField(forms.JSONField):
    """JSON layout options; an empty box (never "null", blanks too) means none."""

    def to_python(self, value):
        if isinstance(value, str) and not value.strip():
            return None
        try:
            return super().to_python(value)
        except (RecursionError, ValueError):  # nested 100,000 deep, a 5,000-digit number
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid") from None

    def bound_data(self, data, initial):  # the form shown again: as typed
        try:
            return super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return InvalidJSONInput(data)

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
            options = layout_class(layout).validate_options(check_options_shape(options))
            if capacity and error_rate:  # valid (their fields' checks): the whole life, size
                services.validate_size(layout, capacity, error_rate, options)
        except (ValueError, TypeError) as exc:
            raise forms.ValidationError(str(exc)) from None
        return options

    def clean(self):
        data = super().clean()
        layout = data.get("layout") or BloomFilter.Layout.STANDARD
        kind = data.get("kind") or BloomFilter.Kind.GENERIC
        source = data.get("source") or ""
        try:
            services.validate_binding(
                layout,
                bool(source) or kind == BloomFilter.Kind.BLOCKLIST,
                source or _("its blocklist entries"),
            )
        except ValueError as exc:
            self.add_error("layout", str(exc))
        try:  # a layout the server cannot hold (native without RedisBloom)
            services.validate_server(
                layout, data.get("cache_alias") or services.get_config()["CACHE_ALIAS"]
            )
        except ValueError as exc:
            self.add_error("layout", str(exc))
        except FilterUnavailable:
            pass  # Redis does not answer: saving says so, as for every layout
        try:
            services.validate_family(
                data.get("make_family", False), data.get("member_ttl_seconds"), layout, kind, source
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
