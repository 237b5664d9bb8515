-- Loaded by the wrk scripts of Benchmarks/run-provider.sh (dofile, from the repository's root): counts every answer
-- whose status is not EXPECT_STATUS (200 unless set; a 302 to a sign-in page is not a success) and prints, at the
-- end, "NAME: N" for each per-thread counter named in `tallies` ("unexpected" unless the script names more).
local threads = {}
local counter = 0
tallies = tallies or { "unexpected" }
expected = tonumber(os.getenv("EXPECT_STATUS") or "200")
unexpected = 0

function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end

function response(status, headers, body)
  if status ~= expected then unexpected = unexpected + 1 end
end

function done(summary, latency, requests)
  for _, name in ipairs(tallies) do
    local total = 0
    for _, thread in ipairs(threads) do total = total + (thread:get(name) or 0) end
    io.write(string.format("%s: %d\n", name, total))
  end
end
