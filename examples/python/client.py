#!/usr/bin/python3
"""A cloudbus client in Python: drives a refnode cluster over RabbitMQ,
speaking the cloudbus wire protocol with pika alone (no Go involved).

What a client does, in the order this script does it:

 1. Declare its own reply queue, "<prefix>.reply.<anything>", exclusive and
    auto-delete; nodes answer only to such a queue (or a broker-named
    "amq.gen-..." one) and drop unrun a request that names anything else.
 2. Publish each request, a JSON envelope, to the direct exchange
    "<prefix>.api" with routing key "<prefix>.message.api.portal": the one
    queue every node's API portal consumes. The portal that takes it
    forwards it to the node owning the resource (resource_uuid) on the
    consistent-hash ring, and the reply comes back to the reply queue.
 3. Match replies by correlation_id; a reply carries either a typed body or
    an error object {"code", "description", "details", "cause"}.

docs/wire.md is the protocol's reference. Run it with Debian's pika:  /usr/bin/python3 client.py --prefix cloudbus
"""
import argparse
import json
import os
import sys
import time
import urllib.parse
import uuid

import pika
import pika.exceptions

PROTOCOL = 1  # the envelope's "protocol" field; absent means 1

# Every built-in error code and its retry class (docs/wire.md, section 6).
#   safe: nothing happened, a retry may succeed; never: nothing happened, a
#   retry fails the same way; unknown: it may have happened (retry only if
#   idempotent); ran: it happened, only its reply could not be read.
# The error object carries the class too, as "retry": for these codes this
# table decides (no peer changes a built-in code's class); for any other
# code (one a service registered) the "retry" field does, and a code
# without it (from an older node) or with a class not listed here is
# "unknown".
RETRY = {
    "timeout": "unknown", "canceled": "unknown", "no_route": "safe",
    "unknown_message": "never", "bad_reply": "ran", "node_left": "unknown",
    "not_owner": "safe", "busy": "safe", "bad_request": "never",
    "invalid_uuid": "never", "not_found": "never", "too_large": "never",
    "internal": "unknown", "closed": "unknown", "unavailable": "unknown",
    "not_sent": "safe", "conflict": "never", "failed_precondition": "never",
    "already_exists": "never",
}
CLASSES = ("safe", "never", "unknown", "ran")


def retry_class(err):
    """The retry class of an error object: the table's, else its "retry"."""
    code = err.get("code") or "internal"
    if code in RETRY:
        return RETRY[code]
    sent = err.get("retry")
    return sent if sent in CLASSES else "unknown"


def new_uuid():
    """A UUID in cloudbus's canonical form: 32 lower-case hex digits."""
    return uuid.uuid4().hex


class CallError(Exception):
    """An error reply, or a failure to get one; .code is the wire code."""

    def __init__(self, err):
        self.code = err.get("code") or "internal"  # no code reads as internal
        self.description = err.get("description", "")
        self.details = err.get("details", "")
        self.retry = retry_class(err)
        super().__init__(": ".join(s for s in (self.code, self.description, self.details) if s))


