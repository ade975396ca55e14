from django.db import migrations, models


class Migration(migrations.Migration):
    """Existing filters keep MurmurHash3 (their Redis bits depend on it)."""

    dependencies = [
        ("django_bloom", "0004_boundkey"),
    ]

    operations = [
        migrations.AddField(
            model_name="bloomfilter",
            name="hasher",
            field=models.CharField(default="murmur3", editable=False, max_length=80),
        ),
    ]
