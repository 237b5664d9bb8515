"""The peer for Benchmarks/run-web.sh: django-allauth's Apple provider, pointed at the siwa emulator.

Environment: PEER_DB (SQLite path), PEER_EMULATOR (emulator base URL, e.g. http://127.0.0.1:9191).
The emulator's built-in web client (Services ID, Team ID, Key ID and its test private key) is used.
"""
import os

BASE_DIR = os.path.dirname(os.path.abspath(__file__))
SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "peersite.urls"
WSGI_APPLICATION = "peersite.wsgi.application"
USE_TZ = True
SITE_ID = 1

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.sites",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.apple",
    "peersite.apps.PeerConfig",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": os.environ.get("PEER_DB", os.path.join(BASE_DIR, "peer.sqlite3")),
    "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
}}
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
LOGIN_REDIRECT_URL = "/session/"
SOCIALACCOUNT_LOGIN_ON_GET = True
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
ACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_PROVIDERS = {
    "apple": {
        "APPS": [{
            "client_id": "com.example.siwa.web",
            "secret": "EMU0KEY001",
            "key": "EMU0TEAM01",
            "settings": {"certificate_key": """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgN5B7ZEbAyO+SPpPA
anDnFaOPoBK2lilDaWu8rjvDL62hRANCAARJpUAcu9TQkZldX4xZfyAd3coCzOWi
GBmCRc/2RbwwwCGUEUCdyhFUvLC7+HHSMzkZPNGziCNMiMeL+QqXO+6i
-----END PRIVATE KEY-----
"""},
        }],
    },
}
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "handlers": {"console": {"class": "logging.StreamHandler"}},
           "root": {"handlers": ["console"], "level": "WARNING"}}
