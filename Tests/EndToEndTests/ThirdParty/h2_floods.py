"""A raw HTTP/2 client that sends one of the known floods to siwa's HTTPS port and says how the connection ended.

Frames are written by hand (only HPACK comes from the `hpack` package that `h2` brings), so that the client can do
what a well-behaved library refuses to: reset streams as fast as it opens them, make the server reset them (malformed
heads, one after another), never end a header block, grow HPACK's table past what the server allows, flood SETTINGS
and PING, open more streams than the server allows, send a header list larger than it allows, or keep its window
shut.

Usage: h2_floods.py PORT SNI CAFILE FLOOD [PATH]
Prints one JSON object: {"flood", "ended": "goaway"|"closed"|"open", "error_code", "seconds", "sent", "refused", "data",
"statuses" (stream: the :status of its first HEADERS), "reset_codes" (stream: the error code of its RST_STREAM)}.
"""

import json
import os
import socket
import ssl
import struct
import sys
import time

import hpack

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class Connection:
    def __init__(self, port, sni, cafile, window=None, raw=None):
        raw = raw or socket.create_connection(("127.0.0.1", port), timeout=10)
        if cafile == "-":
            # h2c with prior knowledge: the preface on the plain connection.
            self.tls = raw
        else:
            context = ssl.create_default_context(cafile=cafile)
            context.set_alpn_protocols(["h2"])
            self.tls = context.wrap_socket(raw, server_hostname=sni)
            assert self.tls.selected_alpn_protocol() == "h2", self.tls.selected_alpn_protocol()
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.buffer = b""
        self.sni = sni
        settings = b""
        if window is not None:
            settings += struct.pack(">HI", 0x4, window)  # SETTINGS_INITIAL_WINDOW_SIZE
        self.tls.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        self.server_settings = {}

    def send(self, data):
        self.tls.sendall(data)

    def request_block(self, path, extra=()):
        headers = [(":method", "GET"), (":scheme", "https"), (":authority", self.sni), (":path", path)] + list(extra)
        return self.encoder.encode(headers)

    def read_frame(self, timeout):
        self.tls.settimeout(timeout)
        while len(self.buffer) < 9 or len(self.buffer) < 9 + int.from_bytes(self.buffer[:3], "big"):
            chunk = self.tls.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        length = int.from_bytes(self.buffer[:3], "big")
        kind, flags = self.buffer[3], self.buffer[4]
        stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
        payload = self.buffer[9 : 9 + length]
        self.buffer = self.buffer[9 + length :]
        return kind, flags, stream, payload

    def outcome(self, seconds, result, until=None):
        """Reads until GOAWAY or the end, for at most `seconds`, or until `until(result)` holds; answers SETTINGS as a
        client must."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until(result)):
            try:
                got = self.read_frame(max(0.05, deadline - time.monotonic()))
            except (socket.timeout, TimeoutError):
                break
            except (ConnectionError, ssl.SSLError, OSError):
                result["ended"] = result.get("ended") or "closed"
                result["closed"] = True
                return result
            if got is None:
                result["ended"] = result.get("ended") or "closed"
                result["closed"] = True
                return result
            kind, flags, stream, payload = got
            if kind == GOAWAY:
                result["ended"] = "goaway"
                result["error_code"] = int.from_bytes(payload[4:8], "big")
                # Then the connection must end: read on until it does (or the time is up).
            elif kind == RST_STREAM:
                result["refused"] = result.get("refused", 0) + 1
                result.setdefault("reset_streams", []).append(stream)
                result.setdefault("reset_codes", {})[str(stream)] = int.from_bytes(payload[:4], "big")
            elif kind == DATA:
                result["data"] = result.get("data", 0) + len(payload)
            elif kind == HEADERS:
                result["heads"] = result.get("heads", 0) + 1
                result.setdefault("head_streams", []).append(stream)
                # siwa's HEADERS carry no padding nor priority, and end their block.
                try:
                    fields = dict((str(name), str(value)) for name, value in self.decoder.decode(payload))
                except Exception:
                    fields = {}
                if ":status" in fields:
                    result.setdefault("statuses", {}).setdefault(str(stream), int(fields[":status"]))
            elif kind == SETTINGS and not flags & ACK:
                try:
                    self.send(frame(SETTINGS, ACK, 0))
                except OSError:
                    pass
        result.setdefault("ended", "open")
        return result


def stall(port, sni, flood, wait):
    """A client that opens a connection and stops: before its hello (`silent`), or after it (`handshake-stall`: the
    ClientHello made by Python's ssl in memory, sent, and the handshake never finished), or ends its side at once
    (`half-close`: a port check). Says when siwa closed it."""
    started = time.monotonic()
    raw = socket.create_connection(("127.0.0.1", port), timeout=wait)
    if flood == "half-close":
        raw.shutdown(socket.SHUT_WR)
    if flood == "handshake-stall":
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=sni)
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        raw.sendall(outgoing.read())
    result = {"flood": flood, "sent": 1, "ended": "open"}
    try:
        while raw.recv(65536):
            pass
        result["ended"] = "closed"
        result["closed"] = True
    except (socket.timeout, TimeoutError):
        pass
    except OSError:
        result["ended"] = "closed"
        result["closed"] = True
    result["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(result))


def set_up_during_shutdown(port, sni, cafile, flood, marker, wait):
    """A client whose connection is set up while siwa shuts down: it connects, says so (creates the file `marker`,
    its port in it), waits until siwa's listener refuses new connections (its graceful shutdown has begun), then does its handshake (TLS
    with ALPN h2 or http/1.1; none on the plain port, `cafile` "-") and sends one GET of the sign-in page (answered
    on the event loop, from memory). Says the answer's status, its
    `Connection` field (HTTP/1.1), whether siwa said GOAWAY (HTTP/2), and whether siwa then closed the connection."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=wait)
    with open(marker + ".part", "w") as written:
        written.write(str(raw.getsockname()[1]))
    os.rename(marker + ".part", marker)
    connected = time.monotonic()
    deadline = connected + wait
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            time.sleep(0.05)
        except OSError:
            break
    # NIO tells the open connections of the shutdown right after it closes the listener.
    time.sleep(0.5)
    started = time.monotonic()
    result = {"flood": flood, "sent": 1, "refused_after": round(started - connected, 3)}
    try:
        set_up_and_ask(raw, port, sni, cafile, flood, wait, result)
    except (ConnectionError, ssl.SSLError, OSError) as error:
        result["ended"] = "error: " + str(error)
        result["closed"] = True
    result["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(result))


def set_up_and_ask(raw, port, sni, cafile, flood, wait, result):
    if flood == "setup-h2":
        connection = Connection(port, sni, cafile, raw=raw)
        connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, connection.request_block("/")))
        connection.outcome(wait, result)
    else:
        sock = raw
        if cafile != "-":
            context = ssl.create_default_context(cafile=cafile)
            context.set_alpn_protocols(["http/1.1"])
            sock = context.wrap_socket(raw, server_hostname=sni)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: " + sni.encode() + b"\r\n\r\n")
        sock.settimeout(wait)
        received = b""
        result["ended"] = "open"
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    result["ended"] = "closed"
                    result["closed"] = True
                    break
                received += chunk
        except (socket.timeout, TimeoutError):
            pass
        except OSError:
            result["ended"] = "closed"
            result["closed"] = True
        head = received.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        if head and head[0].startswith("HTTP/1.1 "):
            result["statuses"] = {"1": int(head[0].split(" ")[1])}
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "connection":
                result["connection"] = value.strip().lower()


