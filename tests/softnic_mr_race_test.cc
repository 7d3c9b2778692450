/*
 * softnic_mr_race_test - stores other threads make to the pages of a memory
 * registration while it is registered and deregistered.
 *
 * softnic moves a registered range's whole pages into a fabric file at
 * ibv_reg_mr and back into private memory at ibv_dereg_mr (a copy, then a
 * mapping over the same addresses). A store that lands between the copy and
 * the remap must not be lost: here threads increment counters flat out on
 * those pages - in the buffer, and in objects beside it on its first and last
 * pages, as malloc puts them - while the test registers and deregisters the
 * buffer in a loop, and every increment must be in the counters at the end
 * (rping's `completed++` beside its buffers vanished that way: a hang). Then
 * a buffer on the registering thread's own stack, with its own stores and
 * another thread's during the moves; then the first case again with
 * SOFTNIC_UFFD=user (write protection for user-mode stores only).
 *
 * Where the kernel cannot write-protect anonymous memory for us (no
 * userfaultfd, or no UFFD_FEATURE_PAGEFAULT_FLAG_WP) softnic moves pages
 * unprotected and these tests are skipped, saying so. Each case runs for a
 * bounded time (SN_MR_RACE_MS, default 700 ms), not a number of rounds.
 */
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include <atomic>
#include <string>

#include "softnic_test_util.h"
#include "tests/test_util.h"

namespace
{

constexpr size_t kPage = 4096;

uint64_t CaseNs()
{
	const char *v = getenv("SN_MR_RACE_MS");
	long ms = v && *v ? atol(v) : 700;
	return (uint64_t)(ms > 0 ? ms : 700) * 1000000ull;
}

// Whether this kernel lets us write-protect anonymous memory with
// userfaultfd (full, or user-mode-only with SOFTNIC_UFFD=user): else softnic
// moves pages unprotected and the stores these tests make can be lost.
bool UffdWpAvailable(bool user_only)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | (user_only ? 1 : 0));
	if (fd < 0 && !user_only)
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | 1);
	if (fd < 0)
		return false;
	uffdio_api api = {};
	api.api = UFFD_API;
	bool ok = ioctl(fd, UFFDIO_API, &api) == 0 &&
		  (api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP);
	close(fd);
	return ok;
}

#define SKIP_WITHOUT_UFFD_WP(user_only)                                                  \
	do {                                                                             \
		if (!UffdWpAvailable(user_only))                                         \
			GTEST_SKIP() << "no userfaultfd write protection here: softnic " \
					"moves registered pages unprotected";            \
	} while (0)

// Threads incrementing counters flat out, each its own (plain ++ on a
// volatile, as a program's own counter is); each knows how many it made.
struct Incrementers {
	std::atomic<bool> stop{ false };
	struct One {
		Incrementers *set;
		volatile uint64_t *ctr[3];
		int nctr;
		uint64_t done;
		pthread_t t;
	} one[2];
	int n = 0;

	static void *Main(void *arg)
	{
		One *o = (One *)arg;
		uint64_t k = 0;
		while (!o->set->stop.load(std::memory_order_relaxed)) {
			for (int i = 0; i < o->nctr; i++)
				(*o->ctr[i])++;
			k++;
		}
		o->done = k;
		return nullptr;
	}

	void Start(std::initializer_list<volatile uint64_t *> ctrs)
	{
		One *o = &one[n++];
		o->set = this;
		o->nctr = 0;
		o->done = 0;
		for (volatile uint64_t *c : ctrs)
			o->ctr[o->nctr++] = c;
		ASSERT_EQ(pthread_create(&o->t, nullptr, Main, o), 0);
	}

	void Stop()
	{
		stop = true;
		for (int i = 0; i < n; i++)
			pthread_join(one[i].t, nullptr);
	}
};

struct Device {
	ibv_context *ctx = nullptr;
	ibv_pd *pd = nullptr;

	Device()
	{
		int n = 0;
		ibv_device **l = ibv_get_device_list(&n);
		if (l && n == 1)
			ctx = ibv_open_device(l[0]);
		if (l)
			ibv_free_device_list(l);
		if (ctx)
			pd = ibv_alloc_pd(ctx);
	}
	~Device()
	{
		if (pd)
			ibv_dealloc_pd(pd);
		if (ctx)
			ibv_close_device(ctx);
	}
};

const int kAccess =
	IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// Registers and deregisters [buf, buf + len) until the case's time is up:
// the number of rounds, or -1 (a registration failed).
long RegisterLoop(ibv_pd *pd, void *buf, size_t len, volatile uint64_t *mine = nullptr)
{
	uint64_t end = sn_test_now_ns() + CaseNs();
	long rounds = 0;
	while (sn_test_now_ns() < end) {
		ibv_mr *mr = ibv_reg_mr(pd, buf, len, kAccess);
		if (!mr)
			return -1;
		if (mine)
			(*mine)++; // the registering thread's own store, registered
		if (ibv_dereg_mr(mr))
			return -1;
		rounds++;
	}
	return rounds;
}

