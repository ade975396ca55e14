from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_bloom", "0002_blocked_layout"),
    ]

    operations = [
        migrations.AddField(
            model_name="bloomfilter",
            name="generation",
            field=models.CharField(blank=True, default="", editable=False, max_length=16),
        ),
    ]
