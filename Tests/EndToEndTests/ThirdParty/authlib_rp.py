"""An OpenID Connect relying party written with Authlib's Flask client, as its documentation describes one.

It knows its provider only by the discovery document (server_metadata_url): code flow with PKCE S256 and a nonce,
the token endpoint authentication method of TOKEN_ENDPOINT_AUTH_METHOD (client_secret_basic unless told), the
id_token validated by Authlib (signature against jwks_uri, iss, aud, exp, nonce, at_hash), then a userinfo call;
logout through the provider's end_session_endpoint with post_logout_redirect_uri and state.

Started on 127.0.0.1:PORT by TestSupport's withAuthlibRP with the interpreter from SIWA_TEST_PYTHON. Pages:
- GET /              the start page: "Not signed in" and a sign-in link, or the claims of the signed-in person.
- GET /claims        the same as JSON: {"signed_in", "id_token" (claims), "userinfo", "error"}.
- GET /login         to the provider's authorization endpoint; prompt, max_age and login_hint are passed on.
                     A discovery document that cannot be read is a 502 page naming its URL.
- GET /callback      the redirect URI: code exchange, id_token validation, userinfo, then back to /. A provider's
                     error, or a failed check, is a 400 page naming it (and /claims reports it).
- GET /refresh       the refresh_token grant, then userinfo with the new access token; JSON.
- GET /logout        to the provider's end_session_endpoint (id_token_hint, post_logout_redirect_uri, state).
- GET /logged-out    the post-logout redirect URI: checks state, then "Signed out" (a wrong state: 400).
"""
import json
import os
import secrets
import signal
import warnings

# authlib.jose still works in Authlib 1.x but warns that joserfc replaces it; the warning is not a failure.
warnings.filterwarnings("ignore", message=".*authlib.jose.*deprecated.*")

from authlib.common.errors import AuthlibBaseError  # noqa: E402
from authlib.integrations.flask_client import OAuth  # noqa: E402
from flask import Flask, jsonify, redirect, request, session, url_for  # noqa: E402
from markupsafe import escape  # noqa: E402

PORT = int(os.environ["PORT"])
ORIGIN = f"http://127.0.0.1:{PORT}"
REDIRECT_URI = ORIGIN + "/callback"
POST_LOGOUT_REDIRECT_URI = ORIGIN + "/logged-out"
AUTH_METHOD = os.environ.get("TOKEN_ENDPOINT_AUTH_METHOD", "client_secret_basic")
SHOWN_CLAIMS = ("sub", "email", "email_verified", "is_private_email", "name", "given_name", "family_name")

app = Flask(__name__)
app.secret_key = secrets.token_bytes(32)
app.config["SESSION_COOKIE_NAME"] = "authlib_rp_session"

oauth = OAuth(app)
oauth.register(
    name="provider",
    client_id=os.environ["CLIENT_ID"],
    client_secret=os.environ.get("CLIENT_SECRET") or None,
    server_metadata_url=os.environ["DISCOVERY_URL"],
    client_kwargs={
        "scope": os.environ.get("SCOPE", "openid email profile"),
        "code_challenge_method": "S256",
        "token_endpoint_auth_method": AUTH_METHOD,
        "timeout": 10,
    },
)
provider = oauth.provider


def page(title, body, status=200):
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title></head>'
        f"<body><h1>{escape(title)}</h1>{body}</body></html>",
        status,
        {"Content-Type": "text/html; charset=utf-8"},
    )


def claims_list(element_id, claims):
    """The claims a person would look for, strings as they are and other values in JSON (true, 42)."""
    def shown(value):
        return value if isinstance(value, str) else json.dumps(value)

    rows = "".join(
        f'<dt>{escape(name)}</dt><dd id="{element_id}-{escape(name)}">{escape(shown(claims[name]))}</dd>'
        for name in SHOWN_CLAIMS
        if name in claims
    )
    return f'<dl id="{element_id}">{rows}</dl>'


