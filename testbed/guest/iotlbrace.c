// SPDX-License-Identifier: GPL-2.0
/*
 * iotlbrace - can a page that a batch of marks took out of the IOMMU become a
 * page table while the device's IOTLB may still hold it?  Xen shares one
 * IOTLB flush among the marks of one mmuext_op (patches/xen 0004) and keeps
 * each page writable until that flush; this checks it with the device.
 *
 *   iotlbrace [--rounds N] [--wait-ms W] [--one]
 *   iotlbrace --after-failed-flush
 *   iotlbrace --pin-and-read
 *
 * --one marks F alone, so that the flush is page-selective.  The other two
 * modes run once, on one vCPU, for Xen's fault injection (testbed/xen):
 * --after-failed-flush marks F alone (boot with iommu-test-flush-fail=1:
 * Xen must crash the domain, so nothing after the mark runs), then pins F
 * and has the device read it; --pin-and-read pins F and has Xen audit it
 * and the device read it (with iommu-test-skip-unmap=1 the audit must flag
 * what the device reads).  Both print "mode ... audit=A device_read=D" and
 * exit 3 when the device read F as a page table.
 *
 * Boot Xen with iommu-test-flush-delay=US (testbed/xen): the shared flush
 * then waits US first, a window wide enough for a DMA.  Frames of our own:
 * F (entry 0 maps G read-only, so F holds a valid L1 table whose first
 * bytes are not zero), G, and R (the device writes what it read there).
 * Each round:
 *
 *   1. F and G writable and unmarked; QEMU's edu reads F's first 8 bytes
 *      (warm: the read must succeed, and leaves F in the IOTLB);
 *   2. thread A marks F and G in one hypercall (Xen: unmap both, wait,
 *      flush, let go); thread B waits W ms, inside that window, and tries to
 *      pin F as an L1 table.  If the pin succeeds the device reads F again:
 *      it must fault;
 *   3. after A's call, B pins F (now marked and flushed) and the device reads
 *      it: it must fault (the check can see a fault);
 *   4. F unpinned, F and G unmarked (back in the IOMMU).
 *
 * Each read takes three DMAs of 100 ms (edu's timer): the flush delay must be
 * longer than W + 200 ms.  Prints "result ops=N time_us=T
 * rounds=R warm_ok=W pinned_in_window=P refused_in_window=F
 * outside_window=O bad_reads=B after_faulted=A": a pin counts as in the window
 * only if its hypercall ran wholly inside A's (host scheduling can delay
 * either thread), and bad_reads counts reads of F while it was a page table.
 * Exits 3 when the device read F as a page table (the result line printed
 * first), 1 on an error.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "edu.h"

#define PTE_PRESENT	0x1ULL
#define PTE_ADDR	0x000ffffffffff000ULL

static unsigned long rounds = 20, wait_ms = 50;
/* Marks in thread A's call: F, or F and G. */
static unsigned int nr_marks = 2;
static uint64_t f_mfn, g_mfn, r_mfn, entry0;
static volatile uint64_t *result;
static pthread_barrier_t barrier;
static struct mmuext_op *ops_a, *ops_b;
static unsigned long warm_ok, pinned_in_window, refused_in_window, bad_reads, after_faulted;
/* Pins that did not run wholly inside A's call (host scheduling): they prove nothing. */
static unsigned long outside_window;
/* A's call, each round: the window a pin must fall in. */
static volatile uint64_t a_start, a_end;

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
}

static long mmuext(struct mmuext_op *op, unsigned int n)
{
	return hypercall(__HYPERVISOR_mmuext_op, (uintptr_t)op, n, 0, DOMID_SELF);
}

static long mmuext1(struct mmuext_op *op, unsigned int cmd, uint64_t mfn)
{
	op->cmd = cmd;
	op->arg1.mfn = mfn;
	return mmuext(op, 1);
}

/*
 * The device's buffer is loaded with ~0 from R, then reads F's first 8 bytes
 * and writes them back to R: entry 0 if it read F (flags as Xen adjusted them
 * when it validated F), else 0 (QEMU's unassigned memory) or ~0 (untouched).
 */
static uint64_t device_reads_f(void)
{
	*result = ~0ULL;
	if (edu_dma_len(r_mfn << 12, EDU_BUF, 8, 0) || edu_dma_len(f_mfn << 12, EDU_BUF, 8, 0) ||
	    edu_dma_len(EDU_BUF, r_mfn << 12, 8, 1))
		exit(1);
	return *result;
}

/* Did the device read F?  Xen adjusts entry 0's flags when it validates F. */
static int read_f(uint64_t got)
{
	return got != ~0ULL && (got & PTE_ADDR) == (entry0 & PTE_ADDR) && (got & PTE_PRESENT);
}

