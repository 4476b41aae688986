/*
 * ptcycle - what one PTE page costs to make and to free in a live address
 * space, measured against the same operations that need no new table.
 *
 * A cycle maps 1 MiB at the start of a 2 MiB range, writes one page of it
 * (a page fault) and unmaps it again (munmap).  In a "table" cycle nothing
 * else lies in the range: the fault allocates the range's PTE page and the
 * unmap frees it.  In a "control" cycle a PROT_NONE mapping holds the
 * range's other half, so the PTE page outlives the cycle and the fault and
 * the unmap do all the rest alike.  The differences are one PTE page made
 * and freed, wherever that work lands: on Xen PV, the pin and unpin
 * hypercalls and the IOMMU work Xen does in them (7.3's pv hooks only queue
 * them when lazy MMU mode is on, so timing the hooks alone misses it).
 * Table and control cycles alternate, so that drift hits both alike.
 */
#include "common.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define RANGE (2UL << 20)	/* what one PTE page maps on x86-64 */
#define HALF (RANGE / 2)

static const char usage[] =
	"Usage: ptcycle [options]\n"
	"N table cycles and N control cycles, alternating: map 1 MiB, write a page, unmap.\n"
	"A table cycle allocates and frees a PTE page; a control cycle finds one kept.\n"
	"  --n N  timed cycles of each kind, 1..1000000 (default 1000)\n"
	"  --warmup W  untimed cycles of each kind first, 0..1000000 (default 100)\n"
	"  --help  print this help and exit\n"
	"Output: result ops=N time_us=<table cycle> table_fault_ns=.. control_fault_ns=.. table_unmap_ns=.. control_unmap_ns=..\n"
	"        pte_alloc_ns=<fault difference> pte_free_ns=<unmap difference> (medians; means as *_mean_ns)\n";

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double median(uint64_t *v, uint64_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n % 2 ? (double)v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static double mean(const uint64_t *v, uint64_t n)
{
	double s = 0;

	for (uint64_t i = 0; i < n; i++)
		s += (double)v[i];
	return s / (double)n;
}

/* One cycle at RANGE_START: the fault's and the unmap's time, in ns. */
static void cycle(char *range_start, uint64_t *fault_ns, uint64_t *unmap_ns)
{
	char *p = mmap(range_start, HALF, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	uint64_t t0, t1, t2;

	if (p == MAP_FAILED)
		die_sys("mmap at %p", (void *)range_start);
	if (p != range_start)
		die("mmap gave %p, not %p (a kernel without MAP_FIXED_NOREPLACE)", (void *)p, (void *)range_start);
	t0 = now_ns();
	*(volatile char *)p = 1;
	t1 = now_ns();
	if (munmap(p, HALF))
		die_sys("munmap");
	t2 = now_ns();
	*fault_ns = t1 - t0;
	*unmap_ns = t2 - t1;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "n", required_argument, NULL, 'n' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t n = 1000, warmup = 100, *v[4], dummy_fault, dummy_unmap;
	char *base, *table_range, *control_range;
	uintptr_t aligned;
	double tf, cf, tu, cu;
	int c;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'n': n = parse_u64("--n", optarg, 1, 1000000); break;
		case 'w': warmup = parse_u64("--warmup", optarg, 0, 1000000); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	for (int i = 0; i < 4; i++) {
		v[i] = calloc(n, sizeof(*v[i]));
		if (!v[i])
			die("out of memory");
	}

	/*
	 * Two 2 MiB ranges with a free 2 MiB on each side, so that no other
	 * mapping shares their PTE pages: reserve 8 MiB + alignment, give it
	 * all back, and map into it with MAP_FIXED_NOREPLACE.
	 */
	base = mmap(NULL, 5 * RANGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		die_sys("mmap %lu bytes", 5 * RANGE);
	if (munmap(base, 5 * RANGE))
		die_sys("munmap");
	aligned = ((uintptr_t)base + RANGE - 1) & ~(RANGE - 1);
	table_range = (char *)aligned + RANGE;
	control_range = (char *)aligned + 3 * RANGE;
	if (mmap(control_range + HALF, HALF, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
		 MAP_FIXED_NOREPLACE, -1, 0) != control_range + HALF)
		die_sys("mmap the control range's other half");

	for (uint64_t i = 0; i < warmup; i++) {
		cycle(table_range, &dummy_fault, &dummy_unmap);
		cycle(control_range, &dummy_fault, &dummy_unmap);
	}
	measure_point();
	for (uint64_t i = 0; i < n; i++) {
		cycle(table_range, &v[0][i], &v[2][i]);
		cycle(control_range, &v[1][i], &v[3][i]);
	}

	out_begin("result");
	out_u64("ops", n);
	/* The contract's figure: a table cycle's fault and unmap, in us. */
	out_f3("time_us", (mean(v[0], n) + mean(v[2], n)) / 1000.0);
	out_f3("table_fault_mean_ns", mean(v[0], n));
	out_f3("control_fault_mean_ns", mean(v[1], n));
	out_f3("table_unmap_mean_ns", mean(v[2], n));
	out_f3("control_unmap_mean_ns", mean(v[3], n));
	tf = median(v[0], n);
	cf = median(v[1], n);
	tu = median(v[2], n);
	cu = median(v[3], n);
	out_f3("table_fault_ns", tf);
	out_f3("control_fault_ns", cf);
	out_f3("table_unmap_ns", tu);
	out_f3("control_unmap_ns", cu);
	out_f3("pte_alloc_ns", tf - cf);
	out_f3("pte_free_ns", tu - cu);
	out_end();
	for (int i = 0; i < 4; i++)
		free(v[i]);
	return 0;
}
