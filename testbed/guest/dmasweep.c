// SPDX-License-Identifier: GPL-2.0
/*
 * dmasweep - a device-side check of DMA isolation that does not trust Xen's
 * audit: QEMU's edu DMA engine *reads* (which damages nothing) a few bytes of
 * every frame of this domain's RAM (dom0's, or in a domU with the device
 * passed through, the domU's), and the host reads from QEMU's own trace which
 * of those reads the emulated VT-d refused (vtd_dmar_fault).
 *
 *   dmasweep [--max-frames N]
 *
 * Xen's per-frame view (XEN_DOMCTL_pv_iommu_audit, patches/xen/0004) is taken
 * before and after the sweep; a frame whose kind or mark changed meanwhile is
 * left out of the verdict ("unstable").  Prints, for the host:
 *
 *   control ok|FAIL      a page of ours with a pattern, read by the device
 *                        into its buffer and written back to a second page
 *                        of ours: proves the engine works and a read lands
 *   sweep FIRST LAST     the machine frames read, in order, this run
 *   expect_fault RANGES  frames that must fault: page tables of every
 *                        level, descriptor pages, untyped or marked pages
 *   expect_read RANGES   frames that must be readable: writable, unmarked
 *   xen_unmapped RANGES  writable, unmarked frames that Xen itself says are
 *                        not in the IOMMU (reported apart: not a leak)
 *   result ops=N time_us=T frames=N expect_fault=N expect_read=N unstable=N
 *
 * RANGES are comma-separated FIRST-LAST hex pairs.  With N, every frame that
 * must fault is read and the writable ones are sampled evenly, about N
 * frames in all (0, the default: every frame of the domain's RAM, which takes
 * about 4 ms of host time per frame under -icount).  Which reads faulted is in
 * QEMU's trace, which only the host reads: the host fails the run on a page
 * table read or a writable frame refused (flushless/experiments/measure.py), not this
 * program.
 */
#include "edu.h"

#define A_KIND	XEN_DOMCTL_PV_IOMMU_AUDIT_KIND_MASK
#define A_MARK	XEN_DOMCTL_PV_IOMMU_AUDIT_MARKED

static uint64_t max_mfn;

/* Xen's view of every frame of the host, one byte each. */
static uint8_t *audit_all(void)
{
	uint8_t *out = malloc(max_mfn + 1), *buf = hcall_buf(XEN_DOMCTL_PV_IOMMU_AUDIT_MAX);
	uint64_t first;

	if (!out)
		die("malloc");
	for (first = 0; first <= max_mfn; first += XEN_DOMCTL_PV_IOMMU_AUDIT_MAX) {
		uint32_t nr = max_mfn - first + 1 < XEN_DOMCTL_PV_IOMMU_AUDIT_MAX ?
			      max_mfn - first + 1 : XEN_DOMCTL_PV_IOMMU_AUDIT_MAX;
		long rc = pv_iommu_audit(self_domid(), first, nr, buf, NULL, NULL);

		if (rc) {
			fprintf(stderr, "dmasweep: audit: %s\n", strerror(-rc));
			exit(1);
		}
		memcpy(out + first, buf, nr);
	}
	munmap(buf, XEN_DOMCTL_PV_IOMMU_AUDIT_MAX);
	return out;
}

static int owned(uint8_t a)
{
	return (a & A_KIND) >= XEN_DOMCTL_PV_IOMMU_AUDIT_WRITABLE;
}

static int must_fault(uint8_t a)
{
	return (a & A_KIND) != XEN_DOMCTL_PV_IOMMU_AUDIT_WRITABLE || (a & A_MARK);
}

enum { EXPECT_READ, EXPECT_FAULT, XEN_UNMAPPED };

static int expectation(uint8_t a)
{
	if (must_fault(a))
		return EXPECT_FAULT;
	return a & XEN_DOMCTL_PV_IOMMU_AUDIT_MAPPED ? EXPECT_READ : XEN_UNMAPPED;
}

/* Print the frames read whose expectation is WANT and that stayed stable. */
static unsigned long print_ranges(const char *name, const uint8_t *before, const uint8_t *after,
				  const uint8_t *read, uint64_t lo, uint64_t hi, int want)
{
	unsigned long n = 0;
	uint64_t f, start = 0;
	int open = 0, any = 0;

	printf("%s ", name);
	for (f = lo; f <= hi + 1; f++) {
		int in = f <= hi && read[f] && before[f] == after[f] &&
			 expectation(before[f]) == want;

		if (in && !open) {
			start = f;
			open = 1;
		} else if (!in && open) {
			printf("%s%llx-%llx", any ? "," : "", (unsigned long long)start,
			       (unsigned long long)f - 1);
			any = 1;
			open = 0;
		}
		n += in;
	}
	printf("%s\n", any ? "" : "-");
	return n;
}