static void *thread_a(void *arg)
{
	unsigned long i;

	(void)arg;
	for (i = 0; i < rounds; i++) {
		pthread_barrier_wait(&barrier);		/* warm read done */
		ops_a[0].cmd = ops_a[1].cmd = MMUEXT_MARK_NO_DMA;
		ops_a[0].arg1.mfn = f_mfn;
		ops_a[1].arg1.mfn = g_mfn;
		a_start = now_us();
		if (mmuext(ops_a, nr_marks)) {
			fprintf(stderr, "iotlbrace: round %lu: marking F (and G) failed\n", i);
			exit(1);
		}
		a_end = now_us();
		pthread_barrier_wait(&barrier);		/* marks done */
		pthread_barrier_wait(&barrier);		/* round done */
	}
	return NULL;
}

/*
 * One pass on one vCPU, for the fault injection: warm F in the IOTLB, then
 * (after a failed flush) mark F, pin F, and have the device read it.
 */
static int run_once(int after_failed_flush)
{
	uint8_t audit = 0;
	long rc = 0, pinned;
	int device_read;

	if (!read_f(device_reads_f())) {
		fprintf(stderr, "iotlbrace: the device cannot read F while it is writable\n");
		return 1;
	}
	if (after_failed_flush) {
		/* Xen must crash us here: nothing below may run. */
		rc = mmuext1(ops_b, MMUEXT_MARK_NO_DMA, f_mfn);
		printf("marked rc=%ld\n", rc);
		fflush(stdout);
	}
	pinned = mmuext1(ops_b, MMUEXT_PIN_L1_TABLE, f_mfn);
#ifdef XEN_DOMCTL_pv_iommu_audit
	if (!pinned && pv_iommu_audit(self_domid(), f_mfn, 1, &audit, NULL, NULL))
		audit = 0xff;
#endif
	device_read = !pinned && read_f(device_reads_f());
	if (!pinned) {
		mmuext1(ops_b, MMUEXT_UNPIN_TABLE, f_mfn);
		/* Writable again, so that giving F back takes it out of the IOMMU. */
		munmap(map_own(f_mfn), PAGE);
	}
	printf("mode %s mark_rc=%ld pin_rc=%ld audit=%#x device_read=%d\n",
	       after_failed_flush ? "after-failed-flush" : "pin-and-read", rc, pinned, audit,
	       device_read);
	return device_read ? 3 : 0;
}

/* F, G and R back to Xen, and the memory limit as it was. */
static void give_back(struct xen_memory_reservation *res, xen_pfn_t *ext, int raised,
		      uint64_t orig_kb)
{
	munmap((void *)result, PAGE);
	decrease(res, ext, f_mfn);
	decrease(res, ext, g_mfn);
	decrease(res, ext, r_mfn);
	if (raised && set_max_mem(orig_kb))
		fprintf(stderr, "iotlbrace: could not restore the memory limit\n");
}

static void set_cpu(int cpu)
{
	cpu_set_t cpus;

	CPU_ZERO(&cpus);
	CPU_SET(cpu, &cpus);
	if (sched_setaffinity(0, sizeof(cpus), &cpus))
		die("sched_setaffinity");
}

