#!/usr/bin/env python3
"""html_check.py - checks the DOM headless Chromium dumped of `rbtrace report
--format=html` (after the page's script ran) against the JSON report of the same
traces: one row per QP with traffic, its four plots over time with one point per
time bin, the series adding up to what the report counts, no script error; the
round-trip split of paired traces; findings linked to marks at their time.

  html_check.py dom DOM.html REPORT.json [rt] [stall] [hl=N]
  html_check.py console CHROME_STDERR      (no console line: the page logs nothing)
"""
import html.parser
import json
import re
import sys


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


class Dom(html.parser.HTMLParser):
    """Elements as (tag, attrs, parent index); text of <script> and <pre>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.els, self.stack, self.text = [], [], {}

    def handle_starttag(self, tag, attrs):
        parent = self.stack[-1] if self.stack else -1
        self.els.append((tag, dict(attrs), parent))
        if tag not in ("meta", "br", "img", "input", "link"):
            self.stack.append(len(self.els) - 1)

    def handle_startendtag(self, tag, attrs):
        parent = self.stack[-1] if self.stack else -1
        self.els.append((tag, dict(attrs), parent))

    def handle_endtag(self, tag):
        while self.stack:
            i = self.stack.pop()
            if self.els[i][0] == tag:
                break

    def handle_data(self, data):
        if self.stack:
            i = self.stack[-1]
            self.text[i] = self.text.get(i, "") + data

    def under(self, root):
        """Indices of the elements below root."""
        out, seen = [], {root}
        for i, (_, _, p) in enumerate(self.els):
            if p in seen:
                seen.add(i)
                out.append(i)
        return out

    def by_id(self, ident):
        for i, (_, a, _) in enumerate(self.els):
            if a.get("id") == ident:
                return i
        return None

    def classes(self, i):
        return self.els[i][1].get("class", "").split()


def npoints(poly):
    return len(poly.get("points", "").split())


def check_dom(path, report, opts):
    d = Dom()
    d.feed(open(path, encoding="utf-8").read())
    rep = json.load(open(report))
    body = [a for t, a, _ in d.els if t == "body"]
    if not body:
        fail("no <body> in the dumped DOM")
    body = body[0]
    errs = d.by_id("rbt-errors")
    if body.get("data-js-errors") != "0" or (errs is not None and d.text.get(errs, "").strip()):
        fail("script errors in the page: %s" % (d.text.get(errs, "") if errs is not None else body))
    if "data-plots-drawn" not in body:
        fail("the page's script did not finish (no data-plots-drawn on <body>)")
    data = json.loads(d.text[d.by_id("rbt-data")])
    nb = data["bins"]
    if nb < 1 or nb > 128:
        fail("bins %d" % nb)
    rows = 0
    for ti, tr in enumerate(rep["traces"]):
        busy = [q for q in tr["qps"] if q["wrs"] + q["recv_wrs"] > 0]
        want = min(len(busy), 16)
        drawn = [q for q in busy if d.by_id("qp-%d-%d" % (ti, q["qp_num"])) is not None]
        if len(drawn) != want:
            fail("trace %d: %d QP rows drawn, %d QPs with traffic" % (ti, len(drawn), want))
        cqpeak = max([c["peak_outstanding"] for c in tr["cqs"]] or [0])
        for q in drawn:
            rows += 1
            row = d.by_id("qp-%d-%d" % (ti, q["qp_num"]))
            sub = d.under(row)
            svgs = [i for i in sub if d.els[i][0] == "svg" and "plot" in d.classes(i)]
            kinds = [d.els[i][1].get("data-kind") for i in svgs]
            if kinds != ["rate", "outstanding", "cq", "latency"][:4 if q["wrs"] else 3]:
                fail("QP 0x%x: plots %s" % (q["qp_num"], kinds))
            for i in svgs:
                polys = [d.els[k][1] for k in d.under(i) if d.els[k][0] == "polyline"]
                if not polys or int(d.els[i][1].get("data-points", "0")) <= 0:
                    fail("QP 0x%x: plot %s has no points" % (q["qp_num"], d.els[i][1].get("data-kind")))
                kind = d.els[i][1]["data-kind"]
                if kind in ("rate", "outstanding", "cq"):
                    first = polys[0]
                    if npoints(first) != nb:
                        fail("QP 0x%x: %s plot has %d points, %d bins" %
                             (q["qp_num"], kind, npoints(first), nb))
            js = [x for x in data["traces"][ti]["qps"] if x["qpn"] == q["qp_num"]][0]
            done = sum(g["wrs"] for g in q["groups"] if g["opcode"] != "RECV")
            recvs = sum(g["wrs"] for g in q["groups"] if g["opcode"] == "RECV")
            if (sum(js["done"]), sum(js["posted"]), sum(js["recvs"])) != (done, q["wrs"], recvs):
                fail("QP 0x%x: series add up to %d posted / %d completed / %d receives, the "
                     "report has %d / %d / %d" % (q["qp_num"], sum(js["posted"]), sum(js["done"]),
                                                   sum(js["recvs"]), q["wrs"], done, recvs))
            if max(js["out"]) > max(q["caps"]["max_send_wr"], 1) or (q["wrs"] and max(js["out"]) < 1):
                fail("QP 0x%x: outstanding peak %d, max_send_wr %d" %
                     (q["qp_num"], max(js["out"]), q["caps"]["max_send_wr"]))
            for c in js["cqs"]:
                if len(c["occ"]) != nb or max(c["occ"]) > cqpeak:
                    fail("QP 0x%x: CQ occupancy peak %d above the report's %d" %
                         (q["qp_num"], max(c["occ"]), cqpeak))
            if "rt" in opts and q["roundtrips"] and q["roundtrips"].get("count"):
                rt = d.by_id("rt-%d-%d" % (ti, q["qp_num"]))
                if rt is None:
                    fail("QP 0x%x: round trips but no split drawn" % q["qp_num"])
                parts = [d.els[k][1].get("data-part") for k in d.under(rt)
                         if d.els[k][0] == "rect" and d.els[k][1].get("data-part")]
                if parts != ["post", "wire", "app"]:
                    fail("QP 0x%x: round-trip split %s" % (q["qp_num"], parts))
                if js["rt"]["count"] != q["roundtrips"]["count"] or sum(js["rt"]["n"]) != js["rt"]["count"]:
                    fail("QP 0x%x: round trips over time %d, report %d" %
                         (q["qp_num"], sum(js["rt"]["n"]), q["roundtrips"]["count"]))
    if "rt" in opts and not [i for i, (t, a, _) in enumerate(d.els) if "rtrow" in a.get("class", "")]:
        fail("paired traces without a round-trip split")
    if "stall" in opts:
        st = [(i, f) for i, f in enumerate(rep["findings"]) if f["code"] == "wr_stalled"]
        if not st:
            fail("no wr_stalled finding in the report")
        for i, f in st:
            link = [a for t, a, _ in d.els if t == "a" and a.get("data-f") == str(i)]
            if not link or link[0].get("href") != "#qp-%d-%d" % (f["trace"], f["qp_num"]):
                fail("finding %d (wr_stalled) has no link to its QP row: %s" % (i, link))
            row = d.by_id("qp-%d-%d" % (f["trace"], f["qp_num"]))
            marks = [k for k in d.under(row) if "fm-%d" % i in d.classes(k)]
            if len(marks) != 4:
                fail("finding %d: %d marks in its QP's plots" % (i, len(marks)))
            # the picture of the stall: the WR still outstanding in the last bin, no
            # completion in the last half, the CQ polled empty there
            js = [x for x in data["traces"][f["trace"]]["qps"] if x["qpn"] == f["qp_num"]][0]
            half = nb // 2
            empty = sum(sum(c.get("empty", [0] * nb)[half:]) for c in js["cqs"])
            if js["out"][-1] < 1 or sum(js["done"][half:]) or empty < 1000:
                fail("QP 0x%x: no stall in the series (outstanding at the end %d, completions "
                     "late %d, empty polls late %d)" %
                     (f["qp_num"], js["out"][-1], sum(js["done"][half:]), empty))
    for o in opts:
        if o.startswith("hl="):
            n = o[3:]
            hl = [k for k in range(len(d.els)) if "fm-" + n in d.classes(k) and "hl" in d.classes(k)]
            fl = [k for k in range(len(d.els)) if "flash" in d.classes(k)]
            if not hl or not fl:
                fail("#finding-%s: the marks are not highlighted (%d) or no row lit (%d)" %
                     (n, len(hl), len(fl)))
    print("dom ok: %s: %d QP rows, %d bins, %s plots drawn" %
          (path, rows, nb, body.get("data-plots-drawn")))


def check_console(path):
    lines = [l for l in open(path, errors="replace") if ":CONSOLE" in l]
    if lines:
        fail("the page logged to the console:\n" + "".join(lines[:10]))
    print("console ok: %s" % path)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "dom":
        check_dom(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif len(sys.argv) == 3 and sys.argv[1] == "console":
        check_console(sys.argv[2])
    else:
        fail(__doc__.strip().splitlines()[-2].strip())