def failure(error, description, status=400):
    """Remembers the failure for /claims and shows it."""
    session["error"] = {"error": error, "error_description": description}
    return page("Sign-in failed", f'<p id="error">{escape(error)}</p><p id="error_description">{escape(description or "")}</p>', status)


@app.get("/")
def start():
    claims = session.get("id_token")
    if not claims:
        return page("Not signed in", f'<p><a id="sign-in" href="{url_for("login")}">Sign in</a></p>')
    userinfo = session.get("userinfo") or {}
    return page(
        f"Signed in as {claims.get('name') or claims['sub']}",
        "<h2>id_token</h2>" + claims_list("id_token", claims)
        + "<h2>userinfo</h2>" + claims_list("userinfo", userinfo)
        + f'<p><a id="sign-out" href="{url_for("logout")}">Sign out</a></p>',
    )


@app.get("/claims")
def claims():
    return jsonify(
        signed_in="id_token" in session,
        id_token=session.get("id_token"),
        userinfo=session.get("userinfo"),
        error=session.get("error"),
    )


@app.get("/login")
def login():
    session.pop("error", None)
    extra = {name: request.args[name] for name in ("prompt", "max_age", "login_hint") if name in request.args}
    try:
        return provider.authorize_redirect(REDIRECT_URI, **extra)
    except Exception as error:  # the discovery document could not be read
        return failure(type(error).__name__, f"{os.environ['DISCOVERY_URL']}: {error}", 502)


@app.get("/callback")
def callback():
    try:
        token = provider.authorize_access_token()
        if "userinfo" not in token:
            return failure("no_id_token", "the token response carried no id_token")
        userinfo = provider.userinfo(token=token)
    except AuthlibBaseError as error:
        return failure(error.error or "error", error.description)
    except Exception as error:  # a failed HTTP call or a claim check: shown, not a 500 without a reason
        return failure(type(error).__name__, str(error))
    session["id_token"] = dict(token["userinfo"])
    session["userinfo"] = dict(userinfo)
    session["raw_id_token"] = token["id_token"]
    session["refresh_token"] = token.get("refresh_token")
    return redirect(url_for("start"))


@app.get("/refresh")
def refresh():
    refresh_token = session.get("refresh_token")
    if not refresh_token:
        return jsonify(refreshed=False, error="no_refresh_token"), 400
    try:
        token = provider.fetch_access_token(grant_type="refresh_token", refresh_token=refresh_token)
        userinfo = provider.userinfo(token=token)
    except AuthlibBaseError as error:
        return jsonify(refreshed=False, error=error.error, error_description=error.description), 400
    except Exception as error:
        return jsonify(refreshed=False, error=type(error).__name__, error_description=str(error)), 400
    session["refresh_token"] = token.get("refresh_token", refresh_token)
    session["userinfo"] = dict(userinfo)
    return jsonify(refreshed=True, rotated=token.get("refresh_token") not in (None, refresh_token), userinfo=dict(userinfo))


@app.get("/logout")
def logout():
    id_token_hint = session.pop("raw_id_token", None)
    for name in ("id_token", "userinfo", "refresh_token", "error"):
        session.pop(name, None)
    return provider.logout_redirect(post_logout_redirect_uri=POST_LOGOUT_REDIRECT_URI, id_token_hint=id_token_hint)


@app.get("/logged-out")
def logged_out():
    try:
        provider.validate_logout_response()
    except AuthlibBaseError as error:
        return page("Sign-out failed", f'<p id="error">{escape(error.description or error.error)}</p>', 400)
    return page("Signed out", f'<p><a id="sign-in" href="{url_for("login")}">Sign in again</a></p>')


if __name__ == "__main__":
    # Started from Swift concurrency, the process inherits a signal mask that blocks SIGTERM, which stops it.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    app.run(host="127.0.0.1", port=PORT, threaded=True, use_reloader=False)
