"""Sends requests over one HTTP/2 connection exactly as given (any :path, any fields, in their order), one stream
after another, and says what came back on each: what a well-behaved client library would refuse to send (a :path
with a blank, a field value with a CR, a `Connection` field) is sent as it is, so that siwa's reading of it is seen.

A request after which siwa ended the connection (GOAWAY, or a close) says `closed`; the next goes on a new one.

Usage: h2_requests.py PORT SNI CAFILE [WINDOW] < requests.json  (WINDOW: the client's flow-control window, 65,535
unless given; what is read is given back to the stream and to the connection, as a well-behaved client does; CAFILE
`-`: h2c with prior knowledge, no TLS)
Each request: {"method", "path", "authority" (optional), "fields": [[name, value], ...], "body": text or null,
"body_hex": the body's bytes as hex instead, "split": true to send the body in two DATA frames, "pause_ms": how long to
wait between them, "head": the whole head instead (pseudo-header fields included, in its order), "trailers":
[[name, value], ...] sent after the body}. Prints one JSON list, one result per request: {"status", "fields":
[[name, value], ...], "body", "body_hex", "reset": error code or null, "closed": whether the connection ended, "goaway":
its error code}. Trailers come after the head's fields in "fields".
"""

import json
import struct
import sys
import time

import h2_floods
from h2_floods import DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS, ACK, frame

import hpack


def main():
    port, sni, cafile = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    window = int(sys.argv[4]) if len(sys.argv) > 4 else None
    requests = json.load(sys.stdin)
    results = []
    closed = True
    for request in requests:
        if closed:
            connection = h2_floods.Connection(port, sni, cafile, window=window)
            decoder = hpack.Decoder()
            decoder.max_allowed_table_size = 65536
            stream = 1
            closed = False
        if request.get("head") is not None:
            # The whole head as given, pseudo-header fields included, in its order.
            fields = [tuple(pair) for pair in request["head"]]
        else:
            fields = [(":method", request["method"]), (":scheme", "https"), (":authority", request.get("authority", sni)), (":path", request["path"])]
            fields += [tuple(pair) for pair in request.get("fields", [])]
        trailers = request.get("trailers")
        # Encoded without Huffman or indexing checks: the bytes as given.
        block = connection.encoder.encode(fields)
        body = request.get("body")
        if request.get("body_hex") is not None:
            body = bytes.fromhex(request["body_hex"])
        connection.send(frame(HEADERS, END_HEADERS | (END_STREAM if body is None and trailers is None else 0), stream, block))
        if body is not None:
            data = body if isinstance(body, bytes) else body.encode()
            if request.get("split") and len(data) > 1:
                connection.send(frame(DATA, 0, stream, data[: len(data) // 2]))
                data = data[len(data) // 2 :]
                if request.get("pause_ms"):
                    time.sleep(request["pause_ms"] / 1000)
            connection.send(frame(DATA, END_STREAM if trailers is None else 0, stream, data))
        if trailers is not None:
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, stream, connection.encoder.encode([tuple(pair) for pair in trailers])))
        result = {"status": None, "fields": [], "body": b"", "reset": None, "closed": False}
        while True:
            try:
                got = connection.read_frame(30)
            except Exception:
                got = None
            if got is None:
                result["closed"] = closed = True
                break
            kind, flags, on, payload = got
            if kind == SETTINGS and not flags & ACK:
                connection.send(frame(SETTINGS, ACK, 0))
                continue
            if kind == GOAWAY:
                result["closed"] = closed = True
                result["goaway"] = int.from_bytes(payload[4:8], "big")
                break
            if on != stream:
                continue
            if kind == HEADERS:
                for name, value in decoder.decode(payload):
                    name = name.decode() if isinstance(name, bytes) else name
                    value = value.decode() if isinstance(value, bytes) else value
                    if name == ":status":
                        result["status"] = int(value)
                    else:
                        result["fields"].append([name, value])
            elif kind == DATA:
                result["body"] += payload
                if payload:
                    for on_stream in ((0,) if flags & END_STREAM else (stream, 0)):
                        connection.send(frame(h2_floods.WINDOW_UPDATE, 0, on_stream, struct.pack(">I", len(payload))))
            elif kind == RST_STREAM:
                result["reset"] = int.from_bytes(payload[:4], "big")
                break
            if flags & END_STREAM and kind in (HEADERS, DATA):
                break
        result["body_hex"] = result["body"].hex()
        result["body"] = result["body"].decode("utf-8", "replace")
        results.append(result)
        stream += 2
    print(json.dumps(results))


if __name__ == "__main__":
    main()
