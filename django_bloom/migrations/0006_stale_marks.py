from django.db import migrations, models


def stale_state_to_marks(apps, schema_editor):
    """Rows marked with the old rebuild_state="stale" keep being stale."""
    BloomFilter = apps.get_model("django_bloom", "BloomFilter")
    BloomFilter.objects.filter(rebuild_state="stale").update(stale_marks=1, rebuild_state="")


def marks_to_stale_state(apps, schema_editor):
    BloomFilter = apps.get_model("django_bloom", "BloomFilter")
    BloomFilter.objects.filter(stale_marks__gt=models.F("stale_cleared")).update(
        rebuild_state="stale"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_bloom", "0005_keyed_hashing"),
    ]

    operations = [
        migrations.AddField(
            model_name="bloomfilter",
            name="stale_marks",
            field=models.PositiveBigIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="bloomfilter",
            name="stale_cleared",
            field=models.PositiveBigIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(stale_state_to_marks, marks_to_stale_state),
    ]
