#!/usr/bin/env python3
"""Pre-generate fresh sign-in callbacks for the wrk callback benchmark.

For each tuple: GET /auth/apple on siwa (writes a pending authorization, sets the binding cookie, 302 to the
emulator), then GET that authorize URL with the emulator's headless consent
(&emulator_user=...&emulator_respond=json), which answers {"fields": {code, state, id_token, user?}}.
Writes one line per tuple: <form-encoded body>\t<Cookie header value>.
Keep-alive connections (http.client), several worker processes.

Usage: gen_callbacks.py SIWA_PORT COUNT OUT [--workers N] [--session]
  --session: instead, do one full sign-in and print the siwa_session cookie value.
"""
import http.client, json, sys, urllib.parse, multiprocessing, os

USER = "000123.a1b2c3d4e5f60718293a4b5c6d7e8f90.1234"


def one(siwa, emu_conns):
    siwa.request("GET", "/auth/apple")
    r = siwa.getresponse(); r.read()
    if r.status != 302:
        raise RuntimeError(f"/auth/apple answered {r.status}")
    location = r.getheader("Location")
    cookie = None
    for k, v in r.getheaders():
        if k.lower() == "set-cookie" and v.startswith("siwa_binding="):
            cookie = v.split(";", 1)[0]
    u = urllib.parse.urlsplit(location)
    key = u.netloc
    if key not in emu_conns:
        emu_conns[key] = http.client.HTTPConnection(u.hostname, u.port)
    emu = emu_conns[key]
    emu.request("GET", u.path + "?" + u.query + "&emulator_user=" + urllib.parse.quote(USER) + "&emulator_respond=json")
    e = emu.getresponse(); body = e.read()
    if e.status != 200:
        raise RuntimeError(f"emulator answered {e.status}: {body[:200]!r}")
    fields = json.loads(body)["fields"]
    return urllib.parse.urlencode(fields), cookie


def worker(args):
    port, count, path = args
    siwa = http.client.HTTPConnection("127.0.0.1", port)
    emu = {}
    with open(path, "w") as f:
        for _ in range(count):
            body, cookie = one(siwa, emu)
            f.write(body + "\t" + cookie + "\n")
    return path


def main():
    port = int(sys.argv[1])
    if "--session" in sys.argv:
        siwa = http.client.HTTPConnection("127.0.0.1", port)
        body, cookie = one(siwa, {})
        siwa.request("POST", "/auth/apple/callback", body=body,
                     headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie})
        r = siwa.getresponse(); r.read()
        for k, v in r.getheaders():
            if k.lower() == "set-cookie" and v.startswith("siwa_session="):
                print(v.split(";", 1)[0]); return
        raise SystemExit(f"no session cookie (status {r.status})")
    count, out = int(sys.argv[2]), sys.argv[3]
    workers = int(sys.argv[sys.argv.index("--workers") + 1]) if "--workers" in sys.argv else 4
    per = [count // workers + (1 if i < count % workers else 0) for i in range(workers)]
    parts = [(port, n, f"{out}.part{i}") for i, n in enumerate(per)]
    with multiprocessing.Pool(workers) as pool:
        paths = pool.map(worker, parts)
    with open(out, "w") as f:
        for p in paths:
            with open(p) as part:
                f.write(part.read())
            os.remove(p)


if __name__ == "__main__":
    main()
