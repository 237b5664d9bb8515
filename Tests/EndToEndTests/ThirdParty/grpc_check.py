"""Calls envoy.service.auth.v3.Authorization/Check on siwa with Python's grpcio, as a gRPC client other than Envoy
would: the CheckRequest's bytes are made by the test (siwa's generated Swift messages) and the CheckResponse's bytes
are given back to it, so no .proto is compiled here.

Usage: grpc_check.py PORT (h2c) | grpc_check.py PORT ROOT NAME (TLS, trusting ROOT, checking NAME)
Reads the request's bytes as hex, a JSON string, on standard input; prints one JSON object: {"code": the gRPC status code's name,
"response": the CheckResponse's bytes as hex, or null}.
"""

import json
import sys

import grpc


def main():
    port = int(sys.argv[1])
    request = bytes.fromhex(json.loads(sys.stdin.read()))
    if len(sys.argv) > 3:
        root, name = sys.argv[2], sys.argv[3]
        credentials = grpc.ssl_channel_credentials(open(root, "rb").read())
        options = (("grpc.ssl_target_name_override", name), ("grpc.default_authority", "%s:%d" % (name, port)))
        channel = grpc.secure_channel("127.0.0.1:%d" % port, credentials, options=options)
    else:
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
    with channel:
        check = channel.unary_unary("/envoy.service.auth.v3.Authorization/Check")
        try:
            response = check(request, timeout=60)
            print(json.dumps({"code": "OK", "response": response.hex()}))
        except grpc.RpcError as error:
            print(json.dumps({"code": error.code().name, "response": None}))


if __name__ == "__main__":
    main()
