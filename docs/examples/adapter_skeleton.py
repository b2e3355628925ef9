"""A minimal DHP conformance adapter (spec/adapter.md), here wrapped around the reference SDK.

Port it to your language: one request per stdin line, one response per stdout line, flushed at
once; logs and tracebacks go to stderr. Each `cmd_<op>` maps one request to one call of your
implementation. Check the wiring, then run the kit:

    dhp-conform smoke --impl 'python docs/examples/adapter_skeleton.py'
    dhp-conform --impl 'python docs/examples/adapter_skeleton.py' --quick
"""

import json
import sys
import traceback

import dhp
from dhp.core import operations  # the store's fenced write by (worker, fence)


class Adapter:
    def __init__(self):
        self.store = None
        self.beat = 0  # background heartbeat interval; 0 = the kit sends every heartbeat

    def cmd_hello(self, a):
        if "1" not in a.get("protocols", []):
            raise dhp.InvalidInput(f"this adapter speaks protocol 1, not {a.get('protocols')}")
        return {"protocol": "1", "dhp": "1.0",
                "implementation": {"name": "skeleton", "language": "python", "version": "0.1"},
                "classes": ["store"], "features": ["claim_next"]}

    def cmd_init(self, a):
        self.beat = a.get("heartbeat_interval") or 0
        self.store = dhp.Store(a["data"], ttl=a["ttl"])
        return {}

    def cmd_dispatch(self, a):
        if "intent" in a:  # a whole intent, verbatim, checked as one (DHP-ADP-021)
            return {"handoff_id": dhp.dispatch_intent(self.store, a["intent"])}
        if "budget" in a and not isinstance(a["budget"], dict):  # null too (DHP-ADP-011)
            raise dhp.InvalidInput(f"budget must be an object, not {a['budget']!r}")
        return {"handoff_id": dhp.dispatch(self.store, a["task_kind"], a["inputs"],
                                           a["output_schema"], budget=a.get("budget"))}

    def _take(self, ctx):
        if ctx is None:  # claim_next found nothing claimable
            return None
        return {"handoff_id": ctx.handoff_id, "worker": ctx.worker_id, "fence": ctx.fence,
                "last_checkpoint": ctx.last_checkpoint,
                "last_seq": ctx.last_seq or None}  # null: no checkpoint (DHP-ADP-022)

    def cmd_claim(self, a):
        return self._take(dhp.claim(self.store, a["handoff_id"], a["worker"], ttl=a.get("ttl"),
                                    heartbeat_interval=self.beat))

    def cmd_recover(self, a):
        return self._take(dhp.recover(self.store, a["handoff_id"], a["worker"],
                                      ttl=a.get("ttl"), heartbeat_interval=self.beat))

    def cmd_claim_next(self, a):
        return self._take(dhp.claim_next(self.store, a["task_kinds"], a["worker"],
                                         ttl=a.get("ttl"), heartbeat_interval=self.beat))

    def _write(self, name, a, **kw):
        # Always the store's fenced write with the fence the kit sent: stale fences are sent
        # on purpose and must be refused by the store, not by the adapter (DHP-ADP-006).
        return operations.write(self.store, a["handoff_id"], name, a["worker"], a["fence"],
                                ttl=a.get("ttl"), **kw)

    def cmd_heartbeat(self, a):
        self._write("heartbeat", a)
        return {}

    def cmd_checkpoint(self, a):
        return {"record": self._write("checkpoint", a, state=a["state"],
                                      spend=a.get("spend", 0))}

    def cmd_complete(self, a):
        return {"record": self._write("complete", a, result=a["result"])}

    def cmd_release(self, a):
        self._write("release", a)
        return {}

    def cmd_status(self, a):
        return dhp.status(self.store, a["handoff_id"])

    def cmd_last_checkpoint(self, a):
        records = dhp.checkpoints(self.store, a["handoff_id"])
        last = records[-1] if records else None
        return {"found": last is not None, "state": last and last["state"],
                "seq": last and last["seq"]}

    def cmd_result(self, a):
        done = dhp.status(self.store, a["handoff_id"])["state"] == "completed"
        return {"completed": done, "result": dhp.result(self.store, a["handoff_id"])
                if done else None}

    def cmd_cancel(self, a):
        dhp.cancel(self.store, a["handoff_id"])
        return {}

    def cmd_requeue(self, a):
        dhp.requeue(self.store, a["handoff_id"])
        return {}

    def cmd_dlq(self, a):
        return {"entries": dhp.dlq(self.store)}

    def handle(self, line):
        try:
            request = json.loads(line)
            rid, op = request["id"], request["op"]
            args = dhp.parse_json(line)["args"]  # strict JSON, as the implementation parses
            command = getattr(self, f"cmd_{op}", None)
            if command is None:
                raise dhp.InvalidInput(f"unknown op {op!r}")
            if self.store is None and op not in ("hello", "init"):
                raise dhp.InvalidInput(f"{op} before init")
            return {"id": rid, "ok": True, "data": command(args)}
        except dhp.DHPError as exc:  # the implementation's refusal, with the spec's code
            return {"id": locals().get("rid", 0), "ok": False, "error": exc.to_dict()}
        except (KeyError, ValueError, TypeError) as exc:  # a malformed request
            return {"id": locals().get("rid", 0), "ok": False, "error": {
                "code": "invalid_input", "message": f"bad request: {exc!r}", "definite": True}}
        except Exception as exc:  # a bug: report it (outcome unknown) and keep running
            traceback.print_exc()
            return {"id": locals().get("rid", 0), "ok": False, "error": {
                "code": "internal", "message": repr(exc), "definite": False}}


def main():
    adapter = Adapter()
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(adapter.handle(line)) + "\n")
            sys.stdout.flush()  # the kit waits for each line: never leave one buffered


if __name__ == "__main__":
    main()
