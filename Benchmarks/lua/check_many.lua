-- wrk script: GET with the session cookie of a random one of the SESSIONS sessions that run-front.sh seeded
-- (cookie value "benchsession" + the number padded to 31 digits, so each request is likely another session). With
-- PRESENT=bearer, the same value as a native app's bearer token instead (every seeded session is also a native
-- one, via native:com.example.bench): the memory line for live tokens.
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  sessions = tonumber(os.getenv("SESSIONS"))
  bearer = os.getenv("PRESENT") == "bearer"
  math.randomseed(os.time() * 97 + id)
end

function request()
  local value = string.format("benchsession%031d", math.random(sessions))
  if bearer then
    return wrk.format("GET", nil, { ["Authorization"] = "Bearer " .. value })
  end
  return wrk.format("GET", nil, { ["Cookie"] = "siwa_session=" .. value })
end
