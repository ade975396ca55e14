"""Running filters: stats and health, verify/repair, formatting for the admin and the
command.

The validator's counters and the past-capacity warning moved down to the handles floor
(``django_bloom/counters.py``, ``django_bloom/capacity.py``: a handle counts and watches
its own adds); ``django_bloom.ops.counters`` and ``django_bloom.ops.capacity`` stay
importable, as the same modules."""

import sys

from django_bloom import capacity, counters

sys.modules[f"{__name__}.capacity"] = capacity
sys.modules[f"{__name__}.counters"] = counters
