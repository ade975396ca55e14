"""A sign-up API on Django REST Framework, for tests/unique/test_drf.py (imports DRF)."""

from django.urls import path
from rest_framework import generics, serializers

from django_bloom.contrib.drf import BloomUniqueValidator
from tests.testapp.models import Account


class AccountSerializer(serializers.ModelSerializer):
    # Declared: replaces the UniqueValidator ModelSerializer adds for unique=True.
    email = serializers.EmailField(
        max_length=254,
        validators=[BloomUniqueValidator("emails", Account, normalizer="email_ci")],
    )

    class Meta:
        model = Account
        fields = ["id", "username", "email"]


class Accounts(generics.CreateAPIView):
    queryset = Account.objects.all()
    serializer_class = AccountSerializer
    authentication_classes: list = []
    permission_classes: list = []


class AccountDetail(generics.RetrieveUpdateAPIView):
    queryset = Account.objects.all()
    serializer_class = AccountSerializer
    authentication_classes: list = []
    permission_classes: list = []


urlpatterns = [
    path("api/accounts/", Accounts.as_view()),
    path("api/accounts/<int:pk>/", AccountDetail.as_view()),
]
