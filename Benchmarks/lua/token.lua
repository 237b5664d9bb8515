-- wrk script for Benchmarks/run-provider.sh: POST /oauth2/token, each request the exchange of another authorization
-- code that the script inserted into siwa's store ("benchcode" + the number padded to 34 digits). Thread i of a run
-- takes codes CODE_FIRST + i * CODES_PER_THREAD onwards, so no code is sent twice; a thread that has used up its
-- slice goes on into the next one's (those answers are refused as replays, and counted). Environment: CODE_FIRST,
-- CODES_PER_THREAD, CLIENT_BASIC (base64 of "client_id:client_secret"), REDIRECT_URI (form-encoded).
-- Prints "unexpected: N" (answers other than 200), "sent: N" (codes sent), "overrun: N" (sent past a slice).
tallies = { "unexpected", "sent", "overrun" }
dofile("Benchmarks/lua/count.lua")

function init(args)
  local per = tonumber(os.getenv("CODES_PER_THREAD"))
  next_code = tonumber(os.getenv("CODE_FIRST")) + id * per
  last_code = next_code + per - 1
  sent, overrun = 0, 0
  headers = {
    ["Authorization"] = "Basic " .. os.getenv("CLIENT_BASIC"),
    ["Content-Type"] = "application/x-www-form-urlencoded",
  }
  tail = "&redirect_uri=" .. os.getenv("REDIRECT_URI")
end

function request()
  if next_code > last_code then overrun = overrun + 1 end
  local body = string.format("grant_type=authorization_code&code=benchcode%034d", next_code) .. tail
  next_code = next_code + 1
  sent = sent + 1
  return wrk.format("POST", nil, headers, body)
end
