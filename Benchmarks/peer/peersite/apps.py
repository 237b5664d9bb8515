import os
from django.apps import AppConfig


class PeerConfig(AppConfig):
    name = "peersite"

    def ready(self):
        # Point allauth's Apple adapter at the emulator instead of appleid.apple.com: only its three URLs (class
        # attributes) change. The emulator signs with Apple's issuer, so allauth's own verification, which
        # hard-codes https://appleid.apple.com, runs unchanged.
        from allauth.socialaccount.providers.apple import views

        base = os.environ.get("PEER_EMULATOR", "http://127.0.0.1:9191")
        adapter = views.AppleOAuth2Adapter
        adapter.access_token_url = base + "/auth/token"
        adapter.authorize_url = base + "/auth/authorize"
        adapter.public_key_url = base + "/auth/keys"
