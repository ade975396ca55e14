"""Filter metadata and the blocklist's source of truth. No Redis I/O here."""

from __future__ import annotations

import ipaddress
import secrets

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, validate_slug
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from django_bloom.engine import sizing
from django_bloom.engine.format import FORMAT_VERSION
from django_bloom.engine.kinds import Layout, layout_class


def new_seed() -> int:
    """A random 32-bit MurmurHash3 seed, so two filters never share bit patterns."""
    return secrets.randbits(32)


def validate_layout_name(value: str) -> None:
    """A layout row value must name a registered layout (``engine.layouts``)."""
    try:
        layout_class(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class BloomFilter(models.Model):
    class Kind(models.TextChoices):
        GENERIC = "generic", _("generic")
        UNIQUE = "unique", _("unique field")
        BLOCKLIST = "blocklist", _("IP blocklist")

    class RebuildState(models.TextChoices):
        # Not the field's choices (that would be a migration): the values code compares.
        NONE = "", _("never rebuilt")
        RUNNING = "running", _("running")
        DONE = "done", _("done")
        FAILED = "failed", _("failed")

    class Layout(models.TextChoices):
        STANDARD = "standard", _("standard")
        ONE_WORD = "blocked", _("blocked (one 64-bit word per item: faster reads, more memory)")

    name = models.SlugField(
        max_length=100,
        unique=True,
        validators=[validate_slug],
        help_text=_("Letters, digits, '-' and '_' only: it becomes part of Redis keys."),
    )
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.GENERIC)
    capacity = models.PositiveBigIntegerField(validators=[MinValueValidator(1)])
    error_rate = models.FloatField(
        validators=[
            MinValueValidator(sizing.MIN_ERROR_RATE),
            MaxValueValidator(sizing.MAX_ERROR_RATE),
        ]
    )
    num_bits = models.PositiveBigIntegerField(editable=False)
    num_hashes = models.PositiveSmallIntegerField(editable=False)
    seed = models.PositiveBigIntegerField(default=new_seed, editable=False)
    # A name in the layout registry (engine.layouts): not a fixed list of choices, so a
    # new layout is a new file, never a migration. The admin offers the registry's names.
    layout = models.CharField(
        max_length=32, default=Layout.STANDARD, validators=[validate_layout_name]
    )
    # The layout's parameters (growth, slices, segments...), checked by its
    # ``validate_options``; {} for the one-bit layouts.
    options = models.JSONField(default=dict, blank=True, editable=False)
    # A family: one row, many members ("pushed to user 42"), each its own key(s),
    # created on first write; ``member_ttl`` seconds after its last write a member expires.
    family = models.BooleanField(default=False, editable=False)
    member_ttl = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # "murmur3" or "blake2b$<key hex>" (see hashers.py): a secret, never displayed.
    # Rows made before keyed hashing are "murmur3"; create_filter makes keyed ones.
    hasher = models.CharField(max_length=80, default="murmur3", editable=False)
    # Part of the bits key's name; a new one whenever the geometry changes, so a
    # handle holding the old geometry can never write into the new bitmap.
    # "" (rows created before it existed): the key name has no generation part.
    generation = models.CharField(max_length=16, blank=True, default="", editable=False)
    format_version = models.PositiveSmallIntegerField(default=FORMAT_VERSION, editable=False)
    cache_alias = models.CharField(
        max_length=100, default="default", help_text=_("django-redis cache alias.")
    )
    source = models.CharField(
        max_length=200,
        blank=True,
        help_text=_("Bound model field as app_label.Model.field, e.g. auth.User.email."),
    )
    normalizer = models.CharField(
        max_length=200,
        blank=True,
        help_text=_("'username', 'email', 'email_ci', or a dotted path to a callable."),
    )
    encoder = models.CharField(
        max_length=200, blank=True, help_text=_("Dotted path to an item encoder callable.")
    )
    last_rebuild_at = models.DateTimeField(null=True, blank=True, editable=False)
    rebuild_state = models.CharField(
        max_length=16, blank=True, default=RebuildState.NONE, editable=False
    )
    rebuild_done = models.PositiveBigIntegerField(default=0, editable=False)
    rebuild_total = models.PositiveBigIntegerField(null=True, blank=True, editable=False)
    rebuild_error = models.TextField(blank=True, editable=False)
    # Stale = the filter missed a write (an on-commit add Redis refused): readers ask the
    # database until a rebuild that began after the miss has swapped in. Two counters,
    # not a state, so a rebuild clears only the marks it saw when it began.
    stale_marks = models.PositiveBigIntegerField(default=0, editable=False)
    stale_cleared = models.PositiveBigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("Bloom filter")
        verbose_name_plural = _("Bloom filters")

    def __str__(self) -> str:
        return self.name

    def derive_geometry(self) -> None:
        """Set num_bits and num_hashes from capacity and error_rate."""
        self.num_bits, self.num_hashes = self.layout_class().geometry(
            self.capacity, self.error_rate, self.options
        )

    @property
    def bound_source(self) -> str:
        """What the filter is fed from ('' when nothing): its field, or a blocklist's rows."""
        if self.source:
            return self.source
        if self.kind == self.Kind.BLOCKLIST:
            return f"the BlockedEntry rows of list {self.name!r}"
        return ""

    @property
    def is_bound(self) -> bool:
        """Filled from a source of truth (a model field, or the blocklist's rows)."""
        return bool(self.bound_source)

    @property
    def is_stale(self) -> bool:
        """It missed a write since the last rebuild that began after the miss."""
        return self.stale_marks > self.stale_cleared

    def layout_class(self) -> type[Layout]:
        """The engine's class for this row's layout (``engine.layouts`` registry)."""
        return layout_class(self.layout)

    def clean(self) -> None:
        if self.capacity is None or self.error_rate is None:
            return  # the field's own error says what is wrong; do not add a second one
        try:
            sizing.validate_sizing(self.capacity, self.error_rate)
        except (TypeError, ValueError) as exc:
            raise ValidationError(str(exc)) from None

    @classmethod
    def from_db(cls, db, field_names, values, *args, **kwargs):
        # *args/**kwargs: later Django versions pass more (e.g. fetch_mode in 6.1).
        instance = super().from_db(db, field_names, values, *args, **kwargs)
        instance._stored_sizing = instance._sizing()
        return instance

    def save(self, *args, **kwargs) -> None:
        if not self.num_bits or not self.num_hashes or self._sizing_changed():
            self.derive_geometry()
        super().save(*args, **kwargs)
        self._stored_sizing = self._sizing()

    def _sizing(self) -> tuple:
        # __dict__, not attributes: a deferred field must not cost a query here.
        return tuple(self.__dict__.get(name) for name in ("capacity", "error_rate", "layout"))

    def _sizing_changed(self) -> bool:
        """Did capacity, error rate or layout change since the row was loaded or saved?

        Compared with the stored inputs, never re-derived: a later release may
        size new filters differently, and a row's geometry must keep matching
        the bitmap already in Redis.
        """
        stored = getattr(self, "_stored_sizing", None)
        if stored is None:  # built in Python with a geometry given: check it fits the inputs
            expected, _k = self.layout_class().geometry(
                self.capacity, self.error_rate, self.options
            )
            return expected != self.num_bits
        return stored != self._sizing()


