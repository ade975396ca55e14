# The example site's own tests (accounts/tests.py), run by the main suite through
# tests/project/test_example_site_suite.py. A site using django-bloom lists the plugin here:
pytest_plugins = ["django_bloom.pytest_plugin"]
