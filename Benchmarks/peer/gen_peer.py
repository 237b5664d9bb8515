#!/usr/bin/env python3
"""Pre-generate fresh sign-ins for the peer (django-allauth's Apple provider) for the wrk callback line.

Per tuple, with a fresh cookie jar: GET /accounts/apple/login/ (allauth stores state in the Django session,
302 to the emulator), the emulator's headless consent (JSON fields), then POST /accounts/apple/login/callback/
(allauth's form_post receiver: stores id_token/user in its apple session cookie and 302s to .../finish/?code&state).
Writes one line per tuple: <finish path?query>\t<Cookie header>. The wrk line then GETs the finish URL, which is
where allauth does the callback work: client secret, token exchange, key fetch, id_token verification,
user/social account upsert, login (session).

Usage: gen_peer.py PEER_PORT COUNT OUT [--workers N]
"""
import http.client, json, sys, urllib.parse, multiprocessing, os

USER = "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234"


def cookies_from(resp, jar):
    for k, v in resp.getheaders():
        if k.lower() == "set-cookie":
            name, _, rest = v.split(";", 1)[0].partition("=")
            jar[name] = rest


def one(peer, emus):
    jar = {}
    peer.request("GET", "/accounts/apple/login/")
    r = peer.getresponse(); r.read()
    if r.status != 302:
        raise RuntimeError(f"peer login answered {r.status}")
    cookies_from(r, jar)
    u = urllib.parse.urlsplit(r.getheader("Location"))
    if u.netloc not in emus:
        emus[u.netloc] = http.client.HTTPConnection(u.hostname, u.port)
    emu = emus[u.netloc]
    emu.request("GET", u.path + "?" + u.query + "&emulator_user=" + urllib.parse.quote(USER) + "&emulator_respond=json")
    e = emu.getresponse(); body = e.read()
    if e.status != 200:
        raise RuntimeError(f"emulator answered {e.status}: {body[:300]!r}")
    fields = json.loads(body)["fields"]
    peer.request("POST", "/accounts/apple/login/callback/", body=urllib.parse.urlencode(fields),
                 headers={"Content-Type": "application/x-www-form-urlencoded",
                          "Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())})
    r = peer.getresponse(); r.read()
    if r.status != 302:
        raise RuntimeError(f"peer callback answered {r.status}")
    cookies_from(r, jar)
    f = urllib.parse.urlsplit(r.getheader("Location"))
    return f.path + "?" + f.query, "; ".join(f"{k}={v}" for k, v in jar.items())


def worker(args):
    port, count, path = args
    peer = http.client.HTTPConnection("127.0.0.1", port)
    emus = {}
    with open(path, "w") as out:
        for _ in range(count):
            target, cookie = one(peer, emus)
            out.write(target + "\t" + cookie + "\n")
    return path


def main():
    port, count, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 4
    per = [count // workers + (1 if i < count % workers else 0) for i in range(workers)]
    with multiprocessing.Pool(workers) as pool:
        paths = pool.map(worker, [(port, n, f"{out}.part{i}") for i, n in enumerate(per)])
    with open(out, "w") as f:
        for p in paths:
            with open(p) as part:
                f.write(part.read())
            os.remove(p)


if __name__ == "__main__":
    main()
