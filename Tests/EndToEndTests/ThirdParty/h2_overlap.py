"""Sends GET requests on one HTTP/2 connection, each at its own time, without waiting for the answers of the others,
and says when each was answered: streams that are under way together, as a browser's are.

Usage: h2_overlap.py PORT SNI CAFILE SECONDS < requests.json
Each request: {"path", "after": seconds from the first request's start}. SECONDS: how long to wait for the answers.
Prints one JSON list, one result per request, in order: {"status" (null when none came), "seconds": from the
request's own start to the end of its answer, "reset": error code or null}.
"""

import json
import socket
import sys
import time

import h2_floods
from h2_floods import ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS, frame

import hpack


def main():
    port, sni, cafile, seconds = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    requests = json.load(sys.stdin)
    connection = h2_floods.Connection(port, sni, cafile)
    decoder = hpack.Decoder()
    results = [{"status": None, "seconds": None, "reset": None} for _ in requests]
    started, streams = {}, {}
    begin = time.monotonic()
    pending = sorted(range(len(requests)), key=lambda i: requests[i]["after"])
    deadline = begin + requests[pending[-1]]["after"] + seconds if pending else begin
    done = 0
    while done < len(requests) and time.monotonic() < deadline:
        now = time.monotonic()
        while pending and begin + requests[pending[0]]["after"] <= now:
            index = pending.pop(0)
            stream = 1 + 2 * len(streams)
            streams[stream] = index
            started[index] = time.monotonic()
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, stream, connection.request_block(requests[index]["path"])))
        wait = deadline - time.monotonic()
        if pending:
            wait = min(wait, begin + requests[pending[0]]["after"] - time.monotonic())
        try:
            got = connection.read_frame(max(0.01, wait))
        except (socket.timeout, TimeoutError):
            continue
        if got is None:
            break
        kind, flags, on, payload = got
        if kind == SETTINGS and not flags & ACK:
            connection.send(frame(SETTINGS, ACK, 0))
            continue
        if kind == GOAWAY:
            break
        index = streams.get(on)
        if index is None:
            continue
        result = results[index]
        if kind == HEADERS:
            for name, value in decoder.decode(payload):
                name = name.decode() if isinstance(name, bytes) else name
                if name == ":status":
                    result["status"] = int(value)
        elif kind == DATA and payload:
            connection.send(frame(h2_floods.WINDOW_UPDATE, 0, 0, len(payload).to_bytes(4, "big")))
        if kind == RST_STREAM:
            result["reset"] = int.from_bytes(payload[:4], "big")
        if kind == RST_STREAM or (flags & END_STREAM and kind in (HEADERS, DATA)):
            result["seconds"] = time.monotonic() - started[index]
            done += 1
    print(json.dumps(results))


if __name__ == "__main__":
    main()
