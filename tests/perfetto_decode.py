#!/usr/bin/env python3
"""perfetto_decode.py - decodes `rbtrace report --format=perfetto` back, from the
field numbers of Perfetto's published .proto files (written here, not generated),
and checks the whole file: every packet parses and names its sequence; interning
(every iid used was defined earlier on its sequence, after its last clear); the
incremental clock (a sequence-scoped clock is used only after its snapshot); track
descriptors (unique, every parent and every track used is described, counter events
only on counter tracks and slices never on them); slice begin/end nesting per track
(ends never unmatched, after sorting by time as the trace processor does); counter
values (outstanding counts never negative; with --exact-counters, a QP's sends
outstanding equal its open WR slices at each sample). Prints one JSON line of
totals.

usage: perfetto_decode.py FILE [--expect-wrs N] [--exact-counters] [--max-bytes N]
"""
import json
import struct
import sys


def fail(msg):
    print("perfetto_decode: " + msg)
    sys.exit(1)


def varint(b, i):
    v = 0
    shift = 0
    while True:
        if i >= len(b):
            raise ValueError("varint cut at %d" % i)
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long at %d" % i)


def fields(b, where):
    """[(field, wire type, value)] of one message; value: int, or bytes for
    length-delimited fields (wire type 1: the 8 raw bytes)."""
    out = []
    i = 0
    try:
        while i < len(b):
            tag, i = varint(b, i)
            f, wt = tag >> 3, tag & 7
            if f == 0:
                raise ValueError("field 0")
            if wt == 0:
                v, i = varint(b, i)
            elif wt == 1:
                if i + 8 > len(b):
                    raise ValueError("fixed64 cut")
                v = b[i:i + 8]
                i += 8
            elif wt == 2:
                n, i = varint(b, i)
                if i + n > len(b):
                    raise ValueError("length %d beyond the message" % n)
                v = b[i:i + n]
                i += n
            elif wt == 5:
                v = b[i:i + 4]
                i += 4
            else:
                raise ValueError("wire type %d" % wt)
            out.append((f, wt, v))
    except ValueError as e:
        fail("%s: %s" % (where, e))
    return out


def one(fs, f, default=None):
    v = [x[2] for x in fs if x[0] == f]
    return v[-1] if v else default


def many(fs, f):
    return [x[2] for x in fs if x[0] == f]


def sint64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


# ---- field numbers (Perfetto's .proto files) ----
TRACE_PACKET = 1
TP_TIMESTAMP, TP_CLOCK_ID, TP_SEQ_ID, TP_SEQ_FLAGS = 8, 58, 10, 13
TP_INTERNED, TP_DEFAULTS, TP_TRACK_EVENT, TP_TRACK_DESC, TP_CLOCKS = 12, 59, 11, 60, 6
TE_TYPE, TE_TRACK, TE_NAME_IID, TE_NAME, TE_CAT_IID = 9, 11, 10, 23, 3
TE_COUNTER, TE_DCOUNTER, TE_EXTRA_UUIDS, TE_EXTRA_VALUES, TE_ANNOT = 30, 44, 31, 12, 4
DA_NAME_IID, DA_NAME, DA_UINT, DA_STRING = 1, 10, 3, 6
TD_UUID, TD_PARENT, TD_NAME, TD_PROCESS, TD_THREAD, TD_COUNTER = 1, 5, 2, 3, 4, 8
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
BOOTTIME, SEQ_CLOCK = 6, 64


class Seq:
    def __init__(self):
        self.cleared = False
        self.names, self.cats, self.anames = {}, {}, {}
        self.clock_id = None  # default timestamp clock
        self.track = 0
        self.ctr_uuids = []
        self.clock = None  # incremental clock value, None before a snapshot


