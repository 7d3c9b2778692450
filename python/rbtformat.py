"""rbtformat - read rbtrace traces (.rbt) from Python, through librbtformat.so.1.

    import rbtformat
    with rbtformat.Trace("client.rbt") as t:
        print(t.header["cmdline"])
        for ev in t:                      # one dict per event, in time order
            if ev["type"] == "post_send":
                print(ev["t_ns"], [wr["wr_id"] for wr in ev["wrs"]])
        print(t.stats["events"], t.stats["finished"])

    df = rbtformat.wr_frame("client.rbt")  # needs python3-pandas: one row per WR

Events are the dicts of `rbtrace dump --json` (the library's own JSON printer:
every field of docs/trace_format.md under its name, plus type, stream, ts in
trace clock ticks and t_ns since the trace began). The library is found through
$RBTFORMAT_LIB, then beside this file's prefix (PREFIX/lib/python3/dist-packages
-> PREFIX/lib), then the system's library path. This module only reads: it
never writes a trace, and it depends on nothing but the standard library
(pandas only for wr_frame()). See docs/reader-api.md.
"""

import ctypes
import json
import os

__all__ = ["Trace", "TraceError", "events", "wrs", "wr_frame", "library", "verbs_name"]

_lib = None


class TraceError(Exception):
    """A trace that cannot be opened or read; the message says why."""


class _ClockPair(ctypes.Structure):
    _fields_ = [("ticks", ctypes.c_uint64), ("mono_ns", ctypes.c_uint64),
                ("real_ns", ctypes.c_uint64)]


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_uint32),
                ("ppid", ctypes.c_uint32), ("clock_source", ctypes.c_uint32),
                ("clock_hz", ctypes.c_uint64), ("start", _ClockPair),
                ("host", ctypes.c_char_p), ("cmdline", ctypes.c_char_p),
                ("tool", ctypes.c_char_p), ("series", ctypes.c_char_p),
                ("series_index", ctypes.c_uint64)]


class _Stats(ctypes.Structure):
    _fields_ = [("chunks", ctypes.c_uint64), ("events", ctypes.c_uint64),
                ("events_by_type", ctypes.c_uint64 * 64),
                ("bad_chunks", ctypes.c_uint64), ("bad_bytes", ctypes.c_uint64),
                ("lost_events_in_bad_chunks", ctypes.c_uint64),
                ("first_damage_offset", ctypes.c_uint64),
                ("truncated", ctypes.c_int), ("finished", ctypes.c_int),
                ("unknown_events", ctypes.c_uint64),
                ("unreadable_regions", ctypes.c_uint64),
                ("series_files", ctypes.c_uint32),
                ("carried_skipped", ctypes.c_uint64)]


def _candidates():
    env = os.environ.get("RBTFORMAT_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    prefix = os.path.normpath(os.path.join(here, "..", "..", ".."))
    out = [os.path.join(prefix, d, "librbtformat.so.1")
           for d in ("lib", "lib/x86_64-linux-gnu")]
    return [p for p in out if os.path.exists(p)] + ["librbtformat.so.1"]


def library():
    """The loaded librbtformat (ctypes.CDLL), loaded on first use."""
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(str(e))
    else:
        raise TraceError("librbtformat.so.1 not found (install rbtrace, or set "
                         "RBTFORMAT_LIB): " + "; ".join(errors))
    vp = ctypes.c_void_p
    lib.rbt_reader_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp)]
    lib.rbt_reader_open.restype = ctypes.c_int
    lib.rbt_reader_close.argtypes = [vp]
    lib.rbt_reader_close.restype = None
    lib.rbt_reader_header.argtypes = [vp]
    lib.rbt_reader_header.restype = ctypes.POINTER(_Header)
    lib.rbt_reader_next.argtypes = [vp, ctypes.POINTER(vp)]
    lib.rbt_reader_next.restype = ctypes.c_int
    lib.rbt_reader_stats.argtypes = [vp]
    lib.rbt_reader_stats.restype = ctypes.POINTER(_Stats)
    lib.rbt_reader_error.argtypes = [vp]
    lib.rbt_reader_error.restype = ctypes.c_char_p
    lib.rbt_strerror.argtypes = [ctypes.c_int]
    lib.rbt_strerror.restype = ctypes.c_char_p
    lib.rbt_event_format_json.argtypes = [ctypes.POINTER(_Header), vp,
                                          ctypes.c_char_p, ctypes.c_size_t]
    lib.rbt_event_format_json.restype = ctypes.c_size_t
    lib.rbt_verbs_name.argtypes = [ctypes.c_int, ctypes.c_uint64]
    lib.rbt_verbs_name.restype = ctypes.c_char_p
    lib.rbt_event_name.argtypes = [ctypes.c_uint32]
    lib.rbt_event_name.restype = ctypes.c_char_p
    _lib = lib
    return lib


# enum rbt_verbs_enum
_WR_OPCODE, _WC_OPCODE, _WC_STATUS = 0, 1, 2


def verbs_name(which, value):
    """libibverbs' name for a number a trace stores: verbs_name("wr_opcode", 0)
    is "RDMA_WRITE"; which is wr_opcode, wc_opcode, wc_status, qp_state or
    qp_type. None for a value the enum does not name."""
    kinds = {"wr_opcode": 0, "wc_opcode": 1, "wc_status": 2, "qp_state": 3, "qp_type": 4}
    if which not in kinds:
        raise ValueError("verbs_name: which is one of " + ", ".join(kinds))
    if value is None:
        return None
    n = library().rbt_verbs_name(kinds[which], value)
    return n.decode() if n is not None else None


