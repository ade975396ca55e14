# A filter's layout names a registered layout (no fixed choices), and carries its
# options; families (one row, many member keys) get their flag and member TTL.

from django.db import migrations, models

import django_bloom.models


class Migration(migrations.Migration):
    dependencies = [
        ("django_bloom", "0006_stale_marks"),
    ]

    operations = [
        migrations.AddField(
            model_name="bloomfilter",
            name="family",
            field=models.BooleanField(default=False, editable=False),
        ),
        migrations.AddField(
            model_name="bloomfilter",
            name="member_ttl",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="bloomfilter",
            name="options",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.AlterField(
            model_name="bloomfilter",
            name="layout",
            field=models.CharField(
                default="standard",
                max_length=32,
                validators=[django_bloom.models.validate_layout_name],
            ),
        ),
    ]
