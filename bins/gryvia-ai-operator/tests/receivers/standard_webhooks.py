"""A webhook receiver that verifies every delivery with the Standard Webhooks reference library.

Used by the E2E test `job_hook_deliveries_verify_with_the_standard_webhooks_reference_library`
(e2e_aijobs.rs). Listens on 127.0.0.1 on a free port and prints the port as its first line.
Every POST is verified with PyPI `standardwebhooks` (`Webhook(secret).verify(body, headers)`,
which checks the signature and that the timestamp is within five minutes): answers 400 when
that fails, 409 when a verified delivery's `webhook-id` was accepted before (a replay), 200
otherwise. Every request is appended to LOG as one JSON line: id, answer, error, and the
headers and body (base64) it came with.

    python3 standard_webhooks.py SECRET LOG
"""

import base64
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

SECRET, LOG = sys.argv[1], sys.argv[2]
WEBHOOK = Webhook(SECRET)
ACCEPTED = set()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        msg_id = headers.get("webhook-id", "")
        error = None
        try:
            WEBHOOK.verify(body, headers)
            code = 409 if msg_id in ACCEPTED else 200
            if code == 409:
                error = "replayed: webhook-id accepted before"
            ACCEPTED.add(msg_id)
        except Exception as e:  # the library raises WebhookVerificationError and others
            code, error = 400, f"{type(e).__name__}: {e}"
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps({
                "id": msg_id, "answer": code, "error": error, "headers": headers,
                "body": base64.b64encode(body).decode(),
            }) + "\n")
        self.send_response(code)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
