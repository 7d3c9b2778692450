/* analyzer_perfetto_int.h - what the Perfetto timeline's two files share: the
 * field numbers of Perfetto's .proto files, the state of the stream (sequences,
 * counter and lane tracks, interned names), and the encoding layer of
 * analyzer_perfetto_enc.c that the sink (analyzer_perfetto.c) writes through.
 * Not public.
 *
 * Nothing here may trust a time or a name from the trace.
 */
#ifndef RBT_ANALYZER_PERFETTO_INT_H
#define RBT_ANALYZER_PERFETTO_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "analyzer/analyzer_internal.h"

/* ---- field numbers (Perfetto's .proto files) ---- */
enum {
	F_TRACE_PACKET = 1,
	/* TracePacket */
	F_TP_TIMESTAMP = 8,
	F_TP_CLOCK_ID = 58,
	F_TP_SEQ_ID = 10,
	F_TP_SEQ_FLAGS = 13,
	F_TP_INTERNED = 12,
	F_TP_DEFAULTS = 59,
	F_TP_TRACK_EVENT = 11,
	F_TP_TRACK_DESC = 60,
	F_TP_CLOCK_SNAPSHOT = 6,
	/* TracePacketDefaults */
	F_TPD_CLOCK_ID = 58,
	F_TPD_TRACK_EVENT = 11,
	/* TrackEventDefaults / TrackEvent */
	F_TE_TYPE = 9,
	F_TE_TRACK = 11,
	F_TE_NAME_IID = 10,
	F_TE_NAME = 23,
	F_TE_CATEGORY_IID = 3,
	F_TE_COUNTER = 30,
	F_TE_DCOUNTER = 44,
	F_TE_EXTRA_UUIDS = 31,
	F_TE_EXTRA_VALUES = 12,
	F_TE_ANNOTATION = 4,
	/* DebugAnnotation */
	F_DA_NAME_IID = 1,
	F_DA_NAME = 10,
	F_DA_UINT = 3,
	F_DA_STRING = 6,
	/* InternedData */
	F_ID_CATEGORIES = 1,
	F_ID_EVENT_NAMES = 2,
	F_ID_ANNOTATION_NAMES = 3,
	F_IID = 1,
	F_IID_NAME = 2,
	/* TrackDescriptor */
	F_TD_UUID = 1,
	F_TD_PARENT = 5,
	F_TD_NAME = 2,
	F_TD_PROCESS = 3,
	F_TD_THREAD = 4,
	F_TD_COUNTER = 8,
	F_PD_PID = 1,
	F_PD_NAME = 6,
	F_THD_PID = 1,
	F_THD_TID = 2,
	F_THD_NAME = 5,
	F_CD_UNIT = 3,
	F_CD_UNIT_NAME = 6,
	/* ClockSnapshot */
	F_CS_CLOCK = 1,
	F_CS_PRIMARY = 2,
	F_CK_ID = 1,
	F_CK_TS = 2,
	F_CK_INCREMENTAL = 3,
};
enum { T_BEGIN = 1, T_END = 2, T_INSTANT = 3, T_COUNTER = 4 };
enum { CLOCK_BOOTTIME = 6, CLOCK_SEQ = 64, SEQ_CLEARED = 1 };
enum { UNIT_COUNT = 2 };

#define PF_MAX_LANES	   4096u  /* per QP and kind; beyond, WRs are aggregated */
#define PF_MAX_NAMES	   65536u /* interned names; beyond, WR names lose their size */
#define PF_DEFAULT_MAX_WRS 1000000u

/* A packet sequence: its id, incremental clock and what it has interned. */
struct an_pf_seq {
	uint32_t id;
	bool started, incremental;
	uint64_t last_ns;  /* the incremental clock */
	uint64_t track;	   /* default track (a thread's: its thread track) */
	uint64_t call_end; /* thread sequences: end of the last call slice */
	uint8_t *defined;  /* bit per name id: interned on this sequence */
	uint32_t n_defined;
	struct an_pf_seq *next_alloc;
};

/* A counter track: its value now and the last one written (sent). */
struct an_pf_ctr {
	uint64_t uuid;
	int64_t cur, sent;
	bool described, any_sent;
};

