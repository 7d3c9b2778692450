/*
 * softnic_race_test - the first RC message between two freshly started
 * processes, sent the instant the responder is ready, many times over and
 * under churn (other softnic processes starting, and being killed, on the same
 * fabric while the pairs connect).
 *
 * A responder in RTR or RTS receives: hardware never makes such a first send
 * wait, let alone fail. The requesters here use the smallest transport
 * timeout (timeout 1, retry_cnt 0: an 8 us budget), so a requester that took
 * a ready peer for unreachable even once - a peer lookup, file visibility,
 * liveness or state-publication race - completes with IBV_WC_RETRY_EXC_ERR
 * and the test fails, instead of the race hiding behind a retry as it does
 * with the usual 0.5 s budget (and showing only as a rare failure of
 * `rbtrace replay` on a loaded machine). Each test is bounded in time.
 */
#include <sys/prctl.h>
#include <sys/stat.h>

#include <atomic>
#include <string>

#include "softnic_test_util.h"
#include "tests/test_util.h"

namespace
{

// One pair: b reaches RTR with a receive posted and says so at once (before
// its own RTS); a, already in RTS, sends the moment it hears it. Returns
// a's and b's exit statuses (0: the SEND and the receive completed OK).
SnEnds FreshPair(uint64_t *first_send_ns_max)
{
	int pfd[2];
	SN_CHECK(pipe(pfd) == 0);
	SnEnds r = sn_run2(
		[&](int fd) {
			::close(pfd[0]);
			SnNode n;
			n.make(IBV_QPT_RC, 4096, 4);
			SnInfo peer = n.exchange(fd);
			n.connect(peer, nullptr, 7, /*timeout=*/1, /*retry_cnt=*/0);
			char c;
			sn_xread(fd, &c, 1); // b is in RTR
			uint64_t t0 = sn_test_now_ns();
			SN_CHECK_EQ(n.post(IBV_WR_SEND, 1, 0, 64), 0);
			ibv_wc wc = n.wait1(3000);
			uint64_t dt = sn_test_now_ns() - t0;
			if (wc.status != IBV_WC_SUCCESS)
				fprintf(stderr,
					"[pid %d] first SEND to a responder in RTR: %s\n",
					(int)getpid(), ibv_wc_status_str(wc.status));
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.opcode, IBV_WC_SEND);
			sn_xwrite(pfd[1], &dt, sizeof(dt));
			sn_xwrite(fd, &c, 1);
		},
		[&](int fd) {
			::close(pfd[0]);
			::close(pfd[1]);
			SnNode n;
			n.make(IBV_QPT_RC, 4096, 4);
			SnInfo peer = n.exchange(fd);
			n.post_recv(7, 0, 64);
			n.to_rtr(peer);
			char c = 'r';
			sn_xwrite(fd, &c, 1);
			n.to_rts(nullptr, 7, 14, 7, 1);
			ibv_wc wc = n.wait1(3000);
			SN_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			SN_CHECK_EQ(wc.opcode, IBV_WC_RECV);
			SN_CHECK_EQ(wc.byte_len, 64);
			sn_xread(fd, &c, 1); // a is done with us
		},
		20);
	::close(pfd[1]);
	uint64_t dt = 0;
	if (read(pfd[0], &dt, sizeof(dt)) == (ssize_t)sizeof(dt) &&
	    dt > *first_send_ns_max)
		*first_send_ns_max = dt;
	::close(pfd[0]);
	return r;
}

// Other softnic processes coming and going on the fabric: each starts (which
// sweeps the files of dead processes), creates a QP, and exits or is killed
// in the middle of its life. Runs until killed.
[[noreturn]] void Churn()
{
	int devnull = open("/dev/null", O_WRONLY);
	if (devnull >= 0) {
		dup2(devnull, 1);
		dup2(devnull, 2);
	}
	for (unsigned i = 0;; i++) {
		pid_t c = fork();
		if (c == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			alarm(5);
			SnNode n;
			n.make(IBV_QPT_RC, 4096, 4);
			if (i & 1)
				_exit(0);
			pause();
			_exit(0);
		}
		usleep(300 + (i % 7) * 100);
		if (c > 0) {
			kill(c, SIGKILL);
			waitpid(c, nullptr, 0);
		}
	}
}

