-- wrk script for Benchmarks/run-provider.sh: GET with the cookie in SESSION_COOKIE ("name=value"), counting answers
-- other than 200 (see count.lua).
dofile("Benchmarks/lua/count.lua")
wrk.headers["Cookie"] = os.getenv("SESSION_COOKIE")
