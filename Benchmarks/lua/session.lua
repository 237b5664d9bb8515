-- wrk script: GET /session with the session cookie given in the env var SESSION_COOKIE ("siwa_session=...").
wrk.method = "GET"
wrk.headers["Cookie"] = os.getenv("SESSION_COOKIE")
