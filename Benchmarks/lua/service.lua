-- wrk script for Benchmarks/run-provider.sh: POST /oauth2/token with grant_type=client_credentials, the service's
-- client_id and secret by Basic (CLIENT_BASIC): every request a new token naming the service, stored and audited.
wrk.method = "POST"
wrk.headers["Authorization"] = "Basic " .. os.getenv("CLIENT_BASIC")
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.body = "grant_type=client_credentials"
