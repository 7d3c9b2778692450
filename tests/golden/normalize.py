#!/usr/bin/env python3
"""normalize.py - report JSON (and the exit line golden.sh appends) on stdin, with
the fields a trace takes from the machine that wrote it blanked, on stdout, one
canonical line (sorted keys) per document so that goldens diff well."""
import json
import sys

VOLATILE = {"pid", "host", "cmdline", "start_real_ns"}


def scrub(v):
    if isinstance(v, dict):
        return {k: ("*" if k in VOLATILE else scrub(x)) for k, x in v.items()}
    if isinstance(v, list):
        return [scrub(x) for x in v]
    return v


# strict UTF-8: every JSON rbtrace prints must be valid UTF-8 (one escaping rule)
text = sys.stdin.buffer.read().decode("utf-8")
body, _, tail = text.rpartition("exit ")
out = []
body = body.strip()
if body:
    doc = json.loads(body)
    out.append(json.dumps(scrub(doc), sort_keys=True, indent=1))
out.append("exit " + tail.strip())
print("\n".join(out))
