"""A real SMTP server that logs every message it accepts (PyPI aiosmtpd).

Used by the E2E test of budget alerts (e2e_metering_chain.rs). Listens on 127.0.0.1:PORT,
prints "ready" once it accepts connections, and appends every message to LOG as one JSON
line: envelope sender and recipients, Message-ID, Subject and the plain text.

    python3 smtp.py PORT LOG
"""

import asyncio
import email
import email.policy
import json
import sys

from aiosmtpd.controller import Controller

PORT, LOG = int(sys.argv[1]), sys.argv[2]


class Handler:
    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        body = msg.get_body(preferencelist=("plain",))
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps({
                "from": envelope.mail_from,
                "to": list(envelope.rcpt_tos),
                "message_id": msg.get("Message-ID", ""),
                "subject": msg.get("Subject", ""),
                "text": body.get_content() if body is not None else "",
            }) + "\n")
        return "250 Message accepted for delivery"


controller = Controller(Handler(), hostname="127.0.0.1", port=PORT)
controller.start()
print("ready", flush=True)
try:
    asyncio.new_event_loop().run_forever()
finally:
    controller.stop()
