-- wrk script: POST one pre-generated callback (body + binding cookie) per request, each used once.
-- The tuples file (from Benchmarks/web/gen_callbacks.py) is given in the env var CALLBACKS.
-- Thread i of n takes lines i, i+n, i+2n, ...; a thread that runs out stops (wrk then reports the real time).
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  local n = tonumber(os.getenv("WRK_THREADS") or "2")
  bodies, cookies = {}, {}
  local i = 0
  for line in io.lines(os.getenv("CALLBACKS")) do
    if i % n == id then
      local tab = line:find("\t", 1, true)
      table.insert(bodies, line:sub(1, tab - 1))
      table.insert(cookies, line:sub(tab + 1))
    end
    i = i + 1
  end
  idx = 0
  ok, bad = 0, 0
end

function request()
  idx = idx + 1
  if idx > #bodies then
    wrk.thread:stop()
    idx = #bodies  -- re-send the last one while stopping; it answers an error and is counted as such
  end
  return wrk.format("POST", "/auth/apple/callback",
    { ["Content-Type"] = "application/x-www-form-urlencoded", ["Cookie"] = cookies[idx] }, bodies[idx])
end

-- A completed sign-in answers 303; anything else (an error page) is counted as failed.
function response(status, headers, body)
  if status == 303 then ok = ok + 1 else bad = bad + 1; if not first_bad then first_bad = status .. " " .. body:sub(1, 160):gsub("%s+", " ") end end
end

function done(summary, latency, requests)
  local good, failed = 0, 0
  for _, t in ipairs(threads) do
    good = good + (t:get("ok") or 0)
    failed = failed + (t:get("bad") or 0)
    local fb = t:get("first_bad")
    if fb then io.write("FIRST_FAILED " .. fb .. "\n") end
  end
  io.write(string.format("SIGNINS ok=%d failed=%d\n", good, failed))
end
