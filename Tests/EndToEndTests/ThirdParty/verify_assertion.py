"""Verifies siwa's X-Siwa-Assertion as an upstream app would: PyJWT fetches the key set from siwa's
/.well-known/siwa/jwks.json and checks the ES256 signature, issuer, audience and expiry.
Environment: JWKS_URL, TOKEN, ISSUER, AUDIENCE. Prints the claims as one JSON line."""
import json
import os

import jwt

token = os.environ["TOKEN"]
client = jwt.PyJWKClient(os.environ["JWKS_URL"])
key = client.get_signing_key_from_jwt(token)
claims = jwt.decode(
    token, key.key, algorithms=["ES256"], issuer=os.environ["ISSUER"], audience=os.environ["AUDIENCE"],
    options={"require": ["iss", "aud", "sub", "iat", "exp"]},
)
print(json.dumps(claims))
