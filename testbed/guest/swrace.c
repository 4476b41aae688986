// SPDX-License-Identifier: GPL-2.0
/*
 * swrace - run the guest operations that change a page's IOMMU state
 * concurrently, on several vCPUs, and check after every round that no page
 * table, no marked page and no page that left the domain is reachable by DMA.
 *
 *   swrace [--seconds S] [--rounds N] [--frames F] [--threads T] [--ops K]
 *          [--seed X]
 *
 * The domain (dom0, or a PV domU) gives itself F frames that its kernel never
 * sees (XENMEM_populate_physmap at pseudo-physical frames far above its RAM;
 * dom0 raises its own memory limit by as many pages, a domU needs maxmem), so
 * they have no mapping anywhere and can be pinned as L1 tables.  T threads,
 * each pinned to its own vCPU, start every round together and each issue K
 * random operations on random frames among the F:
 *
 *   mark     MMUEXT_MARK_NO_DMA
 *   unmark   MMUEXT_UNMARK_NO_DMA
 *   pin      MMUEXT_PIN_L1_TABLE (the page becomes a page table)
 *   unpin    MMUEXT_UNPIN_TABLE
 *   writable MMUEXT_CLEAR_PAGE (takes a writable type reference: an unpinned
 *            page table becomes writable again)
 *   giveback XENMEM_decrease_reservation of the frame, then populate_physmap
 *            again: the page leaves the domain and a new one comes
 *   link     mmu_update of the frame's first entry: it points at another of
 *            the frames (read-only or writable) or is cleared, validated by
 *            Xen as whatever the frame is now
 *   pintree  MMUEXT_PIN_L2/L3/L4_TABLE: the frame and the frames its first
 *            entries lead to become a tree of page tables at once (the
 *            xen-only design batches the IOTLB flush of such a pin)
 *   marks    2-4 MMUEXT_MARK_NO_DMA in one hypercall, on random
 *            frames: Xen flushes the IOTLB once for them (patches/xen 0004)
 *            and holds each page writable until then
 *
 * Then thread 0 looks every frame of the round up with XEN_DOMCTL_pv_iommu_audit
 * (patches/xen/0004): a frame Xen flags as a violation (a page of ours that
 * is not writable or is marked, in our IOMMU) or a frame that left us and is
 * still in our IOMMU is a bad state.  Prints one "row op=..." line per
 * operation (how often it succeeded, was refused as busy, ...) and
 * "result ops=N time_us=T rounds=R bad_states=B ...".  Exits 3 when a round
 * ended in a bad state (the result line printed first), 1 on an error.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "privcmd.h"

enum { OP_MARK, OP_UNMARK, OP_PIN, OP_UNPIN, OP_WRITABLE, OP_GIVEBACK, OP_LINK, OP_PINTREE, OP_MARKS,
       NOPS };
static const char *const op_names[NOPS] = {
	"mark", "unmark", "pin", "unpin", "writable", "giveback", "link", "pintree", "marks",
};
/* Outcomes tallied per operation. */
enum { RES_OK, RES_BUSY, RES_INVAL, RES_OTHER, NRES };

/* x86 page-table entries, which Xen's public headers do not define. */
#define FRAME_SHIFT	12
#define PTE_PRESENT	0x1ULL
#define PTE_RW		0x2ULL

#define MAX_FRAMES	64
#define MAX_THREADS	16
#define MAX_MARKS	4	/* marks in one hypercall (op "marks") */

static unsigned int nframes = 4, nthreads, ops_per_round = 4;
static unsigned long max_rounds, seconds = 10;
static uint64_t seed = 1;

struct slot {
	uint64_t mfn;		/* current frame; 0 while given back */
	int busy;		/* a giveback is in flight */
};
static struct slot slots[MAX_FRAMES];
/* Frames given back during the current round: checked at its end. */
static uint64_t gone[MAX_THREADS * 64];
static unsigned int ngone;
static pthread_mutex_t gone_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned long tally[MAX_THREADS][NOPS][NRES];
static pthread_barrier_t barrier;
static volatile int stop;
static unsigned long rounds, bad_states, leaked, released;
static uint64_t orig_max_kb;
static int raised;

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* One mmuext op on a frame of ours; per-thread buffer. */
static long mmuext1(struct mmuext_op *op, unsigned int cmd, uint64_t mfn)
{
	op->cmd = cmd;
	op->arg1.mfn = mfn;
	return hypercall(__HYPERVISOR_mmuext_op, (uintptr_t)op, 1, 0, DOMID_SELF);
}