struct Result {
	int pairs = 0, failed = 0;
	uint64_t first_send_ns_max = 0;
};

// Pairs for `seconds`, and past that until min_pairs have run (how many fit in
// a given time is the machine's business: a loaded one runs few) but never past
// 60 s, nor past max_pairs.
Result RunPairs(double seconds, int min_pairs, int max_pairs, int churners)
{
	pid_t ch[4] = {};
	for (int k = 0; k < churners && k < 4; k++) {
		fflush(stdout);
		fflush(stderr);
		ch[k] = fork();
		if (ch[k] == 0) {
			alarm(60); // never outlive a broken test
			Churn();
		}
	}
	Result r;
	uint64_t start = sn_test_now_ns();
	uint64_t end = start + (uint64_t)(seconds * 1e9), cap = start + 60000000000ull;
	for (;;) {
		uint64_t now = sn_test_now_ns();
		if (r.pairs >= max_pairs || now >= cap ||
		    (now >= end && r.pairs >= min_pairs))
			break;
		SnEnds e = FreshPair(&r.first_send_ns_max);
		r.pairs++;
		if (e.a || e.b)
			r.failed++;
	}
	for (int k = 0; k < churners && k < 4; k++)
		if (ch[k] > 0) {
			kill(ch[k], SIGKILL);
			waitpid(ch[k], nullptr, 0);
		}
	return r;
}

TEST(SoftnicRace, FirstSendReachesAResponderThatJustEnteredRtr)
{
	Result r = RunPairs(2.0, 20, 400, 0);
	EXPECT_GE(r.pairs, 20); // the loop really ran (within 60 s)
	EXPECT_EQ(r.failed, 0) << r.failed << " of " << r.pairs << " pairs failed";
	printf("%d pairs, slowest first SEND %.1f us\n", r.pairs,
	       r.first_send_ns_max / 1e3);
}

TEST(SoftnicRace, FirstSendWhileOtherProcessesStartAndDie)
{
	Result r = RunPairs(2.5, 10, 400, 2);
	EXPECT_GE(r.pairs, 10);
	EXPECT_EQ(r.failed, 0) << r.failed << " of " << r.pairs << " pairs failed";
	printf("%d pairs under churn, slowest first SEND %.1f us\n", r.pairs,
	       r.first_send_ns_max / 1e3);
}

// The same on a disk-backed fabric (where `rbtrace replay`'s tests put theirs):
// page faults on shared file pages are slow there, which widens any window.
TEST(SoftnicRace, FirstSendOnADiskBackedFabric)
{
	const char *t = getenv("TEST_TMPDIR");
	std::string dir = std::string(t ? t : "/tmp") + "/softnic-race-fabric-" +
			  std::to_string((int)getpid());
	ASSERT_TRUE(mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST);
	std::string saved = getenv("SOFTNIC_FABRIC") ? getenv("SOFTNIC_FABRIC") : "";
	setenv("SOFTNIC_FABRIC", dir.c_str(), 1); // read by each forked end
	Result r = RunPairs(2.0, 10, 300, 1);
	setenv("SOFTNIC_FABRIC", saved.c_str(), 1);
	EXPECT_GE(r.pairs, 10);
	EXPECT_EQ(r.failed, 0) << r.failed << " of " << r.pairs << " pairs failed";
	printf("%d pairs on %s, slowest first SEND %.1f us\n", r.pairs, dir.c_str(),
	       r.first_send_ns_max / 1e3);
	usleep(50000); // the last churned process is gone
	if (!rbt_test::rmtree(dir))
		fprintf(stderr, "cleanup of %s failed\n", dir.c_str());
}

} // namespace

SN_TEST_MAIN()