int main(int argc, char **argv)
{
	struct xen_memory_reservation *res;
	struct timespec wait;
	pthread_attr_t attr;
	cpu_set_t cpus;
	pthread_t a;
	xen_pfn_t *ext;
	uint64_t orig_kb, t0, *f;
	unsigned long i;
	int raised, n, once = 0;

	for (n = 1; n < argc; n++) {
		const char *v = n + 1 < argc ? argv[n + 1] : NULL;

		if (!strcmp(argv[n], "--one")) {
			nr_marks = 1;
			continue;
		}
		if (!strcmp(argv[n], "--after-failed-flush") || !strcmp(argv[n], "--pin-and-read")) {
			once = argv[n][2] == 'a' ? 1 : 2;
			continue;
		}
		if (!strcmp(argv[n], "--rounds"))
			rounds = arg_num("iotlbrace", argv[n], v, 1, 100000);
		else if (!strcmp(argv[n], "--wait-ms"))
			wait_ms = arg_num("iotlbrace", argv[n], v, 0, 10000);
		else {
			fprintf(stderr, "iotlbrace: unknown argument '%s' (--rounds --wait-ms --one "
				"--after-failed-flush --pin-and-read)\n", argv[n]);
			return 2;
		}
		n++;
	}
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		fprintf(stderr, "iotlbrace: needs 2 vCPUs\n");
		return 2;
	}
	privcmd_open("iotlbrace");
	edu_open();
	ops_a = hcall_buf(2 * sizeof(*ops_a));
	ops_b = hcall_buf(sizeof(*ops_b));
	res = hcall_buf(sizeof(*res));
	ext = hcall_buf(sizeof(*ext));
	raised = raise_mem_limit(3, &orig_kb);
	f_mfn = populate(res, ext, OWN_GPFN_BASE);
	g_mfn = populate(res, ext, OWN_GPFN_BASE + 1);
	r_mfn = populate(res, ext, OWN_GPFN_BASE + 2);
	if (!f_mfn || !g_mfn || !r_mfn) {
		fprintf(stderr, "iotlbrace: cannot populate 3 frames\n");
		return 1;
	}
	mmuext1(ops_b, MMUEXT_CLEAR_PAGE, g_mfn);
	/* F: a valid L1 table whose entry 0 maps G read-only.  Unmapped again
	 * before any pin: our writable mapping would hold F writable. */
	entry0 = (g_mfn << 12) | PTE_PRESENT;
	f = map_own(f_mfn);
	memset(f, 0, PAGE);
	f[0] = entry0;
	munmap(f, PAGE);
	result = map_own(r_mfn);

	if (once) {
		int rc = run_once(once == 1);

		give_back(res, ext, raised, orig_kb);
		return rc;
	}
	if (pthread_barrier_init(&barrier, NULL, 2))
		die("pthread_barrier_init");
	CPU_ZERO(&cpus);
	CPU_SET(0, &cpus);
	if (pthread_attr_init(&attr) || pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus) ||
	    pthread_create(&a, &attr, thread_a, NULL))
		die("start the marking thread on CPU 0");
	set_cpu(1);
	wait.tv_sec = wait_ms / 1000;
	wait.tv_nsec = (wait_ms % 1000) * 1000000L;
	t0 = now_us();
	for (i = 0; i < rounds; i++) {
		uint64_t got, t_pin, t_pinned;
		int pinned;

		/* 1. F writable and in the IOMMU: the device reads entry 0. */
		got = device_reads_f();
		warm_ok += read_f(got);
		pthread_barrier_wait(&barrier);
		/* 2. Inside A's hypercall: F is out of the IOMMU, the flush waits. */
		nanosleep(&wait, NULL);
		t_pin = now_us();
		pinned = !mmuext1(ops_b, MMUEXT_PIN_L1_TABLE, f_mfn);
		t_pinned = now_us();
		if (pinned) {
			got = device_reads_f();
			if (read_f(got)) {
				bad_reads++;
				fprintf(stderr, "iotlbrace: round %lu: the device read F while it was a page table\n", i);
			}
			mmuext1(ops_b, MMUEXT_UNPIN_TABLE, f_mfn);
		}
		pthread_barrier_wait(&barrier);
		if (t_pin <= a_start || t_pinned >= a_end)
			outside_window++;
		else if (pinned)
			pinned_in_window++;
		else
			refused_in_window++;
		/* 3. Marked and flushed: a page table the device cannot read. */
		if (mmuext1(ops_b, MMUEXT_PIN_L1_TABLE, f_mfn)) {
			fprintf(stderr, "iotlbrace: round %lu: F did not pin after the marks\n", i);
			return 1;
		}
		got = device_reads_f();
		after_faulted += !read_f(got);
		if (read_f(got)) {
			bad_reads++;
			fprintf(stderr, "iotlbrace: round %lu: the device read F after the flush\n", i);
		}
		/* 4. Back to writable and in the IOMMU: unmarked, then mapped writable (an
		 * unmark of a page that is not writable maps nothing; its next writable use
		 * does). */
		if (mmuext1(ops_b, MMUEXT_UNPIN_TABLE, f_mfn) ||
		    mmuext1(ops_b, MMUEXT_UNMARK_NO_DMA, f_mfn) ||
		    mmuext1(ops_b, MMUEXT_UNMARK_NO_DMA, g_mfn)) {
			fprintf(stderr, "iotlbrace: round %lu: cannot undo the round\n", i);
			return 1;
		}
		munmap(map_own(f_mfn), PAGE);
		pthread_barrier_wait(&barrier);
	}
	if (pthread_join(a, NULL))
		die("pthread_join");
	t0 = now_us() - t0;

	give_back(res, ext, raised, orig_kb);
	printf("result ops=%lu time_us=%llu rounds=%lu warm_ok=%lu pinned_in_window=%lu "
	       "refused_in_window=%lu outside_window=%lu bad_reads=%lu after_faulted=%lu "
	       "wait_ms=%lu\n", rounds, (unsigned long long)t0, rounds, warm_ok, pinned_in_window,
	       refused_in_window, outside_window, bad_reads, after_faulted, wait_ms);
	return bad_reads ? 3 : 0;
}