struct an_pf_lane {
	uint64_t uuid, end_ns;
	bool open, used;
};

struct an_pf_qp {
	struct an_qp *qp;
	uint64_t uuid;		 /* the QP's track: its aggregated slices */
	struct an_pf_ctr out[2]; /* sends outstanding, receives posted */
	struct an_pf_lane *lanes[2];
	uint32_t n_lanes[2];
	struct an_pf_seq seq; /* its WR events */
	/* the sequence's default counter tracks: [sends, send CQ, (receive CQ,)
	 * receives]; vsc NULL: its place holds the sends again */
	struct an_pf_ctr *vsc, *vrc;
	/* the aggregated bin being filled */
	bool agg_any;
	uint64_t agg_bin, agg_wrs, agg_bytes, agg_errors;
	struct an_hist agg_e2e;
	struct an_pf_qp *next;
};

struct an_pf_proc {
	uint64_t uuid;
	uint32_t pid;
	struct an_pf_ctr rate; /* WRs completed per second, per bin */
	bool rate_any;
	uint64_t rate_bin, rate_wrs;
};

struct an_pf {
	struct an_pb pb;
	FILE *f;
	int err;
	uint64_t next_uuid;
	uint32_t next_seq;
	struct an_pf_seq global;
	/* interned names: id = index + 1, shared by event and annotation names */
	char **names;
	uint32_t n_names, cap_names;
	uint32_t *hash; /* open addressing, ids; 0 = empty */
	uint32_t hash_cap;
	uint32_t id_post, id_poll, id_wcs, id_nic, id_nic_min, id_poll_ns, id_status,
		id_bytes, id_args, id_verbs, id_wr;
	/* the detail rule */
	bool all_detail, window;
	uint64_t win_from, win_to, max_wrs, detailed, bin_ns;
	struct an_pf_proc *procs;
	int n_procs;
	struct an_pf_qp *qps;
	struct an_pf_seq *seqs; /* thread sequences, to free */
	struct an_pf_ctr **cq_ctrs;
	uint32_t n_cq_ctrs, cap_cq_ctrs;
};

/* One event's content, written by an_pf_event(). Names: an interned id (sequences
 * other than the global one) or a string. */
struct pf_arg {
	uint32_t name;
	const char *name_s;
	const char *s; /* a string value, else u */
	uint64_t u;
};
struct pf_ev {
	int type;
	uint64_t track; /* 0: the sequence's default */
	uint32_t name, cat;
	const char *name_s;
	bool counter, dbl;
	int64_t cv;
	double dv;
	int n_vals;
	int64_t vals[4];
	int n_args;
	struct pf_arg args[6];
};

/* ---- analyzer_perfetto_enc.c: the encoding ---- */

/* s as a protobuf string field: invalid UTF-8 and control characters become '?'. */
void an_pf_str(struct an_pb *pb, uint32_t field, const char *s);
/* The interned id of name s (1..., one table for the whole output), 0 when full. */
uint32_t an_pf_name(struct an_pf *pf, const char *s);
/* Opens a packet of sequence s at ns (no timestamp when ns is UINT64_MAX). */
void an_pf_packet(struct an_pf *pf, struct an_pf_seq *s, uint64_t ns);
void an_pf_packet_end(struct an_pf *pf);
/* The first packet of an incremental sequence. */
void an_pf_seq_start(struct an_pf *pf, struct an_pf_seq *s, uint64_t ns, uint64_t track,
		     const uint64_t *ctrs, int n_ctrs);
/* One event on sequence s at ns, its names interned there first. */
void an_pf_event(struct an_pf *pf, struct an_pf_seq *s, uint64_t ns,
		 const struct pf_ev *e);
/* A track (on the global sequence, before its first event). */
uint64_t an_pf_track(struct an_pf *pf, uint64_t parent, const char *name,
		     int counter /* 0: slices, 1: a count, 2: a rate */);
/* A counter sample on the global sequence (absolute time). */
void an_pf_counter(struct an_pf *pf, struct an_pf_ctr *c, uint64_t ns);

#endif
