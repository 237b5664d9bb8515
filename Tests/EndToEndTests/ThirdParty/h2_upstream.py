"""An HTTP/2 upstream with prior knowledge (h2c, Python's h2), for siwa's `upstream_http2`: answers that misbehave as
real services and proxies do, and a log of what it saw, to test how siwa carries them.

Usage:
  h2_upstream.py PORT LOG     serves 127.0.0.1:PORT; prints "ready"; appends one line per event to LOG:
                              "connection N", "reset PATH", "ended PATH" (the request's END_STREAM), "sent PATH BYTES"
                              (every 0.2 s while it sends, and at its end)

Paths (any prefix before them is ignored, so /h2/stream is /stream):
  /stream     200, then "tick\\n" every 100 ms until the stream is reset
  /big        200, then 64 MB as fast as flow control allows
  /goaway     200 "ok", then GOAWAY naming this stream as the last, the connection kept open
  /cut        200 without a length, 10 KB of DATA, then the connection closed without END_STREAM
  /trailers   200 "ok", then trailers: x-kept, set-cookie of siwa's session, connection-specific ones
  /grpc-error a Trailers-Only answer: one HEADERS frame with END_STREAM, grpc-status 5
  /refuse-once        the first request for it (in the upstream's life) is reset REFUSED_STREAM, unread; then 200 "ok"
  /refuse-echo        the same, once the request's body has ended (a refusal may come after the body); then 200 with
                      the request's body
  /goaway-unprocessed the first request for it gets a GOAWAY whose last stream is the one before it (so it was not
                      processed), and no answer; then 200 "ok"
  (each refusal logged "refused PATH")
  anything else: 200 "ok"
"""

import asyncio
import sys

import h2.config
import h2.connection
import h2.events
import h2.errors
import h2.exceptions

PORT, LOG = int(sys.argv[1]), sys.argv[2]
connections = 0
refused = set()


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


async def serve(reader, writer):
    global connections
    connections += 1
    log("connection %d" % connections)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    conn.initiate_connection()
    writer.write(conn.data_to_send())
    windows = {}  # stream id -> asyncio.Event set when its window may have opened
    tasks = {}
    paths = {}
    bodies = {}  # stream id -> bytes of the request's body so far
    ended = {}  # stream id -> asyncio.Event set at the request's END_STREAM

    def flush():
        data = conn.data_to_send()
        if data:
            writer.write(data)

    async def wait_window(stream_id):
        while conn.local_flow_control_window(stream_id) <= 0:
            event = windows.setdefault(stream_id, asyncio.Event())
            event.clear()
            await event.wait()

    async def answer(stream_id, path):
        name = "/" + path.split("?")[0].rstrip("/").split("/")[-1]
        try:
            if name in ("/refuse-once", "/refuse-echo", "/goaway-unprocessed") and name not in refused:
                refused.add(name)
                log("refused %s" % path)
                if name == "/refuse-echo":
                    await ended.setdefault(stream_id, asyncio.Event()).wait()
                if name == "/goaway-unprocessed":
                    conn.close_connection(last_stream_id=max(0, stream_id - 2))
                else:
                    conn.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                flush()
                return
            if name == "/refuse-echo":
                await ended.setdefault(stream_id, asyncio.Event()).wait()
                body = bodies.get(stream_id, b"")
                conn.send_headers(stream_id, [(":status", "200"), ("content-length", str(len(body)))])
                conn.send_data(stream_id, body, end_stream=True)
                flush()
            elif name == "/stream":
                conn.send_headers(stream_id, [(":status", "200"), ("content-type", "text/plain")])
                flush()
                while True:
                    await wait_window(stream_id)
                    conn.send_data(stream_id, b"tick\n")
                    flush()
                    await writer.drain()
                    await asyncio.sleep(0.1)
            elif name == "/big":
                conn.send_headers(stream_id, [(":status", "200"), ("content-type", "application/octet-stream"), ("content-length", str(64 << 20))])
                flush()
                sent, last = 0, 0.0
                chunk = b"x" * 16384
                loop = asyncio.get_running_loop()
                try:
                    while sent < (64 << 20):
                        await wait_window(stream_id)
                        size = min(len(chunk), conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size, (64 << 20) - sent)
                        conn.send_data(stream_id, chunk[:size], end_stream=sent + size == (64 << 20))
                        sent += size
                        flush()
                        await writer.drain()
                        if loop.time() - last > 0.2:
                            last = loop.time()
                            log("sent %s %d" % (path, sent))
                finally:
                    log("sent %s %d" % (path, sent))
            elif name == "/goaway":
                conn.send_headers(stream_id, [(":status", "200"), ("content-length", "2")])
                conn.send_data(stream_id, b"ok", end_stream=True)
                conn.close_connection(last_stream_id=stream_id)
                flush()
            elif name == "/cut":
                conn.send_headers(stream_id, [(":status", "200"), ("content-type", "text/plain")])
                conn.send_data(stream_id, b"c" * 10240)
                flush()
                await writer.drain()
                writer.close()
            elif name == "/trailers":
                conn.send_headers(stream_id, [(":status", "200"), ("content-type", "text/plain")])
                conn.send_data(stream_id, b"ok")
                conn.send_headers(stream_id, [("x-kept", "yes"), ("set-cookie", "siwa_session=planted; Path=/"), ("grpc-status", "0")], end_stream=True)
                flush()
            elif name == "/grpc-error":
                conn.send_headers(stream_id, [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "5"), ("grpc-message", "not found")], end_stream=True)
                flush()
            else:
                conn.send_headers(stream_id, [(":status", "200"), ("content-length", "2")])
                conn.send_data(stream_id, b"ok", end_stream=True)
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
                    paths[event.stream_id] = headers.get(":path", "/")
                    tasks[event.stream_id] = asyncio.ensure_future(answer(event.stream_id, paths[event.stream_id]))
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
                    try:
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    except h2.exceptions.StreamClosedError:
                        pass
                elif isinstance(event, h2.events.StreamEnded):
                    log("ended %s" % paths.get(event.stream_id, "?"))
                    ended.setdefault(event.stream_id, asyncio.Event()).set()
                elif isinstance(event, h2.events.StreamReset):
                    log("reset %s" % paths.get(event.stream_id, "?"))
                    task = tasks.pop(event.stream_id, None)
                    if task:
                        task.cancel()
                elif isinstance(event, h2.events.WindowUpdated):
                    for stream_id, window in list(windows.items()):
                        if event.stream_id in (0, stream_id):
                            window.set()
                elif isinstance(event, h2.events.RemoteSettingsChanged):
                    for window in windows.values():
                        window.set()
            flush()
    except (ConnectionError, h2.exceptions.ProtocolError):
        pass
    finally:
        for task in tasks.values():
            task.cancel()
        writer.close()


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", PORT)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
