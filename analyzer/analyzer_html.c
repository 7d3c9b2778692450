/* analyzer_html.c - the HTML sink: one self-contained page with the findings,
 * canvas plots (histograms, CDFs, rates) and the text report.
 *
 * Reads the finished analysis only; writes only to the FILE * it is given. The page
 * must open offline: no external script, font or stylesheet.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "analyzer/analyzer_internal.h"

static void an_html_esc(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '&':
			fputs("&amp;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

static void an_html_hist_data(FILE *f, const struct an_hist *h)
{
	uint32_t idx = 0;
	double lo, hi;
	uint64_t n;
	bool first = true;
	fputc('[', f);
	while (an_hist_next_bucket(h, &idx, &lo, &hi, &n)) {
		fprintf(f, "%s[%.0f,%.0f,%llu]", first ? "" : ",", lo, hi,
			(unsigned long long)n);
		first = false;
	}
	fputc(']', f);
}

static const char an_html_script[] =
	"<script>\n"
	"(function(){\n"
	"var D=JSON.parse(document.getElementById('rbt-data').textContent);\n"
	"var "
	"COL={post:'#1f77b4',nic:'#ff7f0e',poll:'#2ca02c',e2e:'#7f7f7f',nic_lo:'#ffbb78',"
	"nic_hi:'#d62728',poll_hi:'#98df8a',recv_wait:'#9467bd',recv_poll:'#8c564b',"
	"recv_poll_hi:'#c49c94'};\n"
	"function fmt(ns){if(ns<1e3)return ns.toFixed(0)+'ns';if(ns<1e6)return "
	"(ns/1e3).toFixed(1)+'us';"
	"if(ns<1e9)return (ns/1e6).toFixed(2)+'ms';return (ns/1e9).toFixed(2)+'s';}\n"
	"function axes(c,x0,x1,logx,title){var g=c.getContext('2d');g.fillStyle='#fff';"
	"g.fillRect(0,0,c.width,c.height);g.strokeStyle='#333';g.beginPath();g.moveTo(50,"
	"10);"
	"g.lineTo(50,c.height-30);g.lineTo(c.width-10,c.height-30);g.stroke();g."
	"fillStyle='#000';"
	"g.font='12px sans-serif';g.fillText(title,60,14);for(var i=0;i<=4;i++){var "
	"v=logx?"
	"Math.exp(Math.log(x0)+(Math.log(x1)-Math.log(x0))*i/4):x0+(x1-x0)*i/4;"
	"g.textAlign=i==4?'right':i==0?'left':'center';"
	"g.fillText(logx?fmt(v):(v/1e6).toFixed(1)+'ms',50+(c.width-70)*i/4,"
	"c.height-12);}g.textAlign='left';return g;}\n"
	"function xpos(c,v,x0,x1){return 50+(c.width-70)*(Math.log(v)-Math.log(x0))/"
	"(Math.log(x1)-Math.log(x0));}\n"
	"var drawn=0;\n"
	"function plots(tr,el){var ph=tr.hist;var "
	"names=Object.keys(ph).filter(function(k){"
	"return ph[k].length>0;});if(!names.length)return;var x0=1e30,x1=1;"
	"names.forEach(function(k){ph[k].forEach(function(b){x0=Math.min(x0,Math.max(b[0]"
	",1));"
	"x1=Math.max(x1,b[1]);});});if(x1<=x0)x1=x0*10;\n"
	" var "
	"c=document.createElement('canvas');c.width=560;c.height=260;el.appendChild(c);"
	"var g=axes(c,x0,x1,true,'latency histogram per phase (count, log time)');var "
	"mx=0;"
	"names.forEach(function(k){ph[k].forEach(function(b){mx=Math.max(mx,b[2]);});});"
	"names.forEach(function(k,ki){g.fillStyle=COL[k]||'#000';g.globalAlpha=0.6;ph[k]."
	"forEach(function(b){"
	"var xa=xpos(c,Math.max(b[0],1),x0,x1),xb=xpos(c,b[1],x0,x1);var "
	"h=(c.height-45)*b[2]/mx;"
	"g.fillRect(xa,c.height-30-h,Math.max(xb-xa,1.5),h);});g.globalAlpha=1;"
	"g.fillText(k,c.width-110,30+14*ki);});drawn++;\n"
	" var "
	"d=document.createElement('canvas');d.width=560;d.height=260;el.appendChild(d);"
	"var h=axes(d,x0,x1,true,'CDF per phase');names.forEach(function(k,ki){var tot=0;"
	"ph[k].forEach(function(b){tot+=b[2];});var "
	"cum=0;h.strokeStyle=COL[k]||'#000';h.beginPath();"
	"h.moveTo(xpos(d,Math.max(ph[k][0][0],1),x0,x1),d.height-30);ph[k].forEach("
	"function(b){cum+=b[2];"
	"h.lineTo(xpos(d,b[1],x0,x1),d.height-30-(d.height-45)*cum/tot);});h.stroke();"
	"h.fillStyle=COL[k]||'#000';h.fillText(k,d.width-110,30+14*ki);});drawn++;}\n"
	"function rate(tr,el){var r=tr.rate;if(!r.wrs.length)return;var "
	"c=document.createElement('canvas');"
	"c.width=560;c.height=200;el.appendChild(c);var "
	"g=axes(c,0,r.bin_ns*r.wrs.length,false,"
	"'WRs completed per second over time');var "
	"mx=0;r.wrs.forEach(function(v){mx=Math.max(mx,v);});"
	"var "
	"w=(c.width-70)/r.wrs.length;g.fillStyle='#1f77b4';r.wrs.forEach(function(v,i){"
	"var h=(c.height-45)*v/mx;g.fillRect(50+i*w,c.height-30-h,Math.max(w-1,1),h);});"
	"g.fillStyle='#000';g.fillText('peak '+(mx*1e9/r.bin_ns).toExponential(2)+' "
	"WR/s',c.width-160,30);"
	"drawn++;}\n"
	"D.traces.forEach(function(tr,i){var "
	"el=document.getElementById('plots-'+i);plots(tr,el);"
	"rate(tr,el);});\n"
	"document.body.setAttribute('data-plots-drawn',String(drawn));\n"
	"document.title='rbtrace report (plots drawn: '+drawn+')';\n"
	"})();\n"
	"</script>\n";

static int an_html_write(struct rbt_analyzer *an, FILE *f)
{
	if (!an->finished)
		return -EINVAL;
	fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rbtrace "
	      "report</title>\n"
	      "<style>body{font-family:sans-serif;margin:20px;color:#222}"
	      "pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}"
	      ".error{color:#b00}.warning{color:#a60}.info{color:#06a}"
	      "canvas{border:1px solid #ddd;margin:4px}</style></head><body>\n"
	      "<h1>rbtrace report</h1>\n",
	      f);
	fprintf(f, "<h2>Findings (%d)</h2>\n<ul>\n", an->n_findings);
	for (int i = 0; i < an->n_findings; i++) {
		const struct rbt_finding *fd = &an->findings[i].f;
		fprintf(f, "<li class=\"%s\"><b>[%s] %s</b>: ", an_sev_name(fd->severity),
			an_sev_name(fd->severity), fd->code);
		an_html_esc(f, fd->title);
		fputs("<pre>", f);
		an_html_esc(f, fd->evidence);
		fputs("</pre><i>", f);
		an_html_esc(f, fd->advice);
		fputs("</i></li>\n", f);
	}
	if (!an->n_findings)
		fputs("<li>no problems found</li>\n", f);
	fputs("</ul>\n", f);
	an_cm_write_html(an, f);
	for (int i = 0; i < an->n_traces; i++) {
		fprintf(f, "<h2>Trace %d: ", i);
		an_html_esc(f, an->traces[i]->mt->name);
		fprintf(f, "</h2>\n<div id=\"plots-%d\"></div>\n", i);
	}
	/* the full text report too, for the numbers */
	fputs("<h2>Details</h2>\n<pre>", f);
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (m) {
		rbt_analyzer_write_text(an, m);
		fclose(m);
		an_html_esc(f, buf);
		free(buf);
	}
	fputs("</pre>\n", f);
	fputs("<script type=\"application/json\" id=\"rbt-data\">{\"traces\":[", f);
	for (int i = 0; i < an->n_traces; i++) {
		struct an_trace *t = an->traces[i];
		struct an_hist h[RBT_PHASE_COUNT];
		an_trace_hists(an, t, NULL, h);
		fprintf(f, "%s{\"hist\":{", i ? "," : "");
		bool first = true;
		for (int p = 0; p < RBT_PHASE_COUNT; p++) {
			if (!h[p].count)
				continue;
			fprintf(f, "%s\"%s\":", first ? "" : ",", an_phase_name[p]);
			an_html_hist_data(f, &h[p]);
			first = false;
		}
		an_hists_free(h);
		int last = -1;
		for (int k = 0; k < AN_RATE_BINS; k++)
			if (t->rate.wrs[k])
				last = k;
		fprintf(f, "},\"rate\":{\"bin_ns\":%llu,\"wrs\":[",
			(unsigned long long)t->rate.width);
		for (int k = 0; k <= last; k++)
			fprintf(f, "%s%llu", k ? "," : "",
				(unsigned long long)t->rate.wrs[k]);
		fputs("]}}", f);
	}
	fputs("]}</script>\n", f);
	fputs(an_html_script, f);
	fputs("</body></html>\n", f);
	return ferror(f) ? -EIO : 0;
}

const struct an_sink_ops an_sink_html = {
	.name = "html",
	.write = an_html_write,
};
