from django.contrib.auth.models import User
from django.shortcuts import get_object_or_404, redirect, render

from accounts.forms import SignupForm
from django_bloom import ipblock as blocklist
from django_bloom.guard import bloom_guard


def home(request):
    return render(request, "accounts/home.html", {"users": User.objects.count()})


def signup(request):
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        request.session["signed_up"] = user.username
        return redirect("signup-done")
    return render(request, "accounts/signup.html", {"form": form})


def signup_done(request):
    return render(
        request, "accounts/signup_done.html", {"username": request.session.get("signed_up")}
    )


@bloom_guard("usernames", kwarg="username")
def profile(request, username):
    """A public profile: an unknown username is a 404 without a database query."""
    user = get_object_or_404(User, username=username)
    return render(request, "accounts/profile.html", {"profile": user})


def my_ip(request):
    """Shows what the middleware resolved; ?check=ADDR checks any address."""
    address = request.GET.get("check") or getattr(request, "bloom_client_ip", None)
    decision, error = None, None
    if address:
        try:
            decision = blocklist.check_ip(address)
        except Exception as exc:  # shown to the visitor of the demo, not raised
            error = f"{type(exc).__name__}: {exc}"
    return render(
        request,
        "accounts/my_ip.html",
        {
            "resolved": getattr(request, "bloom_client_ip", None),
            "address": address,
            "decision": decision,
            "error": error,
        },
    )
