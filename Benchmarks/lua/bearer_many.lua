-- wrk script: GET with the bearer token of a random one of the SESSIONS native sessions run-front.sh seeded (the
-- token is "benchsession" + the number padded to 31 digits, its session's via native:com.example.bench), so each
-- request is likely another token: the memory line for live tokens.
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  sessions = tonumber(os.getenv("SESSIONS"))
  math.randomseed(os.time() * 89 + id)
end

function request()
  local token = string.format("Bearer benchsession%031d", math.random(sessions))
  return wrk.format("GET", nil, { ["Authorization"] = token })
end
