"""Asks for one path over HTTP/2 with a small flow-control window, as a client short of memory (or Python's h2, at
64 KB) may: the window is opened again only as the answer's DATA arrives, as a well-behaved client does. Says what
came back, so that an answer cut short (a stream reset before its end) is seen.

Usage: h2_window.py PORT SNI CAFILE PATH WINDOW
Prints one JSON object: {"status", "body", "ended": whether the answer ended (END_STREAM), "reset": the stream's
RST_STREAM error code or null}.
"""

import json
import struct
import sys

import h2_floods
from h2_floods import ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS, WINDOW_UPDATE, frame

import hpack


def main():
    port, sni, cafile, path, window = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    connection = h2_floods.Connection(port, sni, cafile, window=window)
    decoder = hpack.Decoder()
    connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, connection.request_block(path)))
    result = {"status": None, "body": b"", "ended": False, "reset": None}
    while True:
        try:
            got = connection.read_frame(30)
        except Exception:
            got = None
        if got is None:
            break
        kind, flags, stream, payload = got
        if kind == SETTINGS and not flags & ACK:
            connection.send(frame(SETTINGS, ACK, 0))
            continue
        if kind == GOAWAY:
            break
        if stream != 1:
            continue
        if kind == HEADERS:
            for name, value in decoder.decode(payload):
                name = name.decode() if isinstance(name, bytes) else name
                if name == ":status":
                    result["status"] = int(value)
        elif kind == DATA:
            result["body"] += payload
            if payload:
                # What was read is given back, to the stream and to the connection.
                for on in (1, 0):
                    connection.send(frame(WINDOW_UPDATE, 0, on, struct.pack(">I", len(payload))))
        elif kind == RST_STREAM:
            result["reset"] = int.from_bytes(payload[:4], "big")
            break
        if flags & END_STREAM and kind in (HEADERS, DATA):
            result["ended"] = True
            break
    result["body"] = result["body"].decode("utf-8", "replace")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
