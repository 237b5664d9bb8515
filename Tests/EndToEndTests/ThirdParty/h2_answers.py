"""An HTTP/2 upstream with prior knowledge (h2c, Python's h2) that answers as a file of generated answers says, for
siwa's `upstream_http2` in the answer differential (AnswerDifferentialTests): the same answers an HTTP/1.1 upstream
gives there, carried in HTTP/2's frames.

Usage:
  h2_answers.py PORT ANSWERS.json    serves 127.0.0.1:PORT; prints "ready"

ANSWERS.json: {"/gen/N": {"interim": [[status, [[name, value], ...]], ...], "status": S, "fields": [[name, value], ...],
"body": "text", "trailers": [[name, value], ...]}}. A path not in the file: 404. A HEAD gets the fields and no DATA.
Fields are sent as written (lower-cased, as HTTP/2 requires), without h2's own checks of them, so that an answer may
carry what HTTP/2 forbids and siwa must refuse.
"""

import asyncio
import json
import sys

import h2.config
import h2.connection
import h2.events
import h2.exceptions

PORT, ANSWERS = int(sys.argv[1]), sys.argv[2]
with open(ANSWERS) as f:
    answers = json.load(f)


async def serve(reader, writer):
    config = h2.config.H2Configuration(
        client_side=False, header_encoding="utf-8", validate_outbound_headers=False, normalize_outbound_headers=False
    )
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    writer.write(conn.data_to_send())
    windows = {}

    def flush():
        data = conn.data_to_send()
        if data:
            writer.write(data)

    async def wait_window(stream_id):
        while conn.local_flow_control_window(stream_id) <= 0:
            event = windows.setdefault(stream_id, asyncio.Event())
            event.clear()
            await event.wait()

    async def answer(stream_id, method, path):
        spec = answers.get(path.split("?")[0])
        try:
            if spec is None:
                conn.send_headers(stream_id, [(":status", "404"), ("content-length", "0")], end_stream=True)
                flush()
                return
            for status, fields in spec.get("interim", []):
                conn.send_headers(stream_id, [(":status", str(status))] + [(n.lower(), v) for n, v in fields])
            body = spec["body"].encode() if method != "HEAD" else b""
            trailers = spec.get("trailers") or []
            headers = [(":status", str(spec["status"]))] + [(n.lower(), v) for n, v in spec["fields"]]
            if spec["status"] < 200:
                # A 1xx as the answer (a 101, which HTTP/2 does not have): h2 sends it only as an interim one, which
                # no END_STREAM may end; nothing follows.
                conn.send_headers(stream_id, headers)
                flush()
                return
            conn.send_headers(stream_id, headers, end_stream=not body and not trailers)
            flush()
            sent = 0
            while sent < len(body):
                await wait_window(stream_id)
                size = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size, len(body) - sent)
                conn.send_data(stream_id, body[sent:sent + size], end_stream=sent + size == len(body) and not trailers)
                sent += size
                flush()
                await writer.drain()
            if trailers:
                conn.send_headers(stream_id, [(n.lower(), v) for n, v in trailers], end_stream=True)
            flush()
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, ConnectionError):
            pass

    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    headers = dict(event.headers)
                    asyncio.ensure_future(answer(event.stream_id, headers.get(":method", "GET"), headers.get(":path", "/")))
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.WindowUpdated):
                    for stream_id, waiting in list(windows.items()):
                        if event.stream_id in (0, stream_id):
                            waiting.set()
                elif isinstance(event, h2.events.ConnectionTerminated):
                    break
            flush()
            await writer.drain()
    except (ConnectionError, h2.exceptions.ProtocolError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", PORT)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