/* A pattern into the device from one page of ours, back out to another. */
static int control(void)
{
	struct xen_memory_reservation *r = hcall_buf(sizeof(*r));
	xen_pfn_t *ext = hcall_buf(sizeof(*ext));
	uint64_t orig_kb, src, dst;
	int raised = raise_mem_limit(2, &orig_kb), ok, i;
	uint8_t *s, *d;

	src = populate(r, ext, OWN_GPFN_BASE);
	dst = populate(r, ext, OWN_GPFN_BASE + 1);
	if (!src || !dst) {
		fprintf(stderr, "dmasweep: cannot populate the control pages\n");
		exit(1);
	}
	s = map_own(src);
	d = map_own(dst);
	srand(time(NULL));
	for (i = 0; i < PAGE; i++) {
		s[i] = rand() | 1;
		d[i] = 0;
	}
	ok = !edu_dma(src << 12, EDU_BUF, 0) && !edu_dma(EDU_BUF, dst << 12, 1) &&
	     !memcmp(s, d, DMA_LEN);
	printf("control %s src=%#llx dst=%#llx\n", ok ? "ok" : "FAIL", (unsigned long long)src,
	       (unsigned long long)dst);
	munmap(s, PAGE);
	munmap(d, PAGE);
	decrease(r, ext, src);
	decrease(r, ext, dst);
	if (raised)
		set_max_mem(orig_kb);
	return ok;
}

int main(int argc, char **argv)
{
	unsigned long limit = 0, nread = 0, nfault, nok, unstable = 0, writable = 0, stride = 1;
	uint64_t f, lo = ~0ULL, hi = 0, t0;
	uint8_t *before, *after, *read;
	struct timespec ts;

	if (argc == 3 && !strcmp(argv[1], "--max-frames")) {
		char *end;

		limit = strtoul(argv[2], &end, 0);
		if (*end || end == argv[2]) {
			fprintf(stderr, "dmasweep: --max-frames takes a number\n");
			return 2;
		}
	} else if (argc != 1) {
		fprintf(stderr, "usage: dmasweep [--max-frames N]\n");
		return 2;
	}
	privcmd_open("dmasweep");
	edu_open();
	max_mfn = host_max_mfn();
	if (!control())
		return 1;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
	before = audit_all();
	read = calloc(max_mfn + 1, 1);
	if (!read)
		die("calloc");
	if (limit) {
		unsigned long faulting = 0;

		for (f = 0; f <= max_mfn; f++) {
			writable += owned(before[f]) && !must_fault(before[f]);
			faulting += owned(before[f]) && must_fault(before[f]);
		}
		stride = limit > faulting && writable > limit - faulting ?
			 writable / (limit - faulting) : limit > faulting ? 1 : writable + 1;
	}
	writable = 0;
	for (f = 0; f <= max_mfn; f++) {
		if (!owned(before[f]))
			continue;
		if (!must_fault(before[f]) && writable++ % stride)
			continue;
		if (edu_dma_len(f << 12, EDU_BUF, 8, 0))
			return 1;
		read[f] = 1;
		lo = f < lo ? f : lo;
		hi = f;
		if (++nread % 16384 == 0)
			fprintf(stderr, "dmasweep: %lu frames read\n", nread);
	}
	after = audit_all();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (!nread) {
		fprintf(stderr, "dmasweep: Xen's audit lists no frame of this domain\n");
		return 1;
	}
	for (f = lo; f <= hi; f++)
		unstable += read[f] && before[f] != after[f];
	printf("sweep %llx %llx\n", (unsigned long long)lo, (unsigned long long)hi);
	nfault = print_ranges("expect_fault", before, after, read, lo, hi, EXPECT_FAULT);
	nok = print_ranges("expect_read", before, after, read, lo, hi, EXPECT_READ);
	print_ranges("xen_unmapped", before, after, read, lo, hi, XEN_UNMAPPED);
	printf("result ops=%lu time_us=%llu frames=%lu expect_fault=%lu expect_read=%lu unstable=%lu "
	       "writable_stride=%lu\n", nread,
	       (unsigned long long)(ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000 - t0), nread, nfault,
	       nok, unstable, stride);
	return 0;
}
