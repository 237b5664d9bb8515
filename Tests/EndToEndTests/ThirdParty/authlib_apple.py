"""A Sign in with Apple web client written with Authlib, as its documentation and Apple's describe it.

Apple's URLs and issuer are the constants below; the test changes only the URLs (APPLE_BASE_URL) to point at
`siwa emulator`. The issuer stays Apple's: a client that hard-codes it must accept the emulator's tokens.
Run by EndToEndTests (ThirdPartyClientTests) with the interpreter from SIWA_TEST_PYTHON (scripts/test makes it).
Prints one JSON object on success; exits non-zero, saying why, on any failure.
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

APPLE_ISSUER = "https://appleid.apple.com"
APPLE_BASE_URL = os.environ.get("APPLE_BASE_URL", "https://appleid.apple.com").rstrip("/")
APPLE_AUTHORIZE_URL = APPLE_BASE_URL + "/auth/authorize"
APPLE_TOKEN_URL = APPLE_BASE_URL + "/auth/token"
APPLE_KEYS_URL = APPLE_BASE_URL + "/auth/keys"


def client_secret(team_id, key_id, client_id, private_key):
    """The ES256 client secret Apple requires, signed with the team's key."""
    now = int(time.time())
    return jwt.encode(
        {"alg": "ES256", "kid": key_id},
        {"iss": team_id, "iat": now, "exp": now + 3600, "aud": APPLE_ISSUER, "sub": client_id},
        private_key,
    ).decode("ascii")


def main():
    client_id = os.environ["CLIENT_ID"]
    redirect_uri = os.environ["REDIRECT_URI"]
    secret = client_secret(os.environ["TEAM_ID"], os.environ["KEY_ID"], client_id, os.environ["PRIVATE_KEY_PEM"])
    nonce = uuid.uuid4().hex
    session = OAuth2Session(
        client_id, secret, scope="name email", redirect_uri=redirect_uri,
        token_endpoint_auth_method="client_secret_post",
    )

    # 1. The authorization URL, as Authlib builds it, with the form_post mode Apple requires for scopes.
    url, state = session.create_authorization_url(
        APPLE_AUTHORIZE_URL, response_type="code id_token", response_mode="form_post", nonce=nonce
    )
    # 2. The person consents (the emulator's headless consent stands in for the browser and Apple's page).
    answer = requests.get(
        url, params={"emulator_user": os.environ["USER_SUB"], "emulator_email": "share", "emulator_respond": "json"}, timeout=10
    )
    answer.raise_for_status()
    returned = answer.json()["fields"]
    if returned.get("state") != state:
        raise SystemExit("state was not returned unchanged: %r" % returned.get("state"))
    user = json.loads(returned["user"]) if "user" in returned else {}

    # 3. Code exchange with Authlib's OAuth2 client; Apple takes the secret in the form body.
    token = session.fetch_token(APPLE_TOKEN_URL, code=returned["code"], timeout=10)
    for name in ("access_token", "refresh_token", "id_token"):
        if not token.get(name):
            raise SystemExit("the token answer has no %s: %r" % (name, sorted(token)))

    # 4. Both identity tokens verified with Apple's keys and Apple's issuer.
    key_set = JsonWebKey.import_key_set(requests.get(APPLE_KEYS_URL, timeout=10).json())
    options = {
        "iss": {"essential": True, "value": APPLE_ISSUER},
        "aud": {"essential": True, "value": client_id},
        "sub": {"essential": True},
        "nonce": {"essential": True, "value": nonce},
    }
    front = jwt.decode(returned["id_token"], key_set, claims_options=options)
    front.validate(leeway=60)
    claims = jwt.decode(token["id_token"], key_set, claims_options=options)
    claims.validate(leeway=60)
    if front["sub"] != claims["sub"]:
        raise SystemExit("the front-channel and token-endpoint tokens name different users")

    print(json.dumps({
        "sub": claims["sub"],
        "email": claims.get("email"),
        "email_verified": claims.get("email_verified"),
        "first_name": user.get("name", {}).get("firstName"),
        "token_type": token.get("token_type"),
    }))


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as error:  # report what failed, for the Swift test's message
        print("%s: %s" % (type(error).__name__, error), file=sys.stderr)
        sys.exit(1)