static void count(unsigned int t, unsigned int op, long rc)
{
	tally[t][op][rc == 0 ? RES_OK : rc == -EBUSY ? RES_BUSY : rc == -EINVAL ? RES_INVAL : RES_OTHER]++;
}

struct worker {
	unsigned int id;
	uint64_t rng;
	struct mmuext_op *op;
	struct mmu_update *upd;
	struct xen_memory_reservation *res;
	xen_pfn_t *ext;
};

static void giveback(struct worker *w, unsigned int s)
{
	uint64_t mfn, fresh;
	long rc;

	if (__atomic_exchange_n(&slots[s].busy, 1, __ATOMIC_ACQUIRE)) {
		count(w->id, OP_GIVEBACK, -EBUSY);
		return;
	}
	mfn = __atomic_load_n(&slots[s].mfn, __ATOMIC_RELAXED);
	/* A slot left empty by a failed populate is filled again. */
	rc = mfn ? decrease(w->res, w->ext, mfn) : 1;
	if (rc == 1 && mfn) {
		pthread_mutex_lock(&gone_lock);
		if (ngone < sizeof(gone) / sizeof(gone[0]))
			gone[ngone++] = mfn;
		pthread_mutex_unlock(&gone_lock);
	}
	if (rc == 1) {
		fresh = populate(w->res, w->ext, OWN_GPFN_BASE + s);
		if (fresh)
			mmuext1(w->op, MMUEXT_CLEAR_PAGE, fresh);
		else
			__atomic_add_fetch(&leaked, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&slots[s].mfn, fresh, __ATOMIC_RELEASE);
		rc = fresh ? 0 : -ENOMEM;
	} else if (rc >= 0) {
		rc = -EINVAL;
	}
	count(w->id, OP_GIVEBACK, rc);
	__atomic_store_n(&slots[s].busy, 0, __ATOMIC_RELEASE);
}

/* Entry 0 of MFN: another frame of the set, read-only or writable, or nothing. */
static void link_entry(struct worker *w, uint64_t mfn, uint64_t r)
{
	uint64_t to = __atomic_load_n(&slots[(r >> 16) % nframes].mfn, __ATOMIC_ACQUIRE);

	w->upd->ptr = (mfn << FRAME_SHIFT) | MMU_NORMAL_PT_UPDATE;
	w->upd->val = (r >> 24) % 4 == 0 || !to ? 0 :
		      (to << FRAME_SHIFT) | PTE_PRESENT | ((r >> 26) % 2 ? PTE_RW : 0);
	count(w->id, OP_LINK, hypercall(__HYPERVISOR_mmu_update, (uintptr_t)w->upd, 1, 0,
					DOMID_SELF));
}

/* 2 to MAX_MARKS marks in one call: the first frame's and random others'. */
static void mark_batch(struct worker *w, uint64_t r)
{
	unsigned int i, n = 2 + (r >> 16) % (MAX_MARKS - 1);

	for (i = 0; i < n; i++) {
		w->op[i].cmd = MMUEXT_MARK_NO_DMA;
		w->op[i].arg1.mfn = __atomic_load_n(&slots[(r >> (8 + 6 * i)) % nframes].mfn,
						    __ATOMIC_ACQUIRE);
	}
	count(w->id, OP_MARKS, hypercall(__HYPERVISOR_mmuext_op, (uintptr_t)w->op, n, 0,
					 DOMID_SELF));
}

static void one_op(struct worker *w)
{
	uint64_t r = xorshift(&w->rng);
	unsigned int op = r % NOPS, s = (r >> 8) % nframes;
	uint64_t mfn = __atomic_load_n(&slots[s].mfn, __ATOMIC_ACQUIRE);
	static const unsigned int cmds[] = {
		[OP_MARK] = MMUEXT_MARK_NO_DMA,
		[OP_UNMARK] = MMUEXT_UNMARK_NO_DMA,
		[OP_PIN] = MMUEXT_PIN_L1_TABLE,
		[OP_UNPIN] = MMUEXT_UNPIN_TABLE,
		[OP_WRITABLE] = MMUEXT_CLEAR_PAGE,
	};

	if (op == OP_GIVEBACK) {
		giveback(w, s);
		return;
	}
	if (!mfn) {
		count(w->id, op, -ENOENT);
		return;
	}
	if (op == OP_LINK) {
		link_entry(w, mfn, r);
		return;
	}
	if (op == OP_PINTREE) {
		count(w->id, op, mmuext1(w->op, MMUEXT_PIN_L2_TABLE + (r >> 16) % 3, mfn));
		return;
	}
	if (op == OP_MARKS) {
		mark_batch(w, r);
		return;
	}
	count(w->id, op, mmuext1(w->op, cmds[op], mfn));
}

