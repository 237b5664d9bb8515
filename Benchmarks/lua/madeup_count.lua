-- For Benchmarks/run-lookups.sh: a made-up session cookie on every request (random digits, never seeded), counting answers other than EXPECT_STATUS.
dofile("Benchmarks/lua/count.lua")
function init(args)
  math.randomseed(os.time() * 131 + id)
end
function request()
  local cookie = string.format("siwa_session=madeup%016d%016d", math.random(0, 9999999999999999), math.random(0, 9999999999999999))
  return wrk.format("GET", nil, { ["Cookie"] = cookie })
end
