from django import forms
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User

from django_bloom.validators import BloomUniqueFormMixin, BloomUniqueValidator


class SignupForm(BloomUniqueFormMixin, UserCreationForm):
    """Sign-up whose username and email are checked through Bloom filters first.

    The mixin lets a name the filter says is certainly new skip Django's own two
    queries (``clean_username``'s case-insensitive one, ``validate_unique``'s): a new
    name costs one Redis round trip per field and no database query.
    """

    email = forms.EmailField(
        max_length=254,
        validators=[
            BloomUniqueValidator(
                "emails",
                "auth.User",
                "email",
                "email_ci",
                max_length=254,
                message="An account with this email address already exists.",
            )
        ],
    )

    class Meta(UserCreationForm.Meta):
        model = User
        fields = ("username", "email")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["username"].validators.append(
            BloomUniqueValidator(
                "usernames",
                "auth.User",
                "username",
                "username",
                max_length=150,
                message="This username is taken (letter case and look-alike characters count).",
            )
        )
