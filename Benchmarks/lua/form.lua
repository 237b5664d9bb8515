-- wrk script for Benchmarks/run-provider.sh's HTTP ceiling: the token request's headers and body (a code exchange of
-- the same size) sent to the hello-world, whose only route is GET / (so the method is GET; Hummingbird reads and
-- drops the body). Environment: CLIENT_BASIC, REDIRECT_URI as for token.lua; answers other than 200 are counted.
dofile("Benchmarks/lua/count.lua")
wrk.method = "GET"
wrk.headers["Authorization"] = "Basic " .. os.getenv("CLIENT_BASIC")
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.body = string.format("grant_type=authorization_code&code=benchcode%034d", 0) .. "&redirect_uri=" .. os.getenv("REDIRECT_URI")
