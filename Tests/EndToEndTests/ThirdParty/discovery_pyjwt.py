"""A Sign in with Apple web client of another family: requests-oauthlib for OAuth, PyJWT for the tokens.

It reads Apple's discovery document for its endpoints and hard-codes Apple's issuer, as many clients do; the
test changes only the discovery URL (APPLE_DISCOVERY_URL) to point at `siwa emulator`. Keys come from PyJWT's
PyJWKClient, which caches the key set for JWKS_LIFESPAN seconds and refetches for an unknown key id at most
once per cooldown. With ROTATE_VIA (the emulator's admin API) it signs in across a key rotation as Apple performs
one: a new key published at least one cache lifetime before it signs, the old one still published after.
Run by EndToEndTests (ThirdPartyClientTests) with the interpreter from SIWA_TEST_PYTHON (scripts/test makes it).
Prints one JSON object on success; exits non-zero, saying why, on any failure.
"""
import json
import os
import sys
import time
import uuid

import jwt
import requests
from requests_oauthlib import OAuth2Session

APPLE_ISSUER = "https://appleid.apple.com"
APPLE_DISCOVERY_URL = os.environ.get("APPLE_DISCOVERY_URL", "https://appleid.apple.com/.well-known/openid-configuration")


class AppleClient:
    def __init__(self):
        self.discovery = requests.get(APPLE_DISCOVERY_URL, timeout=10).json()
        self.client_id = os.environ["CLIENT_ID"]
        self.redirect_uri = os.environ["REDIRECT_URI"]
        self.lifespan = float(os.environ.get("JWKS_LIFESPAN", "300"))
        self.keys = jwt.PyJWKClient(self.discovery["jwks_uri"], cache_jwk_set=True, lifespan=self.lifespan)

    def client_secret(self):
        now = int(time.time())
        return jwt.encode(
            {"iss": os.environ["TEAM_ID"], "iat": now, "exp": now + 3600, "aud": APPLE_ISSUER, "sub": self.client_id},
            os.environ["PRIVATE_KEY_PEM"], algorithm="ES256", headers={"kid": os.environ["KEY_ID"]},
        )

    def verify(self, token, nonce=None):
        key = self.keys.get_signing_key_from_jwt(token)
        claims = jwt.decode(
            token, key.key, algorithms=["RS256"], audience=self.client_id, issuer=APPLE_ISSUER, leeway=60,
            options={"require": ["iss", "aud", "exp", "iat", "sub"]},
        )
        if nonce is not None and claims.get("nonce") != nonce:
            raise SystemExit("the nonce was not echoed")
        return claims

    def sign_in(self, user_sub):
        nonce = uuid.uuid4().hex
        session = OAuth2Session(self.client_id, redirect_uri=self.redirect_uri, scope=["name", "email"])
        # oauthlib's web client asks for response_type=code: Apple then returns the code alone (form_post,
        # since scopes are asked), and the identity token comes from the token endpoint.
        url, state = session.authorization_url(self.discovery["authorization_endpoint"], response_mode="form_post", nonce=nonce)
        # The person consents (the emulator's headless consent stands in for the browser and Apple's page).
        answer = requests.get(url, params={"emulator_user": user_sub, "emulator_email": "hide", "emulator_respond": "json"}, timeout=10)
        answer.raise_for_status()
        returned = answer.json()["fields"]
        if returned.get("state") != state:
            raise SystemExit("state was not returned unchanged")
        if "id_token" in returned:
            raise SystemExit("an id_token came back for response_type=code")
        token = session.fetch_token(
            self.discovery["token_endpoint"], code=returned["code"], include_client_id=True,
            client_secret=self.client_secret(), timeout=10,
        )
        claims = self.verify(token["id_token"], nonce)
        return token["id_token"], claims


def admin(path, body=None):
    answer = requests.post(os.environ["ROTATE_VIA"] + path, json=body, timeout=10)
    answer.raise_for_status()
    return answer.json()


def main():
    client = AppleClient()
    if client.discovery["issuer"] != APPLE_ISSUER:
        raise SystemExit("the discovery document names issuer %r" % client.discovery["issuer"])
    user = os.environ["USER_SUB"]
    first_token, claims = client.sign_in(user)
    kids = [jwt.get_unverified_header(first_token)["kid"]]
    if os.environ.get("ROTATE_VIA"):
        # Published now, signing once every client's cached key set has been refetched.
        lead = int(client.lifespan) + 2
        new_kid = admin("/keys/rotate", {"activate_after_seconds": lead})["kid"]
        token, _ = client.sign_in(user)
        kids.append(jwt.get_unverified_header(token)["kid"])
        time.sleep(lead + 0.5)
        token, claims = client.sign_in(user)
        kids.append(jwt.get_unverified_header(token)["kid"])
        if kids[2] != new_kid or kids[1] != kids[0]:
            raise SystemExit("the keys did not rotate as published-then-active: %r (new %s)" % (kids, new_kid))
        client.verify(first_token)                # a token signed before the rotation still verifies
    print(json.dumps({
        "sub": claims["sub"],
        "email": claims.get("email"),
        "is_private_email": claims.get("is_private_email"),
        "kids": kids,
    }))


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as error:  # report what failed, for the Swift test's message
        print("%s: %s" % (type(error).__name__, error), file=sys.stderr)
        sys.exit(1)
