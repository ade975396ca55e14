"""Admin pages: capacity monitoring of filters and their snapshots.

Models do no Redis I/O, so everything that touches Redis goes through the
services: creating a filter in the admin creates its key, deleting it deletes
the key, and the figures come from ``monitoring.row_stats``. Importing this
package (Django's admin autodiscovery does) registers every page:

- ``bloom_filters.py``: the BloomFilter list and detail pages (columns, create, delete);
- ``forms.py``: the add form (layout, layout options, family);
- ``actions.py``: the list's actions (recompute stats, rebuild, clear);
- ``snapshots.py``: the read-only FilterSnapshot pages;
- the blocklist's pages live in ``ipblock/admin.py``, shared pieces in
  ``ops/admin_support.py``.
"""

from django_bloom.admin.bloom_filters import BloomFilterAdmin
from django_bloom.admin.snapshots import FilterSnapshotAdmin
from django_bloom.ipblock import admin as blocklist_admin  # noqa: F401  (registers its admin)

__all__ = ["BloomFilterAdmin", "FilterSnapshotAdmin"]
