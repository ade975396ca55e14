"""The ASGI application of bench/asgi_settings.py (``uvicorn bench.asgi_app:application``)."""

from django.core.asgi import get_asgi_application

application = get_asgi_application()