class ExpiringQuerySet(models.QuerySet):
    def active(self, now=None):
        now = now or timezone.now()
        return self.filter(models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now))


class NetworkEntry(models.Model):
    """What a blocked and an allowed network share: the network, why, and until when."""

    network = models.CharField(
        max_length=49, help_text=_("Address or CIDR network, IPv4 or IPv6; stored normalised.")
    )
    reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)

    objects = ExpiringQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.network

    @property
    def ip_network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.network)

    def clean(self) -> None:
        if not self.network:
            return  # the field's own error says what is wrong; do not add a second one
        try:
            net = ipaddress.ip_network(self.network.strip(), strict=False)
        except ValueError as exc:
            raise ValidationError({"network": str(exc)}) from None
        self.network = str(net)

    def is_active(self, now=None) -> bool:
        return self.expires_at is None or self.expires_at > (now or timezone.now())


class BlockedEntry(NetworkEntry):
    """One blocked address or network: the truth behind the blocklist filter. ``hits`` and
    ``last_seen_at`` count its refused requests (written in batches, ``ipblock.hits``)."""

    list_name = models.SlugField(max_length=100, default="ip-blocklist", db_index=True)
    cooldown = models.DurationField(
        null=True,
        blank=True,
        help_text=_(
            "Each refused request restarts the expiry: the entry expires after this long "
            "without one (e.g. “1 00:00:00” for a day)."
        ),
    )
    hits = models.PositiveBigIntegerField(default=0, editable=False)
    last_seen_at = models.DateTimeField(null=True, blank=True, editable=False, db_index=True)

    class Meta(NetworkEntry.Meta):
        verbose_name = _("blocked entry")
        verbose_name_plural = _("blocked entries")
        constraints = [
            models.UniqueConstraint(fields=["list_name", "network"], name="bloom_unique_network")
        ]


