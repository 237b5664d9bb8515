#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz corpora (Fuzz/Corpus/<target>/seed-*). libFuzzer grows the
corpora from these; scripts/fuzz merges what it finds back into the committed directories."""
import base64, hashlib, json, os, urllib.parse

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "Corpus")

def write(target, name, data):
    os.makedirs(os.path.join(root, target), exist_ok=True)
    with open(os.path.join(root, target, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

NOW = 1_800_000_000
code = "fuzz-code"
c_hash = b64u(hashlib.sha256(code.encode()).digest()[:16])
nonce = "fuzz-nonce"
claims = {
    "iss": "https://appleid.apple.com", "aud": "com.example.siwa.web", "exp": NOW + 600, "iat": NOW - 10,
    "sub": "001234.0a1b2c3d4e5f67890a1b2c3d4e5f6789.1234", "nonce": nonce, "c_hash": c_hash,
    "email": "jane@privaterelay.appleid.com", "email_verified": "true", "is_private_email": "true",
    "auth_time": NOW - 12, "nonce_supported": True, "real_user_status": 2,
}
user = {"name": {"firstName": "Jane", "lastName": "Appleseed"}, "email": "jane@privaterelay.appleid.com"}

# jwt: first byte odd = claims signed by the trusted key; even = a whole token as sent.
def signed(name, c):
    write("jwt", name, b"\x01" + json.dumps(c, separators=(",", ":"), ensure_ascii=False).encode())
signed("valid", claims)
signed("aud-array", {**claims, "aud": ["com.example.siwa.web"]})
signed("aud-extra", {**claims, "aud": ["com.example.siwa.web", "com.other"]})
signed("nonce-hex", {**claims, "nonce": hashlib.sha256(nonce.encode()).hexdigest()})
signed("no-nonce-unsupported", {k: v for k, v in claims.items() if k != "nonce"} | {"nonce_supported": False})
signed("no-nonce", {k: v for k, v in claims.items() if k != "nonce"})
signed("bools", {**claims, "email_verified": True, "is_private_email": "FALSE", "nonce_supported": "true"})
signed("expired", {**claims, "exp": NOW - 3600})
signed("future-iat", {**claims, "iat": NOW + 3600})
signed("transfer", {**claims, "transfer_sub": "001234.ffff.1234", "org_id": "ORG"})
signed("escapes", {**claims, "email": "j\u00e9\\\"ne@example.com\n"})
write("jwt", "dup-key", b"\x01" + b'{"sub":"a","sub":"b","iss":"https://appleid.apple.com"}')
write("jwt", "numbers", b"\x01" + b'{"exp":1.8e9,"iat":-0.0,"auth_time":1e400,"sub":"x"}')
header = b64u(b'{"alg":"RS256","kid":"FUZZKEY001"}')
payload = b64u(json.dumps(claims).encode())
write("jwt", "token-bad-signature", b"\x00" + f"{header}.{payload}.{b64u(bytes(256))}".encode())
none_header = b64u(b'{"alg":"none"}')
hs_header = b64u(b'{"alg":"HS256","kid":"FUZZKEY001"}')
no_kid_header = b64u(b'{"alg":"RS256"}')
write("jwt", "token-alg-none", b"\x00" + f"{none_header}.{payload}.".encode())
write("jwt", "token-hs256", b"\x00" + f"{hs_header}.{payload}.{b64u(b'x' * 32)}".encode())
write("jwt", "token-no-kid", b"\x00" + f"{no_kid_header}.{payload}.{b64u(bytes(256))}".encode())
write("jwt", "token-four-parts", b"\x00" + f"{header}.{payload}.{payload}.x".encode())

# callback: Apple's form_post bodies and their broken relatives.
token = f"{header}.{payload}.{b64u(bytes(256))}"
def form(pairs):
    return urllib.parse.urlencode(pairs)
write("callback", "first-sign-in", form([("state", "s" * 43), ("code", "c1.0.abc"), ("id_token", token), ("user", json.dumps(user))]))
write("callback", "returning", form([("state", "s" * 43), ("code", "c1.0.abc"), ("id_token", token)]))
write("callback", "cancel", form([("error", "user_cancelled_authorize"), ("state", "s" * 43)]))
write("callback", "duplicate", "state=a&state=b&code=c")
write("callback", "bad-escape", "state=%zz&code=%4")
write("callback", "not-utf8", b"state=%ff%fe&code=\xff")
write("callback", "plus-and-empty", "state=a+b&&code=&=x&user=%7B%7D")
write("callback", "query", "?code=c&state=s&error_description=Denied%20by%20user")

# user: the JSON Apple sends the first time, and shapes it may take.
write("user", "full", json.dumps(user))
write("user", "email-only", '{"email":"x@example.com"}')
write("user", "empty-names", '{"name":{"firstName":"","lastName":"  "},"email":""}')
write("user", "unicode", json.dumps({"name": {"firstName": "\u674e", "lastName": "\u5c0f\u9f99"}}, ensure_ascii=False))
write("user", "extra-keys", '{"name":{"firstName":"A","middleName":"B"},"email":"a@b.c","extra":[1,2,{"x":null}]}')
write("user", "wrong-types", '{"name":"Jane","email":42}')
write("user", "deep", "[" * 64 + "]" * 64)

# request (issue 26): heads as the door's byte path reads them, set against NIO's parser. The first five and http10
# are taken by the byte path; the rest are left to NIO's parser.
CRLF = "\r\n"
def head(*lines, body=""):
    return CRLF.join(lines) + CRLF + CRLF + body
write("request", "get-browser", head("GET /reports/2026?view=full HTTP/1.1", "Host: app.example.com",
    "Accept: text/html,application/xhtml+xml", "Cookie: theme=dark; siwa_session=abc", "Connection: keep-alive"))
write("request", "post-length", head("POST /form HTTP/1.1", "Host: a", "Content-Type: text/plain", "Content-Length: 5", body="hello"))
write("request", "check-forwarded", head("GET /auth/check HTTP/1.1", "Host: siwa", "X-Forwarded-Proto: https",
    "X-Forwarded-Host: wiki.example.com", "X-Forwarded-Uri: /page", "Cookie: siwa_session=abc"))
write("request", "pipelined", head("GET /one HTTP/1.1", "Host: a") + head("GET /two HTTP/1.1", "Host: a"))
write("request", "odd-target", head("GET /a/../b/%2e%2E/%7e{x}|y?q={z}&r=%41 HTTP/1.1", "Host: a"))
write("request", "chunked", head("POST /x HTTP/1.1", "Host: a", "Transfer-Encoding: chunked", body="5\r\nhello\r\n0\r\n\r\n"))
write("request", "two-hosts", head("GET / HTTP/1.1", "Host: a", "Host: b"))
write("request", "bare-lf", "GET / HTTP/1.1\nHost: a\n\n")
write("request", "absolute-form", head("GET http://a/x HTTP/1.1", "Host: a"))
write("request", "http10", head("GET / HTTP/1.0", "Host: a"))
write("request", "obs-fold", head("GET / HTTP/1.1", "Host: a", "X-Folded: one", " two"))
write("request", "cl-te", head("POST / HTTP/1.1", "Host: a", "Content-Length: 4", "Transfer-Encoding: chunked", body="0\r\n\r\n"))
