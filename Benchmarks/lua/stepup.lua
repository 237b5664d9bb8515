-- wrk script for Benchmarks/run-web.sh, line (h): a browser's navigation to a path whose rule asks for a recent
-- sign-in (max_auth_age), as Traefik's forwardAuth asks siwa, with a session older than that (SESSION_COOKIE).
-- siwa answers 401 with the page that says why (wrk counts it as non-2xx/3xx: every answer should be one).
wrk.method = "GET"
wrk.headers["Cookie"] = os.getenv("SESSION_COOKIE")
wrk.headers["Accept"] = "text/html,application/xhtml+xml"
wrk.headers["Sec-Fetch-Mode"] = "navigate"
wrk.headers["X-Forwarded-Method"] = "GET"
wrk.headers["X-Forwarded-Proto"] = "http"
wrk.headers["X-Forwarded-Host"] = os.getenv("FORWARDED_HOST")
wrk.headers["X-Forwarded-Uri"] = "/billing/invoices?year=2026"
