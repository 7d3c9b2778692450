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
    n = len(b)
    while True:
        if i >= n:
            raise ValueError("varint cut at %d" % i)
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long at %d" % i)


def parse(b, where, rep=()):
    """One message as {field: value}: the last value of a field, or the list of
    them for the fields in rep; varints as int, length-delimited fields as bytes,
    fixed64 as its 8 bytes. One-byte tags and values take the fast path."""
    d = {}
    i = 0
    n = len(b)
    try:
        while i < n:
            tag = b[i]
            i += 1
            if tag & 0x80:
                tag, i = varint(b, i - 1)
            f = tag >> 3
            wt = tag & 7
            if wt == 0:
                if i < n and b[i] < 0x80:
                    v = b[i]
                    i += 1
                else:
                    v, i = varint(b, i)
            elif wt == 2:
                if i < n and b[i] < 0x80:
                    ln = b[i]
                    i += 1
                else:
                    ln, i = varint(b, i)
                if i + ln > n:
                    raise ValueError("length %d beyond the message" % ln)
                v = b[i:i + ln]
                i += ln
            elif wt == 1:
                if i + 8 > n:
                    raise ValueError("fixed64 cut")
                v = b[i:i + 8]
                i += 8
            elif wt == 5:
                v = b[i:i + 4]
                i += 4
            else:
                raise ValueError("wire type %d" % wt)
            if f == 0:
                raise ValueError("field 0")
            if f in rep:
                if f in d:
                    d[f].append(v)
                else:
                    d[f] = [v]
            else:
                d[f] = v
    except ValueError as e:
        fail("%s: %s" % (where, e))
    return d


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


class Where:
    """'packet N', formatted only when a message needs it."""

    def __init__(self, n):
        self.n = n

    def __add__(self, s):
        return "packet %d%s" % (self.n, s)

    def __str__(self):
        return "packet %d" % self.n


class Seq:
    def __init__(self):
        self.cleared = False
        self.names, self.cats, self.anames = {}, {}, {}
        self.clock_id = None  # default timestamp clock
        self.track = 0
        self.ctr_uuids = []
        self.clock = None  # incremental clock value, None before a snapshot


def packets(data):
    """The packets of the Trace (field 1), as memoryview slices."""
    mv = memoryview(data)
    i, n = 0, len(data)
    k = 0
    while i < n:
        try:
            tag, i = varint(data, i)
            ln, i = varint(data, i)
        except ValueError as e:
            fail("Trace: packet %d: %s" % (k, e))
        if tag != (TRACE_PACKET << 3 | 2):
            fail("Trace: packet %d: field %d is not a packet" % (k, tag >> 3))
        if i + ln > n:
            fail("Trace: packet %d cut" % k)
        yield mv[i:i + ln]
        i += ln
        k += 1