def main():
    port, sni, cafile, flood = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    path = sys.argv[5] if len(sys.argv) > 5 else "/healthz"
    if flood in ("silent", "handshake-stall", "half-close"):
        return stall(port, sni, flood, float(sys.argv[6]) if len(sys.argv) > 6 else 15.0)
    if flood in ("setup-h2", "setup-http1"):
        return set_up_during_shutdown(port, sni, cafile, flood, path, float(sys.argv[6]) if len(sys.argv) > 6 else 15.0)
    started = time.monotonic()
    connection = Connection(port, sni, cafile, window=0 if flood in ("zero-window", "stalled-stream", "stalled-beside-idle") else None)
    result = {"flood": flood, "sent": 0}
    try:
        if flood == "rapid-reset":
            # CVE-2023-44487: a request, at once its reset, on and on.
            for i in range(5000):
                stream = 1 + 2 * i
                connection.send(frame(HEADERS, END_HEADERS | END_STREAM, stream, connection.request_block(path)) + frame(RST_STREAM, 0, stream, struct.pack(">I", 8)))
                result["sent"] += 1
        elif flood == "malformed-heads":
            # MadeYouReset (CVE-2025-8671): requests the server must reset itself (a header named in capitals, malformed in
            # HTTP/2), one after another, so that no reset of the client's own is counted.
            for i in range(5000):
                stream = 1 + 2 * i
                connection.send(frame(HEADERS, END_HEADERS | END_STREAM, stream, connection.request_block(path, [("X-Upper", "1")])))
                result["sent"] += 1
        elif flood == "continuation":
            # A header block that never ends: CONTINUATION after CONTINUATION, none with END_HEADERS.
            block = connection.request_block(path)
            connection.send(frame(HEADERS, END_STREAM, 1, block))
            filler = hpack.Encoder().encode([("x-filler", "a" * 200)])
            for _ in range(20000):
                connection.send(frame(CONTINUATION, 0, 1, filler))
                result["sent"] += 1
        elif flood == "hpack-table":
            # A dynamic table size update far past the 4,096 bytes the server allows (RFC 7541 4.2, 6.3).
            update = bytes([0x3F]) + bytes([0xE1, 0xFF, 0x3F])  # 001xxxxx with a large integer: about 1 MB
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, update + connection.request_block(path)))
            result["sent"] = 1
        elif flood == "settings":
            for _ in range(20000):
                connection.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 0x3, 100)))
                result["sent"] += 1
        elif flood == "ping":
            for i in range(20000):
                connection.send(frame(PING, 0, 0, struct.pack(">Q", i)))
                result["sent"] += 1
        elif flood == "streams":
            # More streams open at once than the server allows: requests whose bodies never end.
            for i in range(1000):
                stream = 1 + 2 * i
                connection.send(frame(HEADERS, END_HEADERS, stream, connection.request_block(path, [("content-type", "text/plain")])))
                result["sent"] += 1
        elif flood == "headers":
            # One header list four times the size allowed, in frames of the allowed size (HEADERS, then CONTINUATION).
            big = [("x-big-%d" % i, "b" * 1000) for i in range(64)]
            block = connection.request_block(path, big)
            pieces = [block[i : i + 16384] for i in range(0, len(block), 16384)]
            for index, piece in enumerate(pieces):
                last = END_HEADERS if index == len(pieces) - 1 else 0
                connection.send(frame(HEADERS if index == 0 else CONTINUATION, (END_STREAM if index == 0 else 0) | last, 1, piece))
                result["sent"] += 1
        elif flood == "zero-window":
            # A window of 0 for every stream, never opened: the answer can never be sent.
            for i in range(4):
                connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, connection.request_block(path)))
                result["sent"] += 1
        elif flood == "stream-errors":
            # Not a flood: errors of single streams, which must end those streams and nothing else. Stream 1 posts a
            # body to a page that answers without reading it, and sends more of it after the answer; stream 3 names a
            # header in capitals (malformed in HTTP/2); stream 5 is a plain GET, answered on the same connection.
            # Each step waits for siwa's answer to the one before (up to the wait given), not for a fixed time: under
            # load an answer may take seconds, and the scenario needs the first answer in before the body goes on.
            wait = float(sys.argv[6]) if len(sys.argv) > 6 else 15.0
            connection.send(frame(HEADERS, END_HEADERS, 1, connection.encoder.encode([(":method", "POST"), (":scheme", "https"), (":authority", connection.sni), (":path", path)])))
            connection.send(frame(DATA, 0, 1, b"x" * 100))
            connection.outcome(wait, result, lambda r: 1 in r.get("head_streams", []))
            connection.send(frame(DATA, END_STREAM, 1, b"y" * 100))
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, connection.request_block(path, [("X-Upper", "1")])))
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 5, connection.request_block(path)))
            result["sent"] = 3
            connection.outcome(wait, result, lambda r: 5 in r.get("head_streams", []) and 3 in r.get("reset_streams", []))
            # Then two seconds more (below), in which siwa must not end the connection.
        elif flood == "idle-pings":
            # Not a flood: a connection without a request, kept busy by a PING every half second (far below the control
            # frame limit). It must still end after client_idle_timeout_ms.
            wait = float(sys.argv[6]) if len(sys.argv) > 6 else 15.0
            while time.monotonic() - started < wait and not result.get("closed"):
                connection.send(frame(PING, 0, 0, struct.pack(">Q", result["sent"])))
                result["sent"] += 1
                connection.outcome(0.5, result)
            if not result.get("closed"):
                result["ended"] = "open"
            elif result.get("ended") != "goaway":
                result["ended"] = "closed"
        elif flood == "shutdown":
            # Not a flood: a POST whose body the page reads to its end, not ended, holds a stream open while siwa shuts
            # down (the test ends its site). siwa must say GOAWAY (NO_ERROR) at once; the client then ends its body,
            # the stream is answered, and the connection ends.
            wait = float(sys.argv[6]) if len(sys.argv) > 6 else 15.0
            head = [(":method", "POST"), (":scheme", "https"), (":authority", connection.sni), (":path", path), ("content-type", "application/json")]
            connection.send(frame(HEADERS, END_HEADERS, 1, connection.encoder.encode(head)) + frame(DATA, 0, 1, b'{"payload": "'))
            result["sent"] = 1
            connection.outcome(wait, result, lambda r: r.get("ended") == "goaway")
            result["goaway_after"] = round(time.monotonic() - started, 3)
            if result.get("ended") == "goaway":
                connection.send(frame(DATA, END_STREAM, 1, b'x"}'))
                connection.outcome(wait, result, lambda r: 1 in r.get("head_streams", []) or r.get("closed"))
        elif flood == "unread-body":
            # Not a flood: a POST whose body siwa's page answers without reading (more DATA frames than the reader
            # buffers), the body not ended. Once answered, the stream must be ended by siwa (RST_STREAM: the rest of the
            # body is not wanted, RFC 9113 8.1), not held open for ever; then a GET on the same connection is answered.
            wait = float(sys.argv[6]) if len(sys.argv) > 6 else 15.0
            head = [(":method", "POST"), (":scheme", "https"), (":authority", connection.sni), (":path", path), ("content-type", "text/plain"), ("content-length", "100000")]
            connection.send(frame(HEADERS, END_HEADERS, 1, connection.encoder.encode(head)))
            # One DATA frame at a time, each read apart: a part each for the reader.
            for _ in range(8):
                time.sleep(0.05)
                connection.send(frame(DATA, 0, 1, b"x" * 100))
            connection.outcome(wait, result, lambda r: 1 in r.get("reset_streams", []))
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, connection.request_block(path)))
            result["sent"] = 2
            connection.outcome(wait, result, lambda r: 3 in r.get("head_streams", []))
        elif flood in ("slow-body", "slow-grpc-body"):
            # Not a flood: a POST that says 100 bytes of body and sends 10, then no more of it, only a WINDOW_UPDATE of
            # one byte on its stream every 300 ms (not the body arriving; empty DATA frames NIO ends as a flood). siwa must answer
            # it 408 after client_body_timeout_ms and end that stream alone (RST_STREAM NO_ERROR after the answer, RFC
            # 9113 8.1); then a GET on the same connection is answered. `slow-grpc-body`: the same as a gRPC call
            # (content-type application/grpc), whose client may well send nothing for long: not ended by siwa within
            # the wait given (the test gives twice the limit).
            wait = float(sys.argv[6]) if len(sys.argv) > 6 else 15.0
            kind = "application/grpc" if flood == "slow-grpc-body" else "application/x-www-form-urlencoded"
            head = [(":method", "POST"), (":scheme", "https"), (":authority", connection.sni), (":path", path),
                    ("content-type", kind), ("content-length", "100")]
            connection.send(frame(HEADERS, END_HEADERS, 1, connection.encoder.encode(head)) + frame(DATA, 0, 1, b"code=abcde"))
            result["sent"] = 1
            while time.monotonic() - started < wait and not result.get("closed") and 1 not in result.get("reset_streams", []):
                connection.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 1)))
                connection.outcome(0.3, result)
            if flood == "slow-grpc-body":
                result["ended"] = "closed" if result.get("closed") else "open"
                result["seconds"] = round(time.monotonic() - started, 3)
                print(json.dumps(result))
                return
            result["first_ended_after"] = round(time.monotonic() - started, 3)
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 3, connection.request_block("/healthz")))
            result["sent"] = 2
            connection.outcome(wait, result, lambda r: 3 in r.get("statuses", {}) or r.get("closed"))
        elif flood == "stalled-stream":
            # Not a flood: every stream's window starts shut (SETTINGS_INITIAL_WINDOW_SIZE 0) and the connection's is
            # opened wide. Stream 1 asks for PATH and its window is never opened; every 300 ms a GET of /healthz on a new
            # stream gets its window opened, so answers keep moving on the connection. siwa must reset stream 1 alone
            # after h2_stall_timeout_ms and keep answering the others on the same connection.
            wait = float(sys.argv[6]) if len(sys.argv) > 6 else 15.0
            connection.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 24)))
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, connection.request_block(path)))
            result["sent"] = 1
            stream = 3
            while time.monotonic() - started < wait and not result.get("closed") and 1 not in result.get("reset_streams", []):
                connection.send(frame(HEADERS, END_HEADERS | END_STREAM, stream, connection.request_block("/healthz"))
                                + frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", 65535)))
                result["sent"] += 1
                stream += 2
                connection.outcome(0.3, result)
            result["first_ended_after"] = round(time.monotonic() - started, 3)
            # One more after the reset, on the same connection.
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, stream, connection.request_block("/healthz"))
                            + frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", 65535)))
            result["last_stream"] = stream
            connection.outcome(wait, result, lambda r: str(stream) in r.get("statuses", {}) or r.get("closed"))
        elif flood == "stalled-beside-idle":
            # Not a flood: as `stalled-stream`, but beside the stalled stream 1 there is only stream 3, a POST whose body
            # the client has not finished (an open stream with nothing to send, as an idle SSE or long poll is), and no
            # other answer moves. siwa must reset stream 1 alone after h2_stall_timeout_ms (a connection with an open
            # stream that is not stalled is not stuck); then a GET on the same connection is answered.
            wait = float(sys.argv[6]) if len(sys.argv) > 6 else 15.0
            connection.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 24)))
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, connection.request_block(path)))
            head = [(":method", "POST"), (":scheme", "https"), (":authority", connection.sni), (":path", "/auth/apple/callback"),
                    ("content-type", "application/x-www-form-urlencoded"), ("content-length", "100")]
            connection.send(frame(HEADERS, END_HEADERS, 3, connection.encoder.encode(head)) + frame(DATA, 0, 3, b"code=abcde"))
            result["sent"] = 2
            connection.outcome(wait, result, lambda r: 1 in r.get("reset_streams", []) or r.get("closed"))
            result["first_ended_after"] = round(time.monotonic() - started, 3)
            connection.send(frame(HEADERS, END_HEADERS | END_STREAM, 5, connection.request_block("/healthz"))
                            + frame(WINDOW_UPDATE, 0, 5, struct.pack(">I", 65535)))
            result["last_stream"] = 5
            connection.outcome(wait, result, lambda r: "5" in r.get("statuses", {}) or r.get("closed"))
        elif flood == "cut-upload":
            # Not a flood: an upload of unknown length that the client resets midway (RST_STREAM CANCEL). What siwa
            # passes on must not end as a whole body.
            head = [(":method", "POST"), (":scheme", "https"), (":authority", connection.sni), (":path", path), ("content-type", "text/plain")]
            connection.send(frame(HEADERS, END_HEADERS, 1, connection.encoder.encode(head)) + frame(DATA, 0, 1, b"x" * 1000))
            time.sleep(0.5)
            connection.send(frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))
            result["sent"] = 1
            connection.outcome(2.0, result)
        else:
            raise SystemExit("unknown flood " + flood)
    except (ConnectionError, ssl.SSLError, OSError):
        result["ended"] = "closed"
        result["closed"] = True
    if "ended" not in result:
        connection.outcome(float(sys.argv[6]) if len(sys.argv) > 6 else 15.0, result)
    else:
        try:
            connection.outcome(2.0, result)
        except Exception:
            pass
    result["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
