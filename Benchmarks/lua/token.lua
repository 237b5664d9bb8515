-- wrk script for Benchmarks/run-provider.sh: POST /oauth2/token, each request the exchange of another authorization
-- code that the script inserted into siwa's store ("benchcode" + the number padded to 34 digits). Thread i of a run
-- takes codes CODE_FIRST + i * CODES_PER_THREAD onwards, so no code is sent twice; a thread that has used up its
-- slice goes on into the next one's (those answers are refused as replays, and counted). Environment: CODE_FIRST,
-- CODES_PER_THREAD, CLIENT_BASIC (base64 of "client_id:client_secret"), REDIRECT_URI (form-encoded).
-- Prints "unexpected: N" (answers other than 200), "sent: N" (codes sent), "overrun: N" (sent past a slice).
tallies = { "unexpected", "sent", "overrun" }
dofile("Benchmarks/lua/count.lua")

-- TOKEN_FORM (optional): the form with "%034d" where the number goes, for another grant (the device flow's polls of
-- approved grants, "benchdevice" + 34 digits); CLIENT_BASIC empty: no Authorization (a public client in the form).
function init(args)
  local per = tonumber(os.getenv("CODES_PER_THREAD"))
  next_code = tonumber(os.getenv("CODE_FIRST")) + id * per
  last_code = next_code + per - 1
  sent, overrun = 0, 0
  headers = { ["Content-Type"] = "application/x-www-form-urlencoded" }
  local basic = os.getenv("CLIENT_BASIC") or ""
  if basic ~= "" then headers["Authorization"] = "Basic " .. basic end
  form = os.getenv("TOKEN_FORM") or ""
  -- The form is a format string: the redirect URI's percent-encoding is doubled so that it stays as it is.
  if form == "" then form = "grant_type=authorization_code&code=benchcode%034d&redirect_uri=" .. os.getenv("REDIRECT_URI"):gsub("%%", "%%%%") end
end

function request()
  if next_code > last_code then overrun = overrun + 1 end
  local body = string.format(form, next_code)
  next_code = next_code + 1
  sent = sent + 1
  return wrk.format("POST", nil, headers, body)
end