def _s(b):
    return b.decode("utf-8", "backslashreplace") if b is not None else ""


class Trace:
    """An open trace. Iterating yields its events once, as dicts."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._lib = library()
        self._r = ctypes.c_void_p()
        err = self._lib.rbt_reader_open(os.fsencode(self.path), ctypes.byref(self._r))
        if err:
            raise TraceError("%s: %s" % (self.path, _s(self._lib.rbt_strerror(err))))
        self._hdr = self._lib.rbt_reader_header(self._r)
        h = self._hdr.contents
        self.header = {
            "version": h.version, "pid": h.pid, "ppid": h.ppid,
            "clock_source": h.clock_source, "clock_hz": h.clock_hz,
            "start_ticks": h.start.ticks, "start_mono_ns": h.start.mono_ns,
            "start_real_ns": h.start.real_ns, "host": _s(h.host),
            "cmdline": _s(h.cmdline), "tool": _s(h.tool),
        }
        self._buf = ctypes.create_string_buffer(1 << 16)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def close(self):
        if getattr(self, "_r", None):
            self._lib.rbt_reader_close(self._r)
            self._r = None

    def __iter__(self):
        if not self._r:
            raise TraceError("%s: closed" % self.path)
        ev = ctypes.c_void_p()
        while True:
            rc = self._lib.rbt_reader_next(self._r, ctypes.byref(ev))
            if rc < 0:
                raise TraceError("%s: %s (%s)" % (self.path,
                                                  _s(self._lib.rbt_strerror(rc)),
                                                  _s(self._lib.rbt_reader_error(self._r))))
            if rc == 0:
                return
            n = self._lib.rbt_event_format_json(self._hdr, ev, self._buf, len(self._buf))
            if n >= len(self._buf):  # a big event: grow and print it again
                self._buf = ctypes.create_string_buffer(n + 1)
                self._lib.rbt_event_format_json(self._hdr, ev, self._buf, len(self._buf))
            yield json.loads(self._buf.value.decode("utf-8", "backslashreplace"))

    @property
    def stats(self):
        """What the reader saw so far: events, chunks, per-type counts, damage,
        and whether the trace was finished cleanly (known at the end)."""
        if not self._r:
            raise TraceError("%s: closed" % self.path)
        s = self._lib.rbt_reader_stats(self._r).contents
        by_type = {}
        for i, c in enumerate(s.events_by_type):
            if c:
                by_type[_s(self._lib.rbt_event_name(i)) or "unknown"] = c
        return {"events": s.events, "chunks": s.chunks, "by_type": by_type,
                "bad_chunks": s.bad_chunks, "bad_bytes": s.bad_bytes,
                "truncated": bool(s.truncated), "finished": bool(s.finished),
                "unknown_events": s.unknown_events,
                "error": _s(self._lib.rbt_reader_error(self._r))}


def events(path):
    """Every event of the trace at path, as dicts, in time order (the reader merges the streams)."""
    with Trace(path) as t:
        yield from t


def wrs(path):
    """One dict per completed work request (qp_num, wr_id, kind, opcode and
    opcode_name, status and status_name, byte_len, post_ns, done_ns,
    latency_ns): its post joined to the completion
    that retired it on (QP number, wr_id), the oldest post first when a program
    reuses wr_ids. latency_ns runs from the post's entry to the end of the poll
    that returned the completion; receives are included (kind "recv": mostly
    waiting for the peer). Unsignaled sends, which have no completion of their
    own, are not listed (`rbtrace report` attributes them)."""
    pending = {}
    for ev in events(path):
        t = ev["type"]
        if t in ("post_send", "post_recv") and ev.get("ret") == 0:
            kind = "send" if t == "post_send" else "recv"
            for wr in ev.get("wrs", []):
                pending.setdefault((ev["qp_num"], wr["wr_id"]), []).append(
                    (ev["t_ns"], kind, wr.get("opcode")))
        elif t == "poll_cq":
            done = ev["t_ns"] + (ev["ts_exit"] - ev["ts"]) * 1e9 / _hz(path)
            for wc in ev.get("wcs", []):
                q = pending.get((wc["qp_num"], wc["wr_id"]))
                if not q:
                    continue
                post_ns, kind, op = q.pop(0)
                if kind == "recv":
                    op = wc.get("opcode")
                yield {"qp_num": wc["qp_num"], "wr_id": wc["wr_id"], "kind": kind,
                       "opcode": op,
                       "opcode_name": verbs_name("wr_opcode" if kind == "send"
                                                 else "wc_opcode", op),
                       "status": wc.get("status"),
                       "status_name": verbs_name("wc_status", wc.get("status")),
                       "byte_len": wc.get("byte_len"),
                       "post_ns": post_ns, "done_ns": done,
                       "latency_ns": done - post_ns}


_hz_cache = {}


def _hz(path):
    if path not in _hz_cache:
        with Trace(path) as t:
            _hz_cache[path] = t.header["clock_hz"] or 1e9
    return _hz_cache[path]


def wr_frame(path):
    """wrs(path) as a pandas DataFrame (python3-pandas must be installed)."""
    try:
        import pandas
    except ImportError as e:
        raise TraceError("wr_frame() needs pandas (apt install python3-pandas)") from e
    cols = ["qp_num", "wr_id", "kind", "opcode", "opcode_name", "status",
            "status_name", "byte_len", "post_ns", "done_ns", "latency_ns"]
    return pandas.DataFrame(list(wrs(path)), columns=cols)
