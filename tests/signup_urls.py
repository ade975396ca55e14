"""An admin site for tests/unique/test_signup_paths.py: the test models, and ``auth.User``
with the documented add form (docs/validator.md, "The admin's user add form")."""

from django.contrib import admin
from django.contrib.auth import forms as auth_forms
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.urls import path

from django_bloom.validators import BloomUniqueFormMixin, BloomUniqueValidator
from tests.testapp.models import Customer, Member, Seat

# The admin's own add form: AdminUserCreationForm on Django >= 5.1, UserCreationForm before.
AdminAddForm = getattr(auth_forms, "AdminUserCreationForm", auth_forms.UserCreationForm)


class BloomUsernames(BloomUniqueFormMixin):
    """The mixin, and the "usernames" filter's validator on the username field."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["username"].validators.append(
            BloomUniqueValidator("usernames", "auth.User", "username", "username", max_length=150)
        )


class BloomUserAddForm(BloomUsernames, AdminAddForm):
    pass


class BloomUserAdmin(UserAdmin):
    add_form = BloomUserAddForm


site = admin.AdminSite()
site.register([Member, Customer, Seat])
site.register(User, BloomUserAdmin)

urlpatterns = [path("admin/", site.urls)]