class Client:
    def __init__(self, url, prefix, timeout):
        self.prefix, self.timeout = prefix, timeout
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        # Publisher confirms: basic_publish returns once the broker took the
        # message, and, as it is mandatory, raises UnroutableError if no
        # queue is bound under the key (no node of this prefix is running).
        self.ch.confirm_delivery()
        self.source = "py-" + new_uuid()[:12]
        self.reply_queue = f"{prefix}.reply.{self.source}"
        self.ch.queue_declare(self.reply_queue, exclusive=True, auto_delete=True)
        self.ch.basic_consume(self.reply_queue, self._on_reply, auto_ack=True)
        self.waiting, self.replies = set(), {}
        self.offset_ns = None  # cluster time minus local time, once measured
        self.bound_ns = 0      # the error bound of that offset

    def _on_reply(self, _ch, _method, _props, body):
        env = json.loads(body)
        if env.get("kind") == "reply" and env.get("correlation_id") in self.waiting:
            self.replies[env["correlation_id"]] = env  # a late reply is dropped

    def call(self, typ, body, resource=None, want=None):
        """Send a request through api.portal and wait for its reply until
        this client's timeout; return (reply type, reply body)."""
        deadline = time.monotonic() + self.timeout
        corr, left_ns = new_uuid(), int(self.timeout * 1e9)  # integers only: 5e9 is refused
        env = {
            "protocol": PROTOCOL,
            # The message id: fresh per message. A node runs an id once and
            # replays its first reply, so resend an id only to retry the
            # very same message (another body under it is bad_request).
            "id": new_uuid(),
            "kind": "request",
            "type": typ,                    # a registered, versioned type name
            "service_id": "api.portal",
            "correlation_id": corr,         # fresh per call: matches the reply
            "reply_to": self.reply_queue,
            "source": self.source,          # for tracing only
            "timeout_ns": left_ns,          # time left; a node counts it from arrival
            "body": body,                   # a JSON object, not a string
        }
        if resource:
            # What the ring hashes to find the owner. It must be canonical
            # and equal the UUID the body names, else the receiver refuses
            # the message (bad_request); leave it out for a creation.
            env["resource_uuid"] = resource
        props = pika.BasicProperties(content_type="application/json", delivery_mode=2)
        if self.offset_ns is not None:
            # The absolute deadline in cluster time, less the clock's error
            # bound: a message that waits anywhere never starts after it.
            env["deadline_ns"] = time.time_ns() + self.offset_ns + left_ns - self.bound_ns
        else:
            # No cluster time (the clock query itself, or no node had it):
            # a node counts timeout_ns from the arrival and cannot see a
            # wait in api.portal, so have the broker drop the request once
            # the time left is over (whole milliseconds, as a string).
            props.expiration = str(left_ns // 1_000_000)
        self.waiting.add(corr)
        try:
            self.ch.basic_publish(
                exchange=f"{self.prefix}.api",
                routing_key=f"{self.prefix}.message.api.portal",
                body=json.dumps(env).encode(),
                properties=props,
                mandatory=True)
            while corr not in self.replies:
                left = deadline - time.monotonic()
                if left <= 0:  # the outcome is unknown: it may still run
                    raise CallError({"code": "timeout", "description": f"no reply to {typ} within {self.timeout}s"})
                self.conn.process_data_events(time_limit=left)
        except pika.exceptions.UnroutableError:  # returned: no api.portal queue under the key
            raise CallError({"code": "no_route", "description": f"no node of prefix {self.prefix!r} runs"})
        except pika.exceptions.ChannelClosedByBroker as e:  # 404: no exchange; 403: no right
            raise CallError({"code": "unavailable", "description": f"broker: {e.reply_code} {e.reply_text}"})
        finally:
            self.waiting.discard(corr)
        reply = self.replies.pop(corr)
        if reply.get("error"):
            raise CallError(reply["error"])
        if want and reply.get("type") != want:
            raise CallError({"code": "bad_reply", "description": f"{typ} was answered {reply.get('type')}, not {want}"})
        return reply.get("type"), reply.get("body")

    def sync_clock(self):
        """Measure the cluster clock through any node (NTP-style): offset is
        now_ns - (s+r)/2, within (r-s)/2 + error_ns. A long-running client
        measures again every ~10 s and keeps its best recent sample."""
        s = time.time_ns()
        _, t = self.call("cloudbus.v1.ClusterTimeQuery", {}, want="cloudbus.v1.ClusterTime")
        r = time.time_ns()
        self.offset_ns = t["now_ns"] - (s + r) // 2
        self.bound_ns = (r - s) // 2 + t["error_ns"]
        return t


def masked(url):
    u = urllib.parse.urlsplit(url)
    if u.password:
        u = u._replace(netloc=u.netloc.replace(":" + u.password + "@", ":xxxxx@"))
    return urllib.parse.urlunsplit(u)


def step(name, detail, reply=None):
    via = ""
    if reply is not None:
        via = f"  → handled by node {reply['node'][:8]}…, portal {(reply.get('portal') or '-')[:8]}…"
    print(f"{name:<14}{detail}{via}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("CLOUDBUS_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
                    help="AMQP URL of the cluster's broker (default: $CLOUDBUS_AMQP_URL, else local guest)")
    ap.add_argument("--prefix", default="cloudbus", help="the cluster's prefix, as refnode serve -prefix (cloudbus)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each reply (10)")
    ap.add_argument("--json", action="store_true", help="end with a one-line JSON summary")
    args = ap.parse_args()

    try:
        c = Client(args.url, args.prefix, args.timeout)
    except pika.exceptions.AMQPError as e:
        sys.exit(f"connect to {masked(args.url)}: {e!r}")
    summary = {"prefix": args.prefix, "reply_queue": c.reply_queue}
    try:
        step("connected", f"{masked(args.url)}, replies on {c.reply_queue}")
        try:
            t = c.sync_clock()
            summary["clock"] = {"node": t["node"], "offset_ns": c.offset_ns, "bound_ns": c.bound_ns}
            step("cluster time", f"offset {c.offset_ns / 1e6:+.1f}ms ± {c.bound_ns / 1e6:.1f}ms (node {t['node'][:8]}…)")
        except CallError as e:
            # Only a node without the time yet (unavailable) lets us go on
            # with timeout_ns alone. No answer means no node runs: a request
            # would wait in api.portal and, with no deadline_ns, run
            # whenever a node comes back, however late.
            if e.code != "unavailable" or not c.ch.is_open:
                raise
            step("cluster time", f"unknown ({e}); sending timeout_ns only")

        host = new_uuid()
        _, h = c.call("refnode.v1.AddHost", {"uuid": host, "name": "py-host", "address": "10.0.0.1"}, host, "refnode.v1.HostReply")
        step("AddHost", f"host {host[:8]}… {h['host']['status']}", h)
        summary["host"] = {"uuid": host, "node": h["node"], "portal": h.get("portal", "")}

        image = new_uuid()
        _, i = c.call("refnode.v1.AddImage", {"uuid": image, "name": "py-image"}, image, "refnode.v1.ImageReply")
        step("AddImage", f"image {image[:8]}… {i['image']['name']}", i)
        summary["image"] = {"uuid": image, "node": i["node"], "portal": i.get("portal", "")}

        # A creation: no resource_uuid; the portal's own node creates the VM.
        vm = new_uuid()
        _, v = c.call("refnode.v1.CreateVm", {"uuid": vm, "name": "py-vm", "image_uuid": image}, None, "refnode.v1.VmCreated")
        step("CreateVm", f"vm {vm[:8]}… {v['vm']['state']} on host {v['vm']['host_uuid'][:8]}…", v)
        summary["create"] = {"node": v["node"], "portal": v.get("portal", ""), "allocated_by": v["allocated_by"],
                             "host_uuid": v["vm"]["host_uuid"], "state": v["vm"]["state"]}

        _, v = c.call("refnode.v1.StartVm", {"uuid": vm}, vm, "refnode.v1.VmReply")
        step("StartVm", f"vm {vm[:8]}… {v['vm']['state']}", v)
        summary["start"] = {"node": v["node"], "state": v["vm"]["state"]}

        _, v = c.call("refnode.v1.GetVm", {"uuid": vm}, vm, "refnode.v1.VmReply")
        step("GetVm", f"vm {vm[:8]}… {v['vm']['state']}", v)
        summary["vm"] = dict(v["vm"], node=v["node"])
        if v["vm"]["state"] != "running":
            raise CallError({"code": "unexpected", "description": f"VM {vm} is {v['vm']['state']}, want running"})

        # An error reply: a VM nobody created.
        unknown = new_uuid()
        try:
            c.call("refnode.v1.GetVm", {"uuid": unknown}, unknown, "refnode.v1.VmReply")
            raise CallError({"code": "unexpected", "description": f"GetVm of unknown VM {unknown} succeeded"})
        except CallError as e:
            if e.code != "not_found":
                raise
            step("GetVm", f"vm {unknown[:8]}… (unknown) failed as expected: code {e.code}, retry class {e.retry}")
            print(f"{'':<14}description: {e.description}" + (f"; details: {e.details}" if e.details else ""))
            summary["error"] = {"uuid": unknown, "code": e.code, "description": e.description,
                                "details": e.details, "retry": e.retry}
    except CallError as e:
        print(f"FAILED: {e} (retry: {e.retry})", file=sys.stderr)
        return 1
    except pika.exceptions.AMQPError as e:
        print(f"FAILED: broker: {e!r}", file=sys.stderr)
        return 1
    finally:
        if c.conn.is_open:
            c.conn.close()  # the exclusive reply queue goes with the connection
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
