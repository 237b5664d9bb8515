from django.http import HttpResponse
from django.urls import include, path


def session(request):
    if not request.user.is_authenticated:
        return HttpResponse("signed out", status=401)
    return HttpResponse(f"signed in as {request.user.username} <{request.user.email}>")


urlpatterns = [
    path("accounts/", include("allauth.urls")),
    path("session/", session),
]
