-- For Benchmarks/run-lookups.sh: check_many.lua's requests (a random one of the SESSIONS seeded sessions), each answer
-- other than EXPECT_STATUS counted (count.lua's setup, loaded second, takes the place of check_many.lua's).
dofile("Benchmarks/lua/check_many.lua")
dofile("Benchmarks/lua/count.lua")
