#!/usr/bin/env python3
"""report_check.py - checks `rbtrace report` outputs for report_cli_test.sh.

  report_check.py perfetto FILE    trace-event JSON: WR slices with phase sub-slices
                                    nested inside them, every flow start matched by a
                                    finish, starts inside a post call, finishes inside
                                    a poll call on the poller's thread
  report_check.py json FILE KEY=V  the JSON report parses and follows the schema of
                                    docs/report.md; KEY=V checks (see below)
  report_check.py png FILE         the screenshot is a real PNG with plots drawn
                                    (many non-white pixels of several colours)
Standard library only. Exits non-zero with one line saying what is wrong.
"""
import json
import math
import os
import re
import struct
import sys
import zlib


def fail(msg):
    print("report_check: " + msg)
    sys.exit(1)


def check_perfetto(path):
    with open(path) as f:
        doc = json.load(f)
    evs = doc["traceEvents"]
    calls = {}  # (pid, tid) -> list of (ts, end, name)
    wr_slices, phases, starts, finishes = [], [], {}, {}
    for e in evs:
        ph = e.get("ph")
        if ph == "X":
            for k in ("ts", "dur", "pid", "tid", "name"):
                if k not in e:
                    fail("slice without %s: %r" % (k, e))
            if e["dur"] < 0:
                fail("negative duration: %r" % e)
            if e.get("cat") == "verbs":
                calls.setdefault((e["pid"], e["tid"]), []).append(
                    (e["ts"], e["ts"] + e["dur"], e["name"]))
            elif e.get("cat") == "wr":
                wr_slices.append(e)
            elif e.get("cat") == "phase":
                phases.append(e)
        elif ph == "s":
            starts[e["id"]] = e
        elif ph == "f":
            finishes[e["id"]] = e
    if not wr_slices:
        fail("no WR slices")
    # phases nest inside a WR slice of the same track
    by_track = {}
    for w in wr_slices:
        by_track.setdefault((w["pid"], w["tid"]), []).append(w)
    for t in by_track.values():
        t.sort(key=lambda w: w["ts"])
        for a, b in zip(t, t[1:]):
            if b["ts"] < a["ts"] + a["dur"] - 0.0015:
                fail("overlapping WR slices on one track: %r %r" % (a, b))
    eps = 0.0015  # us, printing rounds to ns
    for p in phases:
        t = by_track.get((p["pid"], p["tid"]), [])
        if not any(w["ts"] - eps <= p["ts"] and p["ts"] + p["dur"] <= w["ts"] + w["dur"] + eps
                   for w in t):
            fail("phase slice outside any WR slice: %r" % p)
    if len(phases) < 3 * len(wr_slices):
        fail("%d phase slices for %d WRs" % (len(phases), len(wr_slices)))
    if set(starts) != set(finishes):
        fail("flow starts %d and finishes %d do not match" % (len(starts), len(finishes)))

    def inside(e, name):
        for (a, b, n) in calls.get((e["pid"], e["tid"]), []):
            if n == name and a - eps <= e["ts"] <= b + eps:
                return True
        return False

    for i, s in starts.items():
        if not inside(s, "ibv_post_send"):
            fail("flow %s does not start in a post call" % i)
        if not inside(finishes[i], "ibv_poll_cq"):
            fail("flow %s does not end in a poll call" % i)
    print("perfetto ok: %d WR slices, %d phases, %d flows" %
          (len(wr_slices), len(phases), len(starts)))


def finding_kinds():
    """code -> its severities, from RBT_FINDING_LIST in analyzer/rbt_analyzer.h."""
    here = os.path.dirname(os.path.abspath(__file__))
    hdr = os.path.join(here, "..", "analyzer", "rbt_analyzer.h")
    with open(hdr) as f:
        text = f.read()
    sev = {"RBT_SEV_ERROR": "error", "RBT_SEV_WARNING": "warning", "RBT_SEV_INFO": "info"}
    kinds = {}
    for m in re.finditer(r"X\((\w+), (RBT_SEV_\w+), (RBT_SEV_\w+|-1),", text):
        kinds[m.group(1)] = {sev[m.group(2)]} | ({sev[m.group(3)]} if m.group(3) in sev else set())
    if len(kinds) < 10:
        fail("RBT_FINDING_LIST not found in " + hdr)
    return kinds