class AllowedNetwork(NetworkEntry):
    """A network the blocklist never refuses (beside the ``ALLOWLIST`` setting)."""

    class Meta(NetworkEntry.Meta):
        verbose_name = _("allowed network")
        verbose_name_plural = _("allowed networks")
        constraints = [models.UniqueConstraint(fields=["network"], name="bloom_unique_allowed")]


class BlocklistFeed(models.Model):
    """A netset URL imported by ``bloom import-blocklist --url``: what its server said last
    (``ETag``, ``Last-Modified``), so an unchanged feed is not downloaded again."""

    url = models.URLField(max_length=2000)
    list_name = models.SlugField(max_length=100)
    etag = models.CharField(max_length=200, blank=True)
    last_modified = models.CharField(max_length=100, blank=True)
    # The expiry its last import gave (None: none); past it, the feed is downloaded whole.
    expires_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["url", "list_name"], name="bloom_unique_feed")
        ]

    def __str__(self) -> str:
        return f"{self.url} -> {self.list_name}"


class FilterSnapshot(models.Model):
    """A point of a filter's fill history, for the admin trend chart."""

    bloom_filter = models.ForeignKey(
        BloomFilter, on_delete=models.CASCADE, related_name="snapshots"
    )
    recorded_at = models.DateTimeField(default=timezone.now, db_index=True)
    bits_set = models.PositiveBigIntegerField()
    estimated_items = models.FloatField()
    fill_ratio = models.FloatField()
    current_fpr = models.FloatField()
    items_added = models.PositiveBigIntegerField(default=0)
    memory_bytes = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-recorded_at"]
        get_latest_by = "recorded_at"

    def __str__(self) -> str:
        return f"{self.bloom_filter} @ {timezone.localtime(self.recorded_at):%Y-%m-%d %H:%M}"


class BoundKey(models.Model):
    """One row of a bound model: its normalised value's digest (the validator's exact lookup).

    Maintained inside the row's own transaction by the binding's post_save and
    post_delete receivers and backfilled by ``rebuild_from_source``; see
    ``django_bloom.boundkeys``.
    """

    binding = models.CharField(max_length=100, help_text=_("Filter name of the binding."))
    object_pk = models.CharField(max_length=255)
    digest = models.CharField(max_length=32, help_text=_("BLAKE2b-128 of the normalised value."))

    class Meta:
        verbose_name = _("bound key")
        verbose_name_plural = _("bound keys")
        constraints = [
            models.UniqueConstraint(fields=["binding", "object_pk"], name="bloom_boundkey_row")
        ]
        indexes = [models.Index(fields=["binding", "digest"], name="bloom_boundkey_digest")]

    def __str__(self) -> str:
        return f"{self.binding}:{self.object_pk}"


class BoundKeyState(models.Model):
    """Whether a binding's keys cover every row: set by the backfill, cleared by bare values."""

    binding = models.CharField(max_length=100, unique=True)
    source = models.CharField(max_length=200, help_text=_("app_label.model.field, lower case."))
    normalizer = models.CharField(max_length=200, blank=True)
    complete_at = models.DateTimeField(null=True, blank=True)
    revision = models.PositiveBigIntegerField(
        default=0,
        help_text=_(
            "Bumped when keys may have gone incomplete; a backfill that saw "
            "an older revision does not mark them complete."
        ),
    )

    class Meta:
        verbose_name = _("bound key state")
        verbose_name_plural = _("bound key states")

    def __str__(self) -> str:
        return self.binding
