#!/usr/bin/env bash
# python_reader_test.sh - the Python module (python/rbtformat.py) over the
# built librbtformat.so.1: its ctypes structs laid out as the C header's;
# per-type event counts equal `rbtrace info`'s on a
# synthetic and on a real recorded trace; header fields; every WR joined for a
# pingpong; a non-trace and a missing file raise TraceError with the reason; a
# damaged trace yields its intact events and says so in stats; wr_frame gives a
# DataFrame where python3-pandas is installed and says what to install where not.
set -euo pipefail
root=$PWD
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/pyreader.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export RBTFORMAT_LIB=$root/trace_format/librbtformat.so.1 PYTHONPATH=$root/python
"$root/tests/make_trace" "$tmp/synth.rbt" >/dev/null
cp "$root/tests/data/rc_pingpong_client.rbt" "$tmp/real.rbt"
head -c $(($(stat -c %s "$tmp/synth.rbt") * 2 / 3)) "$tmp/synth.rbt" >"$tmp/cut.rbt"
"$root/tests/rbtformat_layout" >"$tmp/layout"
for t in synth real; do "$root/cli/rbtrace" info "$tmp/$t.rbt" >"$tmp/$t.info"; done
# Debian's python3, the one the package installs the module for
/usr/bin/python3 - "$tmp" <<'PY'
import ctypes, os, re, sys
import rbtformat
tmp = sys.argv[1]

# the ctypes mirrors of struct rbt_header and rbt_reader_stats are the C layout
for line in open(os.path.join(tmp, "layout")):
    name, off, size = line.split()
    sname, field = name.split(".")
    cls = {"rbt_header": rbtformat._Header, "rbt_reader_stats": rbtformat._Stats}[sname]
    if field == "SIZE":
        assert ctypes.sizeof(cls) == int(size), (sname, ctypes.sizeof(cls), size)
    else:
        f = getattr(cls, field)
        assert (f.offset, f.size) == (int(off), int(size)), (name, f.offset, f.size, off, size)

def info_counts(path):
    text = open(path).read()
    counts = {m[0]: int(m[1]) for m in re.findall(r"^  ([a-z_]+) +(\d+)$", text, re.M)}
    return counts, int(re.search(r"^events: +(\d+)$", text, re.M).group(1))

for name in ("synth", "real"):
    want, total = info_counts(os.path.join(tmp, name + ".info"))
    got = {}
    with rbtformat.Trace(os.path.join(tmp, name + ".rbt")) as t:
        for ev in t:
            assert "stream" in ev and "ts" in ev and "t_ns" in ev, ev
            got[ev["type"]] = got.get(ev["type"], 0) + 1
        st = t.stats
    assert got == want, (name, got, want)
    assert st["events"] == total and st["finished"] and st["by_type"] == want, st
    print("%s: %d events in %d types, as rbtrace info" % (name, total, len(got)))

with rbtformat.Trace(os.path.join(tmp, "real.rbt")) as t:
    h = t.header
assert h["tool"].startswith("librbtrace ") and "(format 1)" in h["tool"], h
assert h["cmdline"].startswith("ibv_rc_pingpong"), h
assert h["clock_hz"] > 0 and h["pid"] > 0, h

w = list(rbtformat.wrs(os.path.join(tmp, "real.rbt")))
sends = [x for x in w if x["kind"] == "send"]
assert len(sends) == 100 and all(x["latency_ns"] > 0 and x["status"] == 0 for x in w), len(w)
w = list(rbtformat.wrs(os.path.join(tmp, "synth.rbt")))
assert len(w) == 400 and {x["kind"] for x in w} == {"send", "recv"}, len(w)
assert {x["status_name"] for x in w} == {"SUCCESS"} and rbtformat.verbs_name("wc_status", 5) == "WR_FLUSH_ERR"

for bad, why in (("/etc/hostname", "not"), (os.path.join(tmp, "missing.rbt"), "No such file")):
    try:
        rbtformat.Trace(bad)
        raise SystemExit("no error for " + bad)
    except rbtformat.TraceError as e:
        assert bad in str(e) and why.lower() in str(e).lower(), str(e)

with rbtformat.Trace(os.path.join(tmp, "cut.rbt")) as t:
    n = sum(1 for _ in t)
    st = t.stats
assert 0 < n < 826 and st["truncated"] and not st["finished"], (n, st)
print("truncated: %d events salvaged, %s" % (n, st["error"]))

try:
    import pandas
except ImportError:
    pandas = None
if pandas:
    df = rbtformat.wr_frame(os.path.join(tmp, "synth.rbt"))
    assert len(df) == 400 and (df.latency_ns > 0).all(), df.describe()
    print("pandas: %d rows" % len(df))
else:
    try:
        rbtformat.wr_frame(os.path.join(tmp, "synth.rbt"))
        raise SystemExit("wr_frame without pandas did not fail")
    except rbtformat.TraceError as e:
        assert "python3-pandas" in str(e), str(e)
    print("pandas not installed: wr_frame says so")
PY
echo PASS
