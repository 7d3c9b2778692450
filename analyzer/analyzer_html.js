/* analyzer_html.js - the script of `rbtrace report --format=html` (embedded into the
 * page by analyzer/html_embed.sh): draws the per-QP rows of plots over time (WR
 * rate, send WRs outstanding, CQ occupancy against its depth, latency p50/p99), the
 * round-trip split of paired traces and the latency distributions from the JSON in
 * #rbt-data into SVG and canvas, and links each finding to its time in the plots.
 * It must never fetch anything: the page opens offline. Errors land in
 * #rbt-errors (window.onerror, set in the page's head) so a test can read them. */
(function () {
	'use strict';
	var D = JSON.parse(document.getElementById('rbt-data').textContent);
	/* the SVG namespace, from the parser (so the page names no URL at all) */
	var probe = document.createElement('div');
	probe.innerHTML = '<svg></svg>';
	var NS = probe.firstChild.namespaceURI;
	var drawn = 0;
	var COL = {
		post: '#1f77b4', nic: '#ff7f0e', poll: '#2ca02c', e2e: '#7f7f7f',
		nic_lo: '#ffbb78', nic_hi: '#d62728', poll_hi: '#98df8a',
		recv_wait: '#9467bd', recv_poll: '#8c564b', recv_poll_hi: '#c49c94'
	};

	function fmtNs(ns) {
		if (ns < 1e3) return ns.toFixed(0) + ' ns';
		if (ns < 1e6) return (ns / 1e3).toFixed(ns < 1e4 ? 2 : 1) + ' us';
		if (ns < 1e9) return (ns / 1e6).toFixed(ns < 1e7 ? 2 : 1) + ' ms';
		return (ns / 1e9).toFixed(2) + ' s';
	}
	function fmtNum(v) {
		if (v >= 1e9) return (v / 1e9).toFixed(1) + 'G';
		if (v >= 1e6) return (v / 1e6).toFixed(1) + 'M';
		if (v >= 1e3) return (v / 1e3).toFixed(1) + 'k';
		return String(Math.round(v * 10) / 10);
	}
	function fmtMs(ns) {
		var ms = ns / 1e6;
		return (ms < 10 ? ms.toFixed(2) : ms < 100 ? ms.toFixed(1) : ms.toFixed(0)) + ' ms';
	}
	function mk(tag, attrs, parent) {
		var e = document.createElementNS(NS, tag);
		for (var k in attrs) e.setAttribute(k, attrs[k]);
		if (parent) parent.appendChild(e);
		return e;
	}
	function txt(tag, attrs, parent, s) {
		var e = mk(tag, attrs, parent);
		e.textContent = s;
		return e;
	}
	function niceMax(v) {
		if (!(v > 0)) return 1;
		var p = Math.pow(10, Math.floor(Math.log10(v))), m = v / p;
		return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
	}

	/* ---- one plot over time: series of D.bins values (null: no value) ---- */
	var W = 290, H = 156, L = 48, R = 10, T = 32, B = 22;
	function xOfBin(i) { return L + (W - L - R) * (i + 0.5) / D.bins; }
	function xOfTime(t) { return L + (W - L - R) * (t / D.bin_ns) / D.bins; }

	function plot(parent, kind, title, series, opt) {
		var svg = mk('svg', { width: W, height: H, viewBox: '0 0 ' + W + ' ' + H,
				       'class': 'plot', 'data-kind': kind }, parent);
		txt('text', { x: 4, y: 12, 'class': 'ttl' }, svg, title);
		var ymax = 0, ymin = Infinity;
		series.forEach(function (s) {
			s.v.forEach(function (v) {
				if (v === null || !(v >= 0)) return;
				ymax = Math.max(ymax, v);
				if (v > 0) ymin = Math.min(ymin, v);
			});
		});
		(opt.lines || []).forEach(function (l) { ymax = Math.max(ymax, l.y); });
		var Y, ticks;
		if (opt.log) {
			if (ymin === Infinity) ymin = 1;
			var lo = Math.pow(10, Math.floor(Math.log10(ymin)));
			var hi = Math.pow(10, Math.ceil(Math.log10(Math.max(ymax, ymin))));
			if (hi <= lo) hi = lo * 10;
			Y = function (v) {
				v = Math.max(v, lo);
				return H - B - (H - T - B) * Math.log(v / lo) / Math.log(hi / lo);
			};
			ticks = [];
			for (var d = lo; d <= hi * 1.0001; d *= 10) ticks.push(d);
		} else {
			var top = niceMax(ymax * 1.05);
			Y = function (v) { return H - B - (H - T - B) * v / top; };
			ticks = [0, top / 2, top];
		}
		mk('rect', { x: L, y: T, width: W - L - R, height: H - T - B, 'class': 'frame' }, svg);
		ticks.forEach(function (v) {
			var y = Y(v);
			mk('line', { x1: L, x2: W - R, y1: y, y2: y, 'class': 'grid' }, svg);
			txt('text', { x: L - 3, y: y + 4, 'class': 'ytick' }, svg, opt.fmt(v));
		});
		[0, 0.5, 1].forEach(function (fr) {
			txt('text', { x: L + (W - L - R) * fr, y: H - 6,
				      'class': 'xtick' + (fr === 1 ? ' end' : fr ? ' mid' : '') }, svg,
			    fmtMs(D.t0_ns + D.bin_ns * D.bins * fr));
		});
		(opt.lines || []).forEach(function (l) {
			var y = Y(l.y);
			mk('line', { x1: L, x2: W - R, y1: y, y2: y, 'class': 'limit',
				     stroke: l.color || '#d62728' }, svg);
			txt('text', { x: W - R - 2, y: y - 3, 'class': 'limitlbl end',
				      fill: l.color || '#d62728' }, svg, l.label);
		});
		var points = 0, lx = 4;
		series.forEach(function (s) {
			var seg = [];
			function flush() {
				if (!seg.length) return;
				mk('polyline', { points: seg.join(' '), fill: 'none', stroke: s.color,
						 'stroke-width': 1.5, 'data-series': s.name,
						 'stroke-dasharray': s.dash || 'none' }, svg);
				if (seg.length === 1)
					mk('circle', { cx: seg[0].split(',')[0], cy: seg[0].split(',')[1],
						       r: 1.5, fill: s.color }, svg);
				seg = [];
			}
			s.v.forEach(function (v, i) {
				if (v === null || !(v >= 0)) { flush(); return; }
				seg.push(xOfBin(i).toFixed(1) + ',' + Y(v).toFixed(1));
				points++;
			});
			flush();
			var peak = 0;
			s.v.forEach(function (v) { if (v > peak) peak = v; });
			var lbl = s.name + (opt.peak ? ' (peak ' + opt.fmt(peak) + ')' : '');
			txt('text', { x: lx, y: T - 5, fill: s.color, 'class': 'legend' }, svg, lbl);
			lx += 5.5 * lbl.length + 10;
		});
		svg.setAttribute('data-points', String(points));
		(opt.marks || []).forEach(function (m) {
			var x = xOfTime(m.t);
			if (x < L || x > W - R) return;
			var g = mk('g', { 'class': 'fmark fm-' + m.i + ' ' + m.sev }, svg);
			mk('line', { x1: x, x2: x, y1: T, y2: H - B }, g);
			txt('title', {}, g, m.code + ' at ' + fmtMs(D.t0_ns + m.t));
		});
		drawn++;
		return svg;
	}

	/* the findings that belong in a row: its QP's, and its trace's that name no QP */
	function marksFor(trace, qpn) {
		var out = [];
		D.findings.forEach(function (f, i) {
			if (f.t === null) return;
			if (f.trace >= 0 && f.trace !== trace) return;
			if (f.qpn && f.qpn !== qpn) return;
			out.push({ i: i, t: f.t, code: f.code, sev: f.sev });
		});
		return out;
	}

	var hex = function (n) { return '0x' + n.toString(16); };
	var rate = function (v) { return v * 1e9 / D.bin_ns; };
	function qpRow(tr, ti, q) {
		var row = document.getElementById('qp-' + ti + '-' + q.qpn);
		if (!row) return;
		var marks = marksFor(ti, q.qpn);
		var series = [
			{ name: 'completed', color: '#1f77b4', v: q.done.map(rate) },
			{ name: 'posted', color: '#aec7e8', v: q.posted.map(rate), dash: '4 2' }
		];
		if (q.recvs_n) series.push({ name: 'receives', color: '#9467bd', v: q.recvs.map(rate) });
		/* a program that spins on a CQ nothing arrives on: the polls that came
		 * back empty, on a log scale beside the WRs */
		var spin = false;
		q.cqs.forEach(function (c) {
			if (!c.empty || spin) return;
			spin = true;
			series.push({ name: 'empty polls', color: '#7f7f7f', v: c.empty.map(rate), dash: '1 2' });
		});
		plot(row, 'rate', spin ? 'WR and empty-poll rate (per s, log)' : 'WR rate (per s)', series,
		     { fmt: fmtNum, marks: marks, log: spin });
		plot(row, 'outstanding', 'send WRs outstanding (most per bin)',
		     [{ name: 'outstanding', color: '#ff7f0e', v: q.out }],
		     { fmt: fmtNum, marks: marks, peak: true,
		       lines: q.max_send_wr ? [{ y: q.max_send_wr, label: 'max_send_wr ' + q.max_send_wr,
						 color: '#888' }] : [] });
		var occ = [], lines = [], cc = ['#2ca02c', '#8c564b'];
		q.cqs.forEach(function (c, k) {
			occ.push({ name: c.role, color: cc[k % 2], v: c.occ });
			lines.push({ y: c.cqe, label: c.role + ' depth ' + c.cqe, color: '#d62728' });
		});
		if (!occ.length) occ.push({ name: 'no CQ', color: '#ccc', v: q.out.map(function () { return 0; }) });
		plot(row, 'cq', 'CQ occupancy (completions due) vs depth', occ,
		     { fmt: fmtNum, marks: marks, lines: lines, peak: true });
		if (q.p50 && q.sends_n) {
			plot(row, 'latency', 'send latency end to end', [
				{ name: 'p50', color: '#1f77b4', v: q.p50 },
				{ name: 'p99', color: '#d62728', v: q.p99 }
			], { fmt: fmtNs, log: true, marks: marks });
		}
	}

	/* ---- the round-trip split of paired traces ---- */
	var RTC = { post: '#1f77b4', wire: '#ff7f0e', app: '#2ca02c' };
	var RTN = { post: 'local post', wire: 'NIC and wire', app: 'remote application' };
	function rtRow(el, q) {
		var tot = q.rt.post + q.rt.wire + q.rt.app;
		var w = 600, h = 46, svg = mk('svg', { width: w, height: h, 'class': 'rtbar',
						       viewBox: '0 0 ' + w + ' ' + h }, el);
		var x = 0;
		['post', 'wire', 'app'].forEach(function (k) {
			var ww = tot > 0 ? (w - 2) * q.rt[k] / tot : 0;
			mk('rect', { x: x, y: 2, width: Math.max(ww, 0), height: 22, fill: RTC[k],
				     'data-part': k }, svg);
			if (ww > 90)
				txt('text', { x: x + 4, y: 17, 'class': 'rtlbl' }, svg, RTN[k] + ' ' + fmtNs(q.rt[k]));
			x += ww;
		});
		txt('text', { x: 0, y: 40, 'class': 'legend' }, svg,
		    'mean ' + fmtNs(tot) + ' = local post ' + fmtNs(q.rt.post) + ' + NIC and wire ' +
		    fmtNs(q.rt.wire) + ' + remote application ' + fmtNs(q.rt.app) +
		    '   (p50 round trip ' + fmtNs(q.rt.rtt_p50) + ', ' + q.rt.count + ' round trips)');
		drawn++;
		/* over time: the mean split per bin, stacked */
		var ts = mk('svg', { width: W * 2, height: H, 'class': 'plot', 'data-kind': 'rt',
				      viewBox: '0 0 ' + (W * 2) + ' ' + H }, el);
		txt('text', { x: 4, y: 12, 'class': 'ttl' }, ts, 'round trip over time (mean per bin, stacked)');
		var n = D.bins, top = 0, i;
		for (i = 0; i < n; i++)
			if (q.rt.n[i]) top = Math.max(top, (q.rt.post_s[i] + q.rt.wire_s[i] + q.rt.app_s[i]) / q.rt.n[i]);
		top = niceMax(top * 1.05);
		var PW = W * 2 - L - R, bw = PW / n;
		mk('rect', { x: L, y: T, width: PW, height: H - T - B, 'class': 'frame' }, ts);
		[0, top / 2, top].forEach(function (v) {
			var y = H - B - (H - T - B) * v / top;
			mk('line', { x1: L, x2: L + PW, y1: y, y2: y, 'class': 'grid' }, ts);
			txt('text', { x: L - 3, y: y + 4, 'class': 'ytick' }, ts, fmtNs(v));
		});
		txt('text', { x: L, y: H - 6, 'class': 'xtick' }, ts, fmtMs(D.t0_ns));
		txt('text', { x: L + PW, y: H - 6, 'class': 'xtick end' }, ts, fmtMs(D.t0_ns + D.bin_ns * n));
		var bars = 0;
		for (i = 0; i < n; i++) {
			if (!q.rt.n[i]) continue;
			var y = H - B;
			['post', 'wire', 'app'].forEach(function (k) {
				var hh = (H - T - B) * (q.rt[k + '_s'][i] / q.rt.n[i]) / top;
				y -= hh;
				mk('rect', { x: L + i * bw, y: y, width: Math.max(bw - 0.5, 0.5), height: hh,
					     fill: RTC[k] }, ts);
			});
			bars++;
		}
		var lx = L + 4;
		['post', 'wire', 'app'].forEach(function (k) {
			txt('text', { x: lx, y: T - 5, fill: RTC[k], 'class': 'legend' }, ts, RTN[k]);
			lx += 7 * RTN[k].length + 12;
		});
		ts.setAttribute('data-points', String(bars));
		drawn++;
	}

	/* ---- latency distributions (canvas): histogram and CDF per phase ---- */
	function axes(c, x0, x1, logx, title) {
		var g = c.getContext('2d');
		g.fillStyle = '#fff';
		g.fillRect(0, 0, c.width, c.height);
		g.strokeStyle = '#333';
		g.beginPath();
		g.moveTo(50, 10);
		g.lineTo(50, c.height - 30);
		g.lineTo(c.width - 10, c.height - 30);
		g.stroke();
		g.fillStyle = '#000';
		g.font = '12px sans-serif';
		g.fillText(title, 60, 14);
		for (var i = 0; i <= 4; i++) {
			var v = logx ? Math.exp(Math.log(x0) + (Math.log(x1) - Math.log(x0)) * i / 4)
				     : x0 + (x1 - x0) * i / 4;
			g.textAlign = i === 4 ? 'right' : i === 0 ? 'left' : 'center';
			g.fillText(logx ? fmtNs(v) : fmtMs(v), 50 + (c.width - 70) * i / 4, c.height - 12);
		}
		g.textAlign = 'left';
		return g;
	}
	/* a plot's canvas, appended to el */
	function canvas(el) {
		var c = document.createElement('canvas');
		c.width = 560;
		c.height = 240;
		el.appendChild(c);
		return c;
	}
	function xpos(c, v, x0, x1) {
		return 50 + (c.width - 70) * (Math.log(v) - Math.log(x0)) / (Math.log(x1) - Math.log(x0));
	}
	function dists(tr, el) {
		var ph = tr.hist;
		var names = Object.keys(ph).filter(function (k) { return ph[k].length > 0; });
		if (!names.length) return;
		var x0 = 1e30, x1 = 1, mx = 0;
		names.forEach(function (k) {
			ph[k].forEach(function (b) {
				x0 = Math.min(x0, Math.max(b[0], 1));
				x1 = Math.max(x1, b[1]);
				mx = Math.max(mx, b[2]);
			});
		});
		if (x1 <= x0) x1 = x0 * 10;
		var c = canvas(el);
		var g = axes(c, x0, x1, true, 'latency histogram per phase (count, log time)');
		names.forEach(function (k, ki) {
			g.fillStyle = COL[k] || '#000';
			g.globalAlpha = 0.6;
			ph[k].forEach(function (b) {
				var xa = xpos(c, Math.max(b[0], 1), x0, x1), xb = xpos(c, b[1], x0, x1);
				var h = (c.height - 45) * b[2] / mx;
				g.fillRect(xa, c.height - 30 - h, Math.max(xb - xa, 1.5), h);
			});
			g.globalAlpha = 1;
			g.fillText(k, c.width - 110, 30 + 14 * ki);
		});
		drawn++;
		var d = canvas(el);
		var h = axes(d, x0, x1, true, 'CDF per phase');
		names.forEach(function (k, ki) {
			var tot = 0, cum = 0;
			ph[k].forEach(function (b) { tot += b[2]; });
			h.strokeStyle = COL[k] || '#000';
			h.beginPath();
			h.moveTo(xpos(d, Math.max(ph[k][0][0], 1), x0, x1), d.height - 30);
			ph[k].forEach(function (b) {
				cum += b[2];
				h.lineTo(xpos(d, b[1], x0, x1), d.height - 30 - (d.height - 45) * cum / tot);
			});
			h.stroke();
			h.fillStyle = COL[k] || '#000';
			h.fillText(k, d.width - 110, 30 + 14 * ki);
		});
		drawn++;
	}

	/* ---- findings: jump to their time and light it up ---- */
	function highlight(i) {
		var f = D.findings[i];
		document.querySelectorAll('.fmark.hl').forEach(function (m) { m.classList.remove('hl'); });
		document.querySelectorAll('.flash').forEach(function (m) { m.classList.remove('flash'); });
		document.querySelectorAll('.fm-' + i).forEach(function (m) { m.classList.add('hl'); });
		var row = document.getElementById(f.qpn ? 'qp-' + f.trace + '-' + f.qpn : 'trace-' + Math.max(f.trace, 0));
		if (row) {
			row.classList.add('flash');
			row.scrollIntoView({ block: 'center' });
		}
	}
	document.querySelectorAll('a.flink').forEach(function (a) {
		a.addEventListener('click', function (ev) {
			ev.preventDefault();
			highlight(+a.getAttribute('data-f'));
			history.replaceState(null, '', '#finding-' + a.getAttribute('data-f'));
		});
	});

	D.traces.forEach(function (tr, ti) {
		tr.qps.forEach(function (q) { qpRow(tr, ti, q); });
		var rt = document.getElementById('rt-' + ti);
		tr.qps.forEach(function (q) {
			if (!q.rt || !rt) return;
			var box = document.createElement('div');
			box.className = 'rtrow';
			box.id = 'rt-' + ti + '-' + q.qpn;
			var hd = document.createElement('div');
			hd.className = 'rowhead';
			hd.textContent = 'QP ' + hex(q.qpn) + (q.peer ? ' \u2192 trace ' + q.peer.trace + ' QP ' + hex(q.peer.qpn) : '');
			box.appendChild(hd);
			rt.appendChild(box);
			rtRow(box, q);
		});
		dists(tr, document.getElementById('dist-' + ti));
	});
	/* a link to the page with #finding-N opens it on that finding */
	var fh = /^#finding-(\d+)$/.exec(location.hash);
	if (fh && D.findings[+fh[1]]) highlight(+fh[1]);
	document.body.setAttribute('data-plots-drawn', String(drawn));
	document.title = 'rbtrace report (plots drawn: ' + drawn + ')';
})();
