"""An app told of siwa's account events: checks each delivery with the Standard Webhooks library (not siwa's code).

usage: webhook_receiver.py PORT SECRET RECORD_FILE [FAIL_FIRST]

Each POST is verified with standardwebhooks.Webhook(SECRET).verify(body, headers): a delivery that verifies is
appended to RECORD_FILE as one JSON line {"id", "type", "sub", "data", "attempt"} and answered 204; one that does not
is recorded as {"invalid": reason} and answered 400. The first FAIL_FIRST deliveries are answered 503 unread (an app
that is down), so that siwa must try them again; after GET /down every delivery is answered 503 unread. GET
/receiver-ready answers 200 once listening (a path no siwa answers, so that a probe cannot mistake another server).
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

port, secret, record = int(sys.argv[1]), sys.argv[2], sys.argv[3]
fail_first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
webhook = Webhook(secret)
lock = threading.Lock()
seen = {"count": 0, "down": False}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/down":
            seen["down"] = True
        self.send_response(200 if self.path in ("/receiver-ready", "/down") else 404)
        self.end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with lock:
            seen["count"] += 1
            attempt = seen["count"]
        if attempt <= fail_first or seen["down"]:
            self.send_response(503)
            self.end_headers()
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            payload = webhook.verify(body, headers)
            line = {"id": headers.get("webhook-id"), "type": payload["type"], "sub": payload["data"].get("sub"), "data": payload["data"],
                    "timestamp": payload.get("timestamp"), "attempt": attempt}
            status = 204
        except Exception as error:  # the library's verdict, whatever its reason
            line = {"invalid": f"{type(error).__name__}: {error}", "attempt": attempt}
            status = 400
        with lock:
            with open(record, "a") as out:
                out.write(json.dumps(line) + "\n")
        self.send_response(status)
        self.end_headers()


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
