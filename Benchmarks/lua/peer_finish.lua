-- wrk script for the peer: GET one pre-generated allauth finish URL (path?code&state + cookies) per request,
-- each used once. File in env CALLBACKS (from Benchmarks/peer/gen_peer.py), lines "<path>\t<cookie>".
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  local n = tonumber(os.getenv("WRK_THREADS") or "2")
  paths, cookies = {}, {}
  local i = 0
  for line in io.lines(os.getenv("CALLBACKS")) do
    if i % n == id then
      local tab = line:find("\t", 1, true)
      table.insert(paths, line:sub(1, tab - 1))
      table.insert(cookies, line:sub(tab + 1))
    end
    i = i + 1
  end
  idx = 0
  ok, bad = 0, 0
end

function request()
  idx = idx + 1
  if idx > #paths then
    wrk.thread:stop()
    idx = #paths
  end
  return wrk.format("GET", paths[idx], { ["Cookie"] = cookies[idx] })
end

-- A completed sign-in answers 302; anything else (an error page) is counted as failed.
function response(status, headers, body)
  if status == 302 then ok = ok + 1 else bad = bad + 1; if not first_bad then first_bad = status .. " " .. body:sub(1, 160):gsub("%s+", " ") end end
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
