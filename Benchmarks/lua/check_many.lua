-- wrk script: GET with the session cookie of a random one of the SESSIONS sessions that run-front.sh seeded
-- (cookie value "benchsession" + the number padded to 31 digits, so each request is likely another session).
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  sessions = tonumber(os.getenv("SESSIONS"))
  math.randomseed(os.time() * 97 + id)
end

function request()
  local cookie = string.format("siwa_session=benchsession%031d", math.random(sessions))
  return wrk.format("GET", nil, { ["Cookie"] = cookie })
end
