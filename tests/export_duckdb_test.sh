#!/usr/bin/env bash
# export_duckdb_test.sh - `rbtrace export` rows loaded into DuckDB (its npm package
# @duckdb/node-api, installed by ./dev setup, or here when missing): ib_write_bw and
# ibv_rc_pingpong recorded over softnic, both ends; the CSV has one row per WR the
# report counted, and the p99 of each QP's send WRs computed by DuckDB from the rows
# agrees with `rbtrace report`'s (within its histogram's bucket width, 1.6 %); the
# NDJSON has the same rows; the resource rows name every QP of the report.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
use_softnic
test_tmp export_duckdb

# DuckDB for node: where ./dev setup puts it (the same pinned version).
npm_dir=${RBTRACE_NPM_DIR:-/var/tmp/rbtrace-npm}
if [ ! -d "$npm_dir/node_modules/@duckdb/node-api" ]; then
	echo "installing @duckdb/node-api into $npm_dir (./dev setup does it once)"
	mkdir -p "$npm_dir"
	timeout 120 npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error \
		@duckdb/node-api@1.5.6-r.1 >/dev/null || fail "npm install @duckdb/node-api"
fi
export NODE_PATH=$npm_dir/node_modules

pair bw ib_write_bw -n 3000
pair pp ibv_rc_pingpong -n 500

for n in bw pp; do
	files=("$tmp/${n}_c.rbt" "$tmp/${n}_s.rbt")
	"$RBTRACE" report --format=json -o "$tmp/$n.json" "${files[@]}"
	"$RBTRACE" export -o "$tmp/$n.csv" "${files[@]}"
	"$RBTRACE" export --format=ndjson -o "$tmp/$n.ndjson" "${files[@]}"
	"$RBTRACE" export --resources -o "$tmp/${n}_res.csv" "${files[@]}"
	node - "$tmp/$n.json" "$tmp/$n.csv" "$tmp/$n.ndjson" "$tmp/${n}_res.csv" <<'JS'
const fs = require('fs');
const { DuckDBInstance } = require('@duckdb/node-api');
const [json, csv, ndjson, res] = process.argv.slice(2);
const num = (v) => (typeof v === 'bigint' ? Number(v) : v);
function fail(m) { console.log('FAIL: ' + m); process.exit(1); }
(async () => {
	const db = await DuckDBInstance.create(':memory:');
	const c = await db.connect();
	const rows = async (q) => (await c.runAndReadAll(q)).getRows().map((r) => r.map(num));
	const rep = JSON.parse(fs.readFileSync(json));
	await c.run(`create table wr as select * from read_csv('${csv}', header=true, auto_detect=true)`);
	await c.run(`create table wj as select * from read_json('${ndjson}', format='newline_delimited')`);
	const [[n, sends, recvs]] = await rows(`select count(*), count(*) filter (kind='send'),
		count(*) filter (kind='recv') from wr`);
	const k = rep.counts;
	if (sends !== k.wrs_completed || recvs !== k.recvs_completed)
		fail(`rows: ${sends} sends ${recvs} receives, the report ${k.wrs_completed} / ${k.recvs_completed}`);
	// a column empty in every row is read as text: cast
	const I = (c) => `try_cast(${c} as bigint)`;
	const agg = (t) => `select kind, count(*), sum(bytes), sum(${I('e2e_ns')}),
		sum(${I('recv_wait_ns')}), sum(post_ns), count(${I('nic_hi_ns')}),
		count(${I('poll_ns')}) from ${t} group by 1 order by 1`;
	const a = JSON.stringify(await rows(agg('wr'))), b = JSON.stringify(await rows(agg('wj')));
	if (a !== b) fail(`NDJSON ${b} differs from the CSV ${a}`);
	// p99 per QP of the send WRs, against the report's where a QP has one send group
	const got = await rows(`select trace, qp_num, count(*), quantile_disc(${I('e2e_ns')}, 0.99)
		from wr where kind='send' group by 1, 2 order by 1, 2`);
	let checked = 0;
	for (const [tr, qpn, cnt, p99] of got) {
		const qp = rep.traces[tr].qps.find((q) => q.qp_num === qpn);
		if (!qp) fail(`QP ${qpn} of trace ${tr} is not in the report`);
		const g = qp.groups.filter((x) => x.opcode !== 'RECV');
		if (g.length !== 1) continue;
		const want = g[0].phases.e2e.p99;
		if (g[0].wrs !== cnt) fail(`QP ${qpn}: ${cnt} rows, the report ${g[0].wrs} WRs`);
		if (Math.abs(p99 - want) > Math.max(0.016 * want, 2))
			fail(`QP ${qpn} of trace ${tr}: DuckDB p99 ${p99} ns, report ${want} ns`);
		console.log(`  trace ${tr} QP ${qpn}: ${cnt} send WRs, p99 DuckDB ${p99} ns, report ${want} ns`);
		checked++;
	}
	if (!checked) fail('no QP compared');
	await c.run(`create table r as select * from read_csv('${res}', header=true, auto_detect=true)`);
	const qps = await rows(`select trace, qp_num from r where kind='qp' order by 1, 2`);
	const want = rep.traces.flatMap((t, i) => t.qps.map((q) => [i, q.qp_num])).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
	if (JSON.stringify(qps) !== JSON.stringify(want))
		fail(`resource rows' QPs ${JSON.stringify(qps)}, the report's ${JSON.stringify(want)}`);
	console.log(`  ${n} WR rows, ${qps.length} QPs in the resource rows`);
})().catch((e) => fail(String(e)));
JS
done
echo "export_duckdb_test: all good"