// The buffer: 3 pages less a little at each end, with a neighbour object on
// its first page and one on its last (registration takes whole pages), and a
// counter inside it; two threads on them while it is registered and
// deregistered.
TEST(SoftnicMrRace, CountersOnRegisteredPagesKeepEveryIncrement)
{
	SKIP_WITHOUT_UFFD_WP(getenv("SOFTNIC_UFFD") &&
			     !strcmp(getenv("SOFTNIC_UFFD"), "user"));
	Device d;
	ASSERT_TRUE(d.pd);
	char *block = nullptr;
	ASSERT_EQ(posix_memalign((void **)&block, kPage, 4 * kPage), 0);
	memset(block, 0, 4 * kPage);
	char *buf = block + 1024;
	size_t len = 3 * kPage - 1024 + 512; // pages 0-3
	auto *before = (volatile uint64_t *)(block + 64);
	auto *inside = (volatile uint64_t *)(block + 2 * kPage + 8);
	auto *after = (volatile uint64_t *)(block + 3 * kPage + 2048);
	auto *lone = (volatile uint64_t *)(block + 3 * kPage + 3072);
	Incrementers inc;
	inc.Start({ before, inside, after });
	inc.Start({ lone });
	long rounds = RegisterLoop(d.pd, buf, len);
	inc.Stop();
	EXPECT_GT(rounds, 5);
	uint64_t n0 = inc.one[0].done, n1 = inc.one[1].done;
	printf("%ld registrations; increments %llu and %llu; lost before %lld inside "
	       "%lld "
	       "after %lld lone %lld\n",
	       rounds, (unsigned long long)n0, (unsigned long long)n1,
	       (long long)(n0 - *before), (long long)(n0 - *inside),
	       (long long)(n0 - *after), (long long)(n1 - *lone));
	EXPECT_EQ(*before, n0);
	EXPECT_EQ(*inside, n0);
	EXPECT_EQ(*after, n0);
	EXPECT_EQ(*lone, n1);
	free(block);
}

struct StackCase {
	ibv_pd *pd;
	long rounds;
	uint64_t mine, theirs, done;
	bool pattern_ok;
};

// A buffer among the registering thread's locals, registered from well below
// its frame (the frames of ibv_reg_mr's own calls) to its end, while another
// thread increments a counter in it and this thread its own between calls.
__attribute__((noinline)) void StackRounds(StackCase *c)
{
	char area[3 * kPage];
	volatile uint64_t mine = 0;
	for (size_t i = 0; i < sizeof(area); i++)
		area[i] = (char)(i * 7);
	auto *theirs = (volatile uint64_t *)(((uintptr_t)area + kPage) & ~(kPage - 1));
	uint64_t keep = *theirs;
	*theirs = 0;
	uintptr_t lo =
		((uintptr_t)__builtin_frame_address(0) & ~(kPage - 1)) - 16 * kPage;
	uintptr_t hi = (uintptr_t)area + sizeof(area);
	Incrementers inc;
	inc.Start({ theirs });
	c->rounds = RegisterLoop(c->pd, (void *)lo, hi - lo, &mine);
	inc.Stop();
	c->mine = mine;
	c->theirs = *theirs;
	c->done = inc.one[0].done;
	*theirs = keep;
	c->pattern_ok = true;
	for (size_t i = 0; i < sizeof(area); i++)
		if (area[i] != (char)(i * 7))
			c->pattern_ok = false;
}

void *StackMain(void *arg)
{
	// keep the case's frames well below this thread's TLS at its stack's top
	volatile char pad[64 * 1024];
	pad[0] = 1;
	StackRounds((StackCase *)arg);
	return (void *)(uintptr_t)pad[0];
}

TEST(SoftnicMrRace, BufferOnTheRegisteringThreadsOwnStack)
{
	SKIP_WITHOUT_UFFD_WP(false);
	Device d;
	ASSERT_TRUE(d.pd);
	StackCase c = {};
	c.pd = d.pd;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 1 << 20);
	pthread_t t;
	ASSERT_EQ(pthread_create(&t, &a, StackMain, &c), 0);
	pthread_join(t, nullptr);
	pthread_attr_destroy(&a);
	printf("%ld registrations of the registering thread's stack; its own stores "
	       "%llu, "
	       "another thread's %llu of %llu\n",
	       c.rounds, (unsigned long long)c.mine, (unsigned long long)c.theirs,
	       (unsigned long long)c.done);
	EXPECT_GT(c.rounds, 5);
	EXPECT_EQ(c.mine, (uint64_t)c.rounds);
	EXPECT_EQ(c.theirs, c.done);
	EXPECT_TRUE(c.pattern_ok);
}

// The first case in a process of its own with SOFTNIC_UFFD=user: the
// protection unprivileged processes get (UFFD_USER_MODE_ONLY, Linux 5.11).
TEST(SoftnicMrRace, UserModeOnlyProtectionKeepsEveryIncrementToo)
{
	SKIP_WITHOUT_UFFD_WP(true);
	if (getenv("SOFTNIC_UFFD"))
		GTEST_SKIP() << "already under SOFTNIC_UFFD=" << getenv("SOFTNIC_UFFD");
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	ASSERT_GT(n, 0);
	exe[n] = 0;
	// with a fabric of its own (it removes it at exit), and not this run's
	// files: Bazel's exit marker and XML
	auto r = rbt_test::run_argv({ "/usr/bin/env", "-u", "SN_TEST_REEXEC", "-u",
				      "TEST_PREMATURE_EXIT_FILE", "-u", "XML_OUTPUT_FILE",
				      "SOFTNIC_UFFD=user", "SOFTNIC_DEBUG=1", exe,
				      "--gtest_filter=SoftnicMrRace."
				      "CountersOnRegisteredPagesKeepEveryIncrement" },
				    300);
	printf("%s", r.out.c_str());
	EXPECT_EQ(r.status, 0) << r.out << r.err;
	EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out;
	EXPECT_NE(r.err.find("user-mode"), std::string::npos) << r.err;
}

} // namespace

SN_TEST_MAIN()
