"""Completes Sign in with Apple's code flow against the emulator with Authlib, a client that is not ours.

Run by AppleIDEmulatorTests (InteropTests) with the interpreter from SIWA_TEST_PYTHON (scripts/test makes it).
Reads its inputs from the environment and prints one JSON object on success; exits non-zero on any failure.
"""
import json
import os
import sys
import time
import uuid
import warnings

import requests

# authlib.jose still works in Authlib 1.x but warns that joserfc replaces it; the warning is not a failure.
warnings.filterwarnings("ignore", message=".*authlib.jose.*deprecated.*")

from authlib.integrations.requests_client import OAuth2Session  # noqa: E402
from authlib.jose import JsonWebKey, jwt  # noqa: E402


def main():
    base = os.environ["EMULATOR_BASE_URL"].rstrip("/")
    client_id = os.environ["CLIENT_ID"]
    team_id = os.environ["TEAM_ID"]
    key_id = os.environ["KEY_ID"]
    private_key = os.environ["PRIVATE_KEY_PEM"]
    redirect_uri = os.environ["REDIRECT_URI"]
    user_sub = os.environ["USER_SUB"]
    state = uuid.uuid4().hex
    nonce = uuid.uuid4().hex

    # 1. Authorization request, consented headlessly (the emulator's documented test parameters).
    answer = requests.get(
        base + "/auth/authorize",
        params={
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "response_type": "code id_token",
            "response_mode": "form_post",
            "scope": "name email",
            "state": state,
            "nonce": nonce,
            "emulator_user": user_sub,
            "emulator_email": "share",
            "emulator_respond": "json",
        },
        timeout=10,
    )
    answer.raise_for_status()
    fields = answer.json()["fields"]
    if fields.get("state") != state:
        raise SystemExit("state was not returned unchanged: %r" % fields.get("state"))
    code = fields["code"]

    # 2. The client secret: an ES256 JWT signed with the team's key, as Apple requires.
    now = int(time.time())
    client_secret = jwt.encode(
        {"alg": "ES256", "kid": key_id},
        {"iss": team_id, "iat": now, "exp": now + 3600, "aud": "https://appleid.apple.com", "sub": client_id},
        private_key,
    ).decode("ascii")

    # 3. Code exchange with Authlib's OAuth2 client; Apple takes the secret in the form body.
    session = OAuth2Session(client_id, client_secret, token_endpoint_auth_method="client_secret_post", redirect_uri=redirect_uri)
    token = session.fetch_token(
        base + "/auth/token", client_secret=client_secret, code=code, redirect_uri=redirect_uri, timeout=10
    )
    for name in ("access_token", "refresh_token", "id_token"):
        if not token.get(name):
            raise SystemExit("the token answer has no %s: %r" % (name, sorted(token)))

    # 4. Verify the identity token with the emulator's JWKS.
    jwks = requests.get(base + "/auth/keys", timeout=10)
    jwks.raise_for_status()
    key_set = JsonWebKey.import_key_set(jwks.json())
    claims = jwt.decode(
        token["id_token"],
        key_set,
        claims_options={
            "iss": {"essential": True, "value": base},
            "aud": {"essential": True, "value": client_id},
            "sub": {"essential": True},
            "nonce": {"essential": True, "value": nonce},
        },
    )
    claims.validate(leeway=60)
    header = json.loads(jwt_header(token["id_token"]))

    print(json.dumps({
        "sub": claims["sub"],
        "email": claims.get("email"),
        "kid": header.get("kid"),
        "token_type": token.get("token_type"),
    }))


def jwt_header(token):
    import base64
    part = token.split(".")[0]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode("utf-8")


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as error:  # report what failed, for the Swift test's message
        print("%s: %s" % (type(error).__name__, error), file=sys.stderr)
        sys.exit(1)
