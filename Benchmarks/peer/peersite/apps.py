import os
from django.apps import AppConfig


class PeerConfig(AppConfig):
    name = "peersite"

    def ready(self):
        # Point allauth's Apple adapter at the emulator instead of appleid.apple.com (its URLs and issuer are
        # class attributes / a literal); everything else is allauth's own code path.
        from allauth.socialaccount.internal import jwtkit
        from allauth.socialaccount.providers.apple import views, client

        base = os.environ.get("PEER_EMULATOR", "http://127.0.0.1:9191")
        adapter = views.AppleOAuth2Adapter
        adapter.access_token_url = base + "/auth/token"
        adapter.authorize_url = base + "/auth/authorize"
        adapter.public_key_url = base + "/auth/keys"

        def get_verified_identity_data(cls, provider, id_token):
            return jwtkit.verify_and_decode(
                credential=id_token, keys_url=cls.public_key_url, issuer=base,
                audience=provider.get_auds(), lookup_kid=jwtkit.lookup_kid_jwk,
            )
        adapter.get_verified_identity_data = classmethod(get_verified_identity_data)
