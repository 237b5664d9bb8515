-- wrk script: POST a 4 KB body with the session cookie given in the env var SESSION_COOKIE ("siwa_session=...").
wrk.method = "POST"
wrk.body = string.rep("0123456789abcdef", 256)
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Cookie"] = os.getenv("SESSION_COOKIE")
