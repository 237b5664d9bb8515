"""A gRPC service and its client (Python's grpcio), for siwa's `--upstream` with `upstream_http2` (issue 36).

The service has no .proto: its methods take and give raw bytes (grpcio's generic handlers), which is all the test
needs to see a unary call, a server-streaming call and the trailers (grpc-status, and metadata of the service's
own) cross siwa.

Usage:
  grpc_echo.py serve PORT                      a service on 127.0.0.1:PORT; prints "ready"
  grpc_echo.py call PORT ROOT NAME [TOKEN]     calls siwa on 127.0.0.1:PORT over TLS (trusting ROOT, checking NAME),
                                               with TOKEN as a bearer when given; prints one JSON object
"""

import json
import sys
from concurrent import futures

import grpc


def serve(port):
    def unary(request, context):
        metadata = dict(context.invocation_metadata())
        # What siwa told the service of the caller, said back in the trailers.
        context.set_trailing_metadata((("x-seen-user", metadata.get("x-auth-request-user", "")), ("x-seen-client", metadata.get("x-auth-request-client", ""))))
        return b"echo:" + request

    def stream(request, context):
        for i in range(int(request or b"3")):
            yield b"part %d" % i

    def missing(request, context):
        # An error answered Trailers-Only: one HEADERS frame, with END_STREAM, carrying grpc-status.
        context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")

    handler = grpc.method_handlers_generic_handler(
        "siwa.Echo", {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
            "Missing": grpc.unary_unary_rpc_method_handler(missing),
        }
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def call(port, root, name, token):
    credentials = grpc.ssl_channel_credentials(open(root, "rb").read())
    options = (("grpc.ssl_target_name_override", name), ("grpc.default_authority", "%s:%d" % (name, port)))
    metadata = (("authorization", "Bearer " + token),) if token else ()
    result = {}
    with grpc.secure_channel("127.0.0.1:%d" % port, credentials, options=options) as channel:
        unary = channel.unary_unary("/siwa.Echo/Unary")
        try:
            answer, outcome = unary.with_call(b"hello", metadata=metadata, timeout=20)
            result["unary"] = answer.decode()
            result["trailers"] = {key: value for key, value in outcome.trailing_metadata()}
            result["code"] = outcome.code().name
        except grpc.RpcError as error:
            result["code"] = error.code().name
            result["details"] = error.details()
        if result.get("code") == "OK":
            parts = channel.unary_stream("/siwa.Echo/Stream")(b"5", metadata=metadata, timeout=20)
            result["stream"] = [part.decode() for part in parts]
            try:
                channel.unary_unary("/siwa.Echo/Missing")(b"", metadata=metadata, timeout=20)
                result["missing"] = "OK"
            except grpc.RpcError as error:
                result["missing"] = error.code().name
                result["missingDetails"] = error.details()
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        call(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
