"""Calls envoy.service.auth.v3.Authorization/Check on siwa with Python's grpcio, as a gRPC client other than Envoy
would: the CheckRequest's bytes are made by the test (siwa's generated Swift messages) and the CheckResponse's bytes
are given back to it, so no .proto is compiled here.

Usage: grpc_check.py PORT (h2c) | grpc_check.py PORT ROOT NAME (TLS, trusting ROOT, checking NAME)
Reads the request's bytes as hex, a JSON string, on standard input; prints one JSON object: {"code": the gRPC status code's name,
"response": the CheckResponse's bytes as hex, or null}. Given a JSON list of such strings, makes the calls one after the
other on one channel and prints a list of those objects.
"""

import json
import sys

import grpc


def main():
    port = int(sys.argv[1])
    given = json.loads(sys.stdin.read())
    requests = [bytes.fromhex(item) for item in given] if isinstance(given, list) else [bytes.fromhex(given)]
    if len(sys.argv) > 3:
        root, name = sys.argv[2], sys.argv[3]
        credentials = grpc.ssl_channel_credentials(open(root, "rb").read())
        options = (("grpc.ssl_target_name_override", name), ("grpc.default_authority", "%s:%d" % (name, port)))
        channel = grpc.secure_channel("127.0.0.1:%d" % port, credentials, options=options)
    else:
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
    with channel:
        check = channel.unary_unary("/envoy.service.auth.v3.Authorization/Check")
        outcomes = []
        for request in requests:
            try:
                response = check(request, timeout=60)
                outcomes.append({"code": "OK", "response": response.hex()})
            except grpc.RpcError as error:
                outcomes.append({"code": error.code().name, "response": None})
        print(json.dumps(outcomes if isinstance(given, list) else outcomes[0]))


if __name__ == "__main__":
    main()
