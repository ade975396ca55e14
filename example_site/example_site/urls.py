from accounts import views
from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("", views.home, name="home"),
    path("signup/", views.signup, name="signup"),
    path("signup/done/", views.signup_done, name="signup-done"),
    path("u/<str:username>/", views.profile, name="profile"),
    path("my-ip/", views.my_ip, name="my-ip"),
    path("admin/", admin.site.urls),
]