/* Is a frame with audit byte A in a state no device may reach?  GONE: it left the domain. */
static int bad_frame(uint8_t a, int gone_frame)
{
	unsigned int kind = a & XEN_DOMCTL_PV_IOMMU_AUDIT_KIND_MASK;

	if (a & XEN_DOMCTL_PV_IOMMU_AUDIT_VIOLATION)
		return 1;
	return gone_frame && (a & XEN_DOMCTL_PV_IOMMU_AUDIT_MAPPED) &&
	       kind < XEN_DOMCTL_PV_IOMMU_AUDIT_WRITABLE;
}

/*
 * A frame given back while another thread pinned it stays ours, held by the
 * pin (Xen frees it at the unpin): unpin such frames, or dom0 runs out of
 * its memory limit.
 */
static void release_pinned(struct mmuext_op *op, uint8_t a, uint64_t mfn)
{
	unsigned int i;

	if ((a & XEN_DOMCTL_PV_IOMMU_AUDIT_KIND_MASK) < XEN_DOMCTL_PV_IOMMU_AUDIT_WRITABLE)
		return;
	for (i = 0; i < nframes; i++)
		if (slots[i].mfn == mfn)
			return;
	if (!mmuext1(op, MMUEXT_UNPIN_TABLE, mfn))
		released++;
}

/* The round's frames, then the frames given back, audited in one go (one request from a domU). */
static void check_round(struct mmuext_op *op, uint8_t *buf)
{
	static uint64_t mfns[MAX_FRAMES + sizeof(gone) / sizeof(gone[0])];
	unsigned int i, n = 0, first_gone;
	int bad = 0;
	long rc;

	for (i = 0; i < nframes; i++)
		if (slots[i].mfn)
			mfns[n++] = slots[i].mfn;
	first_gone = n;
	for (i = 0; i < ngone; i++)
		mfns[n++] = gone[i];
	rc = n ? pv_iommu_audit_list(self_domid(), mfns, n, buf, NULL) : 0;
	if (rc) {
		fprintf(stderr, "swrace: audit of round %lu: %s\n", rounds, strerror(-rc));
		exit(1);
	}
	for (i = 0; i < n; i++) {
		if (!bad_frame(buf[i], i >= first_gone))
			continue;
		fprintf(stderr, "swrace: round %lu: %sframe %#llx state %#x\n", rounds,
			i >= first_gone ? "given-back " : "", (unsigned long long)mfns[i], buf[i]);
		bad = 1;
	}
	for (i = first_gone; i < n; i++)
		release_pinned(op, buf[i], mfns[i]);
	ngone = 0;
	bad_states += bad;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *buf = w->id == 0 ? malloc(MAX_FRAMES + sizeof(gone) / sizeof(gone[0])) : NULL;
	uint64_t deadline = now_us() + seconds * 1000000ULL;
	unsigned int i;

	for (;;) {
		pthread_barrier_wait(&barrier);
		if (stop)
			break;
		for (i = 0; i < ops_per_round; i++)
			one_op(w);
		pthread_barrier_wait(&barrier);
		if (w->id == 0) {
			check_round(w->op, buf);
			rounds++;
			if ((max_rounds && rounds >= max_rounds) || (seconds && now_us() >= deadline))
				stop = 1;
			if (rounds % 5000 == 0)
				fprintf(stderr, "swrace: %lu rounds, %lu bad\n", rounds, bad_states);
		}
	}
	return NULL;
}

/* Leave no frame of ours behind: unpinned, unmarked, given back. */
static void cleanup(struct worker *w)
{
	unsigned int i;

	/* Unpin every tree first: a frame a table still points at is not freed. */
	for (i = 0; i < nframes; i++)
		if (slots[i].mfn)
			mmuext1(w->op, MMUEXT_UNPIN_TABLE, slots[i].mfn);
	for (i = 0; i < nframes; i++) {
		if (!slots[i].mfn)
			continue;
		mmuext1(w->op, MMUEXT_UNMARK_NO_DMA, slots[i].mfn);
		if (decrease(w->res, w->ext, slots[i].mfn) != 1)
			fprintf(stderr, "swrace: could not give frame %#llx back\n",
				(unsigned long long)slots[i].mfn);
	}
	if (raised && set_max_mem(orig_max_kb))
		fprintf(stderr, "swrace: could not restore the memory limit\n");
}