TE_REP = (TE_CAT_IID, TE_EXTRA_UUIDS, TE_EXTRA_VALUES, TE_ANNOT)


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
    used = {}  # uuid -> where it was first used
    events = {}  # uuid -> [(ts, order, type, name, args)]
    counter_vals = {}  # uuid -> [values]
    qp_open = {}  # QP track uuid -> open send slices (file order)
    n_packets = 0
    order = 0
    for pkt in packets(data):
        where = Where(n_packets)
        n_packets += 1
        pf = parse(pkt, where)
        seq_id = pf.get(TP_SEQ_ID)
        if not seq_id:
            fail(where + ": no trusted_packet_sequence_id")
        s = seqs.get(seq_id)
        if s is None:
            s = seqs[seq_id] = Seq()
        if pf.get(TP_SEQ_FLAGS, 0) & 1:
            s.__init__()
            s.cleared = True
        d = pf.get(TP_DEFAULTS)
        if d is not None:
            if not s.cleared:
                fail(where + ": defaults on a sequence never cleared")
            df = parse(d, where)
            s.clock_id = df.get(58)
            ted = df.get(11)
            if ted is not None:
                tf = parse(ted, where, (TE_EXTRA_UUIDS,))
                s.track = tf.get(TE_TRACK, 0)
                s.ctr_uuids = tf.get(TE_EXTRA_UUIDS, [])
        idata = pf.get(TP_INTERNED)
        if idata is not None:
            if not s.cleared:
                fail(where + ": interned data on a sequence never cleared")
            idf = parse(idata, where, (1, 2, 3))
            for kf, entries in idf.items():
                table = {1: s.cats, 2: s.names, 3: s.anames}.get(kf)
                if table is None:
                    fail(where + ": interned field %d not expected" % kf)
                for entry in entries:
                    ef = parse(entry, where)
                    iid, name = ef.get(1), ef.get(2)
                    if not iid or name is None:
                        fail(where + ": interned entry without iid or name")
                    name = bytes(name).decode()
                    if table.get(iid, name) != name:
                        fail(where + ": iid %d redefined" % iid)
                    table[iid] = name
        cs = pf.get(TP_CLOCKS)
        if cs is not None:
            clocks = {}
            for c in parse(cs, where, (1,)).get(1, []):
                cf = parse(c, where)
                clocks[cf.get(1)] = (cf.get(2, 0), cf.get(3, 0))
            if BOOTTIME not in clocks:
                fail(where + ": clock snapshot without BOOTTIME")
            if SEQ_CLOCK in clocks:
                if not clocks[SEQ_CLOCK][1]:
                    fail(where + ": clock 64 not incremental")
                s.clock = clocks[SEQ_CLOCK][0]
                if clocks[BOOTTIME][0] != s.clock:
                    fail(where + ": clocks 6 and 64 differ at the snapshot")
            continue
        ts = pf.get(TP_TIMESTAMP)
        if ts is not None:
            cid = pf.get(TP_CLOCK_ID, s.clock_id)
            if cid == SEQ_CLOCK:
                if s.clock is None:
                    fail(where + ": incremental timestamp before the clock snapshot")
                s.clock += ts
                ts = s.clock
            elif cid not in (None, BOOTTIME):
                fail(where + ": clock %r" % cid)
        desc = pf.get(TP_TRACK_DESC)
        if desc is not None:
            df = parse(desc, where)
            uuid = df.get(TD_UUID)
            if not uuid:
                fail(where + ": track without uuid")
            kind = ("process" if TD_PROCESS in df else "thread" if TD_THREAD in df else
                    "counter" if TD_COUNTER in df else "slices")
            name = df.get(TD_NAME)
            if name is None and TD_PROCESS in df:
                name = parse(df[TD_PROCESS], where).get(6, b"")
            t = dict(parent=df.get(TD_PARENT), name=bytes(name or b"").decode(), kind=kind)
            old = tracks.get(uuid)
            if old and (old["parent"], old["kind"]) != (t["parent"], t["kind"]):
                fail(where + ": track %d described twice differently" % uuid)
            tracks[uuid] = t
        te = pf.get(TP_TRACK_EVENT)
        if te is None:
            continue
        if ts is None:
            fail(where + ": track event without timestamp")
        ef = parse(te, where, TE_REP)
        typ = ef.get(TE_TYPE)
        if typ not in (BEGIN, END, INSTANT, COUNTER):
            fail(where + ": event type %r" % typ)
        track = ef.get(TE_TRACK, s.track)
        if not track:
            fail(where + ": event on no track")
        if track not in used:
            used[track] = where
        name = None
        iid = ef.get(TE_NAME_IID)
        if iid is not None:
            name = s.names.get(iid)
            if name is None:
                fail(where + ": name iid %d not defined on sequence %d" % (iid, seq_id))
        elif TE_NAME in ef:
            name = bytes(ef[TE_NAME]).decode()
        for c in ef.get(TE_CAT_IID, ()):
            if c not in s.cats:
                fail(where + ": category iid %d not defined" % c)
        ann = {}
        for a in ef.get(TE_ANNOT, ()):
            af = parse(a, where)
            if DA_NAME_IID in af:
                an = s.anames.get(af[DA_NAME_IID])
                if an is None:
                    fail(where + ": annotation name iid %d not defined" % af[DA_NAME_IID])
            else:
                an = bytes(af.get(DA_NAME, b"")).decode()
            v = af.get(DA_UINT)
            ann[an] = v if v is not None else bytes(af.get(DA_STRING, b"")).decode()
        if typ == COUNTER:
            if TE_COUNTER in ef:
                v = sint64(ef[TE_COUNTER])
            elif TE_DCOUNTER in ef:
                v = struct.unpack("<d", ef[TE_DCOUNTER])[0]
            else:
                fail(where + ": counter event without value")
            counter_vals.setdefault(track, []).append(v)
        elif typ == BEGIN and name is None:
            fail(where + ": slice without name")
        vals = [sint64(v) for v in ef.get(TE_EXTRA_VALUES, ())]
        if vals:
            uu = ef.get(TE_EXTRA_UUIDS) or s.ctr_uuids
            if len(vals) > len(uu):
                fail(where + ": %d counter values for %d counter tracks" % (len(vals), len(uu)))
            for u, v in zip(uu, vals):
                if u not in used:
                    used[u] = where
                cv = counter_vals.get(u)
                if cv is None:
                    counter_vals[u] = [v]
                else:
                    cv.append(v)
        ev = events.get(track)
        if ev is None:
            ev = events[track] = []
        ev.append((ts, order, typ, name, ann))
        order += 1
        if exact and vals and typ != COUNTER:
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
        depth = 0
        for (ts, _, typ, name, ann) in evs:
            if typ == BEGIN:
                depth += 1
                if depth > totals["max_depth"]:
                    totals["max_depth"] = depth
            elif typ == END:
                if not depth:
                    fail("track %s: an end at %d with no slice open" % (t["name"], ts))
                depth -= 1
                if is_lane:
                    totals["wr_slices"] += 1
                    if depth:
                        fail("track %s: WR slices nested at %d" % (t["name"], ts))
                elif t["name"].startswith("QP "):
                    totals["agg_slices"] += 1
                    totals["wrs_aggregated"] += ann.get("wrs", 0)
                elif t["kind"] == "thread":
                    totals["calls"] += 1
            elif typ == INSTANT:
                totals["findings"] += 1
        if depth:
            if not is_lane:
                fail("track %s: %d slices never end" % (t["name"], depth))
            totals["wr_unfinished"] += depth
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
