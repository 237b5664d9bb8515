"""Opens more streams at once than siwa allows, on one h2c connection (prior knowledge) to siwa's plain port, before it
has read siwa's SETTINGS (as a gRPC client that opens its calls at once does), and says what became of each.

Every stream is a POST whose body is not sent yet, so that all of them are open at once; after a first read (siwa's
SETTINGS, and its RST_STREAM for each stream it refuses), the bodies of the streams not refused are sent, their
answers read, and one more request is made on the same connection.

Usage: h2_streams.py PORT COUNT PATH
Prints one JSON object: {"max_streams": siwa's SETTINGS_MAX_CONCURRENT_STREAMS, "refused": {stream: error code},
"statuses": {stream: :status}, "goaway": its error code or null, "closed": whether the connection ended, "after": the
:status of the request made after them, or null}.
"""

import json
import socket
import struct
import sys
import time

import hpack

from h2_floods import ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PREFACE, RST_STREAM, SETTINGS, frame


def main():
    port, count, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    encoder, decoder = hpack.Encoder(), hpack.Decoder()
    result = {"max_streams": None, "refused": {}, "statuses": {}, "goaway": None, "closed": False, "after": None}
    burst = PREFACE + frame(SETTINGS, 0, 0)
    streams = [1 + 2 * i for i in range(count)]
    for stream in streams:
        block = encoder.encode([(":method", "POST"), (":scheme", "http"), (":authority", "127.0.0.1:%d" % port), (":path", path),
                                ("content-type", "application/x-www-form-urlencoded")])
        burst += frame(HEADERS, END_HEADERS, stream, block)
    sock.sendall(burst)
    buffer = b""

    def read_until(done, seconds):
        nonlocal buffer
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not done():
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                while len(buffer) < 9 or len(buffer) < 9 + int.from_bytes(buffer[:3], "big"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        result["closed"] = True
                        return
                    buffer += chunk
            except (socket.timeout, TimeoutError):
                return
            except OSError:
                result["closed"] = True
                return
            length = int.from_bytes(buffer[:3], "big")
            kind, flags = buffer[3], buffer[4]
            stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
            payload = buffer[9 : 9 + length]
            buffer = buffer[9 + length :]
            if kind == SETTINGS and not flags & ACK:
                for index in range(0, len(payload), 6):
                    identifier, value = struct.unpack(">HI", payload[index : index + 6])
                    if identifier == 0x3:
                        result["max_streams"] = value
                sock.sendall(frame(SETTINGS, ACK, 0))
            elif kind == RST_STREAM:
                result["refused"][str(stream)] = int.from_bytes(payload[:4], "big")
            elif kind == GOAWAY:
                result["goaway"] = int.from_bytes(payload[4:8], "big")
            elif kind == HEADERS:
                fields = dict((str(name), str(value)) for name, value in decoder.decode(payload))
                if ":status" in fields:
                    result["statuses"].setdefault(str(stream), int(fields[":status"]))

    # siwa's SETTINGS and its refusals.
    read_until(lambda: False, 3)
    open_streams = [s for s in streams if str(s) not in result["refused"]]
    if not result["closed"] and result["goaway"] is None:
        for stream in open_streams:
            sock.sendall(frame(DATA, END_STREAM, stream, b"grant_type=none"))
        read_until(lambda: all(str(s) in result["statuses"] or str(s) in result["refused"] for s in open_streams) or result["goaway"] is not None, 30)
        after = streams[-1] + 2
        block = encoder.encode([(":method", "GET"), (":scheme", "http"), (":authority", "127.0.0.1:%d" % port), (":path", "/healthz")])
        sock.sendall(frame(HEADERS, END_HEADERS | END_STREAM, after, block))
        read_until(lambda: str(after) in result["statuses"] or result["closed"], 10)
        result["after"] = result["statuses"].pop(str(after), None)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