def main():
    args = sys.argv[1:]
    if not args:
        fail(__doc__)
    path = args[0]
    expect_wrs = None
    exact = "--exact-counters" in args
    max_bytes = None
    if "--expect-wrs" in args:
        expect_wrs = int(args[args.index("--expect-wrs") + 1])
    if "--max-bytes" in args:
        max_bytes = int(args[args.index("--max-bytes") + 1])
    data = open(path, "rb").read()
    if max_bytes is not None and len(data) > max_bytes:
        fail("%d bytes, more than %d" % (len(data), max_bytes))
    seqs = {}
    tracks = {}  # uuid -> dict(parent, name, kind)
    used = {}  # uuid -> first packet index that used it
    events = {}  # uuid -> [(ts, order, type, name, args)]
    counter_vals = {}  # uuid -> [values]
    qp_open = {}  # QP track uuid -> open send slices (file order)
    n_packets = 0
    order = 0
    for (f, wt, pkt) in fields(data, "Trace"):
        if f != TRACE_PACKET or wt != 2:
            fail("Trace: field %d is not a packet" % f)
        where = "packet %d" % n_packets
        n_packets += 1
        pf = fields(pkt, where)
        seq_id = one(pf, TP_SEQ_ID)
        if not seq_id:
            fail(where + ": no trusted_packet_sequence_id")
        s = seqs.setdefault(seq_id, Seq())
        flags = one(pf, TP_SEQ_FLAGS, 0)
        if flags & 1:
            s.__init__()
            s.cleared = True
        d = one(pf, TP_DEFAULTS)
        if d is not None:
            if not s.cleared:
                fail(where + ": defaults on a sequence never cleared")
            df = fields(d, where + " defaults")
            s.clock_id = one(df, 58)
            ted = one(df, 11)
            if ted is not None:
                tf = fields(ted, where + " track_event_defaults")
                s.track = one(tf, TE_TRACK, 0)
                s.ctr_uuids = many(tf, TE_EXTRA_UUIDS)
        idata = one(pf, TP_INTERNED)
        if idata is not None:
            if not s.cleared:
                fail(where + ": interned data on a sequence never cleared")
            for (kf, _, entry) in fields(idata, where + " interned_data"):
                ef = fields(entry, where + " interned entry")
                iid, name = one(ef, 1), one(ef, 2)
                if not iid or name is None:
                    fail(where + ": interned entry without iid or name")
                table = {1: s.cats, 2: s.names, 3: s.anames}.get(kf)
                if table is None:
                    fail(where + ": interned field %d not expected" % kf)
                name = name.decode()
                if table.get(iid, name) != name:
                    fail(where + ": iid %d redefined" % iid)
                table[iid] = name
        cs = one(pf, TP_CLOCKS)
        if cs is not None:
            clocks = {}
            for c in many(fields(cs, where + " clock_snapshot"), 1):
                cf = fields(c, where + " clock")
                clocks[one(cf, 1)] = (one(cf, 2, 0), one(cf, 3, 0))
            if BOOTTIME not in clocks:
                fail(where + ": clock snapshot without BOOTTIME")
            if SEQ_CLOCK in clocks:
                if not clocks[SEQ_CLOCK][1]:
                    fail(where + ": clock 64 not incremental")
                s.clock = clocks[SEQ_CLOCK][0]
                if clocks[BOOTTIME][0] != s.clock:
                    fail(where + ": clocks 6 and 64 differ at the snapshot")
            continue
        ts = one(pf, TP_TIMESTAMP)
        if ts is not None:
            cid = one(pf, TP_CLOCK_ID, s.clock_id)
            if cid == SEQ_CLOCK:
                if s.clock is None:
                    fail(where + ": incremental timestamp before the clock snapshot")
                s.clock += ts
                ts = s.clock
            elif cid not in (None, BOOTTIME):
                fail(where + ": clock %r" % cid)
        desc = one(pf, TP_TRACK_DESC)
        if desc is not None:
            df = fields(desc, where + " track_descriptor")
            uuid = one(df, TD_UUID)
            if not uuid:
                fail(where + ": track without uuid")
            kind = ("process" if one(df, TD_PROCESS) is not None else
                    "thread" if one(df, TD_THREAD) is not None else
                    "counter" if one(df, TD_COUNTER) is not None else "slices")
            name = one(df, TD_NAME)
            if name is None:
                p = one(df, TD_PROCESS)
                name = one(fields(p, where), 6, b"") if p is not None else b""
            t = dict(parent=one(df, TD_PARENT), name=name.decode(), kind=kind)
            old = tracks.get(uuid)
            if old and (old["parent"], old["kind"]) != (t["parent"], t["kind"]):
                fail(where + ": track %d described twice differently" % uuid)
            tracks[uuid] = t
        te = one(pf, TP_TRACK_EVENT)
        if te is None:
            continue
        if ts is None:
            fail(where + ": track event without timestamp")
        ef = fields(te, where + " track_event")
        typ = one(ef, TE_TYPE)
        if typ not in (BEGIN, END, INSTANT, COUNTER):
            fail(where + ": event type %r" % typ)
        track = one(ef, TE_TRACK, s.track)
        if not track:
            fail(where + ": event on no track")
        used.setdefault(track, where)
        name = None
        if one(ef, TE_NAME_IID) is not None:
            iid = one(ef, TE_NAME_IID)
            if iid not in s.names:
                fail(where + ": name iid %d not defined on sequence %d" % (iid, seq_id))
            name = s.names[iid]
        elif one(ef, TE_NAME) is not None:
            name = one(ef, TE_NAME).decode()
        for c in many(ef, TE_CAT_IID):
            if c not in s.cats:
                fail(where + ": category iid %d not defined" % c)
        ann = {}
        for a in many(ef, TE_ANNOT):
            af = fields(a, where + " annotation")
            if one(af, DA_NAME_IID) is not None:
                iid = one(af, DA_NAME_IID)
                if iid not in s.anames:
                    fail(where + ": annotation name iid %d not defined" % iid)
                an = s.anames[iid]
            else:
                an = one(af, DA_NAME, b"").decode()
            v = one(af, DA_UINT)
            ann[an] = v if v is not None else one(af, DA_STRING, b"").decode()
        if typ == COUNTER:
            if one(ef, TE_COUNTER) is not None:
                v = sint64(one(ef, TE_COUNTER))
            elif one(ef, TE_DCOUNTER) is not None:
                v = struct.unpack("<d", one(ef, TE_DCOUNTER))[0]
            else:
                fail(where + ": counter event without value")
            counter_vals.setdefault(track, []).append(v)
        if typ == BEGIN and name is None:
            fail(where + ": slice without name")
        vals = [sint64(v) for v in many(ef, TE_EXTRA_VALUES)]
        uu = many(ef, TE_EXTRA_UUIDS) or s.ctr_uuids
        if len(vals) > len(uu):
            fail(where + ": %d counter values for %d counter tracks" % (len(vals), len(uu)))
        for u, v in zip(uu, vals):
            used.setdefault(u, where)
            counter_vals.setdefault(u, []).append(v)
        events.setdefault(track, []).append((ts, order, typ, name, ann, vals))
        order += 1
        if exact and vals and typ in (BEGIN, END):
            lane = tracks.get(track)
            if lane and lane["name"] == "sends":
                qp = lane["parent"]
                qp_open[qp] = qp_open.get(qp, 0) + (1 if typ == BEGIN else -1)
                if vals[0] != qp_open[qp]:
                    fail(where + ": sends outstanding %d, open WR slices %d on %s" %
                         (vals[0], qp_open[qp], tracks[qp]["name"]))
    # tracks
    for u, t in tracks.items():
        if t["parent"] and t["parent"] not in tracks:
            fail("track %d (%s): parent %d not described" % (u, t["name"], t["parent"]))
    for u, w in used.items():
        if u not in tracks:
            fail("%s: track %d used, never described" % (w, u))
    totals = dict(bytes=len(data), packets=n_packets, sequences=len(seqs),
                  tracks=len(tracks), wr_slices=0, wr_unfinished=0, wrs_aggregated=0,
                  agg_slices=0, calls=0, counter_samples=0, findings=0, max_depth=0)
    for u, evs in events.items():
        t = tracks[u]
        evs.sort(key=lambda e: (e[0], e[1]))
        if t["kind"] == "counter":
            if any(e[2] != COUNTER for e in evs):
                fail("track %s: slices on a counter track" % t["name"])
            continue
        if any(e[2] == COUNTER for e in evs):
            fail("track %s: counter events on a slice track" % t["name"])
        parent = tracks.get(t["parent"], {})
        is_lane = t["name"] in ("sends", "receives") and parent.get("name", "").startswith("QP ")
        stack = []
        for (ts, _, typ, name, ann, _) in evs:
            if typ == BEGIN:
                stack.append((ts, name, ann))
                totals["max_depth"] = max(totals["max_depth"], len(stack))
            elif typ == END:
                if not stack:
                    fail("track %s: an end at %d with no slice open" % (t["name"], ts))
                b = stack.pop()
                if is_lane:
                    totals["wr_slices"] += 1
                    if stack:
                        fail("track %s: WR slices nested at %d" % (t["name"], ts))
                elif t["name"].startswith("QP "):
                    totals["agg_slices"] += 1
                    totals["wrs_aggregated"] += ann.get("wrs", 0)
                elif t["kind"] == "thread":
                    totals["calls"] += 1
            elif typ == INSTANT:
                totals["findings"] += 1
        if stack:
            if not is_lane:
                fail("track %s: %d slices never end" % (t["name"], len(stack)))
            totals["wr_unfinished"] += len(stack)
    for u, vs in counter_vals.items():
        t = tracks.get(u)
        if not t or t["kind"] != "counter":
            fail("counter values for track %d, not a counter track" % u)
        totals["counter_samples"] += len(vs)
        if ("outstanding" in t["name"] or "posted" in t["name"] or
                "expected" in t["name"]) and min(vs) < 0:
            fail("counter %s went negative (%d)" % (t["name"], min(vs)))
    wrs = totals["wr_slices"] + totals["wrs_aggregated"]
    if expect_wrs is not None and wrs != expect_wrs:
        fail("%d WRs (%d slices, %d aggregated), expected %d" %
             (wrs, totals["wr_slices"], totals["wrs_aggregated"], expect_wrs))
    if wrs:
        totals["bytes_per_wr"] = round(len(data) / wrs, 2)
    print(json.dumps(totals, sort_keys=True))


if __name__ == "__main__":
    main()