def check_json(path, checks):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("rbtrace_report") != 1:
        fail("not a report")
    for k in ("counts", "traces", "findings"):
        if k not in doc:
            fail("missing " + k)
    for t in doc["traces"]:
        for k in ("index", "name", "pid", "events", "phases", "qps", "cqs", "rate",
                  "integrity", "nic_clock", "empty_poll_fraction"):
            if k not in t:
                fail("trace without " + k)
        for q in t["qps"]:
            for k in ("qp_num", "type", "state", "history", "groups", "setup", "caps",
                      "signaled_fraction", "inline_fraction", "wrs_per_post"):
                if k not in q:
                    fail("qp without " + k)
    for fd in doc["findings"]:
        for k in ("severity", "code", "title", "evidence", "advice", "trace", "qp_num",
                  "time_ns"):
            if k not in fd:
                fail("finding without " + k)
    kinds = finding_kinds()
    for fd in doc["findings"]:
        if fd["code"] not in kinds:
            fail("finding code %s is not in RBT_FINDING_LIST" % fd["code"])
        if fd["severity"] not in kinds[fd["code"]]:
            fail("finding %s raised as %s, the list says %s"
                 % (fd["code"], fd["severity"], kinds[fd["code"]]))
    codes = [f["code"] for f in doc["findings"]]
    for c in checks:
        key, _, val = c.partition("=")
        if key == "finding":
            if val not in codes:
                fail("finding %s missing (have %s)" % (val, codes))
        elif key == "serious":
            n = sum(1 for f in doc["findings"] if f["severity"] != "info")
            if n != int(val):
                fail("%d warnings/errors, expected %s: %s" % (n, val, codes))
        elif key.split(":")[0] in ("near", "le", "ge"):
            # near:TRACE:PHASE=NS  p50 within 5 % or 2 us of NS (the bar)
            # le / ge:TRACE:PHASE=NS  p50 <= NS / >= NS (bounds containing a truth)
            op, tr, phase = key.split(":")
            got = doc["traces"][int(tr)]["phases"].get(phase, {}).get("p50")
            want = float(val)
            if got is None:
                fail("trace %s has no %s phase" % (tr, phase))
            # The report's quantiles are bucket midpoints of a histogram with
            # 64 buckets per octave (analyzer_internal.h, AN_HIST_SUB_BITS): a
            # p50 may read up to half a bucket (< 1/128 of it) past the values
            # it stands for, so a bound is checked to that resolution.
            half = 2.0 ** (math.floor(math.log2(got)) - 7) if got >= 64 else 0
            ok = {"near": abs(got - want) <= max(0.05 * want, 2000),
                  "le": got <= want + half, "ge": got >= want - half}[op]
            if not ok:
                fail("trace %s %s p50 %.0f ns, expected %s %.0f" % (tr, phase, got, op, want))
            print("  %s p50 %.0f ns: %s %.0f ok" % (phase, got, op, want))
        elif key.startswith("p50:"):
            # p50:TRACE:PHASE=NS (within 5 %)
            _, tr, phase = key.split(":")
            got = doc["traces"][int(tr)]["phases"].get(phase, {}).get("p50")
            want = float(val)
            if got is None or abs(got - want) > 0.05 * want:
                fail("trace %s %s p50 %s, expected %s" % (tr, phase, got, want))
        else:
            fail("unknown check " + c)
    print("json ok: %d traces, findings %s" % (len(doc["traces"]), codes))


def png_pixels(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                fail("unexpected PNG format depth %d type %d" % (depth, ctype))
            bpp = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    i = 0
    for _ in range(h):
        ft = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ft == 1:
                line[x] = (line[x] + a) & 255
            elif ft == 2:
                line[x] = (line[x] + b) & 255
            elif ft == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pr) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def check_png(path):
    w, h, bpp, rows = png_pixels(path)
    colours, nonwhite = set(), 0
    for r in rows[::2]:
        for x in range(0, w * bpp, bpp * 2):
            px = r[x:x + 3]
            if px != b"\xff\xff\xff":
                nonwhite += 1
                colours.add(bytes(px))
    if nonwhite < 2000 or len(colours) < 8:
        fail("screenshot looks blank: %d non-white samples, %d colours" %
             (nonwhite, len(colours)))
    print("png ok: %dx%d, %d non-white samples, %d colours" % (w, h, nonwhite, len(colours)))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        fail("usage: report_check.py perfetto|json|png FILE [checks]")
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "perfetto":
        check_perfetto(path)
    elif kind == "json":
        check_json(path, sys.argv[3:])
    elif kind == "png":
        check_png(path)
    else:
        fail("unknown kind " + kind)