int main(int argc, char **argv)
{
	struct worker workers[MAX_THREADS];
	pthread_t tids[MAX_THREADS];
	unsigned long ops = 0, sum[NOPS][NRES] = { { 0 } };
	unsigned int i, j, k;
	int ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t t0;

	nthreads = ncpu < 2 ? 2 : ncpu > MAX_THREADS ? MAX_THREADS : ncpu;
	for (i = 1; i < (unsigned int)argc; i++) {
		const char *v = i + 1 < (unsigned int)argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--seconds"))
			seconds = arg_num("swrace", argv[i], v, 0, 86400);
		else if (!strcmp(argv[i], "--rounds"))
			max_rounds = arg_num("swrace", argv[i], v, 0, 1UL << 40);
		else if (!strcmp(argv[i], "--frames"))
			nframes = arg_num("swrace", argv[i], v, 1, MAX_FRAMES);
		else if (!strcmp(argv[i], "--threads"))
			nthreads = arg_num("swrace", argv[i], v, 2, MAX_THREADS);
		else if (!strcmp(argv[i], "--ops"))
			ops_per_round = arg_num("swrace", argv[i], v, 1, 64);
		else if (!strcmp(argv[i], "--seed"))
			seed = arg_num("swrace", argv[i], v, 1, ~0UL);
		else {
			fprintf(stderr, "swrace: unknown argument '%s' (--seconds --rounds --frames "
				"--threads --ops --seed)\n", argv[i]);
			return 2;
		}
		i++;
	}
	if (!seconds && !max_rounds) {
		fprintf(stderr, "swrace: --seconds 0 needs --rounds\n");
		return 2;
	}

	privcmd_open("swrace");
	for (i = 0; i < nthreads; i++) {
		workers[i].id = i;
		workers[i].rng = seed * 0x9e3779b97f4a7c15ULL + i + 1;
		workers[i].op = hcall_buf(MAX_MARKS * sizeof(struct mmuext_op));
		workers[i].upd = hcall_buf(sizeof(struct mmu_update));
		workers[i].res = hcall_buf(sizeof(struct xen_memory_reservation));
		workers[i].ext = hcall_buf(sizeof(xen_pfn_t));
	}
	raised = raise_mem_limit(nframes + 2 * MAX_THREADS, &orig_max_kb);
	for (i = 0; i < nframes; i++) {
		slots[i].mfn = populate(workers[0].res, workers[0].ext, OWN_GPFN_BASE + i);
		if (!slots[i].mfn) {
			fprintf(stderr, "swrace: cannot populate frame %u\n", i);
			cleanup(&workers[0]);
			return 1;
		}
		mmuext1(workers[0].op, MMUEXT_CLEAR_PAGE, slots[i].mfn);
	}

	if (pthread_barrier_init(&barrier, NULL, nthreads)) {
		fprintf(stderr, "swrace: pthread_barrier_init failed\n");
		exit(1);
	}
	t0 = now_us();
	for (i = 0; i < nthreads; i++) {
		pthread_attr_t attr;
		cpu_set_t cpus;

		CPU_ZERO(&cpus);
		CPU_SET(i % ncpu, &cpus);
		/* A thread per vCPU: the rounds must interleave on different CPUs. */
		if (pthread_attr_init(&attr) ||
		    pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus) ||
		    pthread_create(&tids[i], &attr, worker_main, &workers[i])) {
			fprintf(stderr, "swrace: cannot start thread %u on CPU %u\n", i, i % ncpu);
			exit(1);
		}
		pthread_attr_destroy(&attr);
	}
	for (i = 0; i < nthreads; i++)
		if (pthread_join(tids[i], NULL)) {
			fprintf(stderr, "swrace: pthread_join failed\n");
			exit(1);
		}
	t0 = now_us() - t0;
	cleanup(&workers[0]);

	for (i = 0; i < nthreads; i++)
		for (j = 0; j < NOPS; j++)
			for (k = 0; k < NRES; k++) {
				sum[j][k] += tally[i][j][k];
				ops += tally[i][j][k];
			}
	for (j = 0; j < NOPS; j++)
		printf("row op=%s ok=%lu busy=%lu einval=%lu other=%lu\n", op_names[j], sum[j][RES_OK],
		       sum[j][RES_BUSY], sum[j][RES_INVAL], sum[j][RES_OTHER]);
	printf("result ops=%lu time_us=%llu rounds=%lu bad_states=%lu frames=%u threads=%u "
	       "ops_per_round=%u populate_failed=%lu pinned_after_giveback=%lu\n", ops,
	       (unsigned long long)t0, rounds, bad_states, nframes, nthreads, ops_per_round, leaked,
	       released);
	return bad_states ? 3 : 0;
}
