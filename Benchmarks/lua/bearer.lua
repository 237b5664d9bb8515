-- wrk script: GET with the bearer token given in the env var BEARER ("Bearer ..."), as a native app sends its
-- session token.
wrk.method = "GET"
wrk.headers["Authorization"] = os.getenv("BEARER")
