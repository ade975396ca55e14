# items_added moved to the filter's counters hash in Redis (ops/counters.py): no thread of
# django-bloom writes to the database any more. Counts of existing rows are not carried
# over (stats() show 0 until the next add or rebuild; the fill-based estimate is unchanged).
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("django_bloom", "0007_layout_options")]

    operations = [migrations.RemoveField(model_name="bloomfilter", name="items_added")]
