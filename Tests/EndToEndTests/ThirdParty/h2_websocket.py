"""Opens a WebSocket over HTTP/2 (RFC 8441, extended CONNECT) and talks through it to the WebSocket echo upstream
(`withWebSocketEchoUpstream`): reads its first message (the handshake it saw), sends a text and a binary message and
reads them back, then asks it to close with code 4001 and answers its close.

Usage: h2_websocket.py PORT SNI CAFILE PATH [COOKIE [PROTOCOL [WINDOW]]]  (PROTOCOL: `:protocol`, websocket unless
given; WINDOW: the client's flow-control window, opened again as DATA is read, 65,535 unless given)
The request also claims an identity (`x-auth-request-user: forged`), as a hostile client would.
Prints one JSON object: {"enabled": the server's SETTINGS_ENABLE_CONNECT_PROTOCOL (null when not sent), "status",
"fields": [[name, value], ...], "body": the answer's body when it was not 200, "messages": [{"opcode", "text" or
"hex"}, ...] received, "close_code", "ended": whether the server ended the stream after the close, "reset"}.
"""

import json
import os
import struct
import sys
import time

import h2_floods
from h2_floods import ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS, frame

import hpack

STREAM = 1


def ws_frame(opcode, payload):
    """A client's WebSocket frame (RFC 6455 5.2): final, masked."""
    mask = os.urandom(4)
    head = bytes([0x80 | opcode])
    if len(payload) < 126:
        head += bytes([0x80 | len(payload)])
    elif len(payload) < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_parse(buffer):
    """The server's frames whole at the front of `buffer` (unmasked), and what is left."""
    frames = []
    while len(buffer) >= 2:
        opcode, length, at = buffer[0] & 0x0F, buffer[1] & 0x7F, 2
        if length == 126:
            if len(buffer) < 4:
                break
            length, at = struct.unpack(">H", buffer[2:4])[0], 4
        elif length == 127:
            if len(buffer) < 10:
                break
            length, at = struct.unpack(">Q", buffer[2:10])[0], 10
        if len(buffer) < at + length:
            break
        frames.append((opcode, buffer[at : at + length]))
        buffer = buffer[at + length :]
    return frames, buffer


def main():
    port, sni, cafile, path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    cookie = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else None
    protocol = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else "websocket"
    window = int(sys.argv[7]) if len(sys.argv) > 7 else None
    connection = h2_floods.Connection(port, sni, cafile, window=window)
    decoder = hpack.Decoder()
    result = {"enabled": None, "status": None, "fields": [], "body": "", "messages": [], "close_code": None, "ended": False, "reset": None}
    pending = b""
    deadline = time.monotonic() + 30

    def next_frame():
        while time.monotonic() < deadline:
            try:
                got = connection.read_frame(max(0.05, deadline - time.monotonic()))
            except OSError:
                return None
            if got is None:
                return None
            kind, flags, on, payload = got
            if kind == SETTINGS and not flags & ACK:
                for at in range(0, len(payload) - 5, 6):
                    key, value = struct.unpack(">HI", payload[at : at + 6])
                    if key == 0x8:
                        result["enabled"] = value
                connection.send(frame(SETTINGS, ACK, 0))
                return "settings"
            return got
        return None

    # The server's SETTINGS first: extended CONNECT may be sent only once it said so.
    while next_frame() not in ("settings", None):
        pass
    fields = [(":method", "CONNECT"), (":protocol", protocol), (":scheme", "https"), (":authority", sni), (":path", path),
              ("sec-websocket-version", "13"), ("sec-websocket-protocol", "chat.v9, echo.v2"), ("x-auth-request-user", "forged")]
    if cookie:
        fields.append(("cookie", cookie))
    connection.send(frame(HEADERS, END_HEADERS, STREAM, connection.encoder.encode(fields)))

    sent = []
    body = b""
    while True:
        got = next_frame()
        if got == "settings":
            continue
        if got is None:
            break
        kind, flags, on, payload = got
        if kind == GOAWAY:
            break
        if on != STREAM:
            continue
        if kind == RST_STREAM:
            result["reset"] = struct.unpack(">I", payload[:4])[0]
            break
        if kind == HEADERS:
            headers = decoder.decode(payload)
            for name, value in headers:
                name = name.decode() if isinstance(name, bytes) else name
                value = value.decode() if isinstance(value, bytes) else value
                if name == ":status":
                    result["status"] = int(value)
                else:
                    result["fields"].append([name, value])
        elif kind == DATA:
            if payload:
                # What was read is given back, to the stream and to the connection.
                for stream in (STREAM, 0):
                    connection.send(frame(h2_floods.WINDOW_UPDATE, 0, stream, struct.pack(">I", len(payload))))
            if result["status"] != 200:
                body += payload
            else:
                frames, pending = ws_parse(pending + payload)
                for opcode, data in frames:
                    if opcode == 8:
                        result["close_code"] = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else None
                        connection.send(frame(DATA, 0, STREAM, ws_frame(8, data[:2])))
                        continue
                    entry = {"opcode": opcode}
                    if opcode == 1:
                        entry["text"] = data.decode("utf-8")
                    else:
                        entry["hex"] = data.hex()
                    result["messages"].append(entry)
                # After the handshake's message: a text, then a binary, then the close.
                count = len(result["messages"])
                if count >= 1 and "text" not in sent:
                    sent.append("text")
                    connection.send(frame(DATA, 0, STREAM, ws_frame(1, "hello 李雷".encode())))
                elif count >= 2 and "binary" not in sent:
                    sent.append("binary")
                    connection.send(frame(DATA, 0, STREAM, ws_frame(2, bytes([0, 1, 2, 0xFF]))))
                elif count >= 3 and "close" not in sent:
                    sent.append("close")
                    connection.send(frame(DATA, 0, STREAM, ws_frame(1, b"close:4001")))
        if flags & END_STREAM and kind in (HEADERS, DATA):
            result["ended"] = True
            if result["status"] == 200:
                connection.send(frame(DATA, END_STREAM, STREAM, b""))
            break
    result["body"] = body.decode("utf-8", "replace")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
