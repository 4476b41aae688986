/*
 * ptfault - the threads of one process fault in the same fresh 2 MiB
 * ranges at once.  Every thread that finds a range's PMD entry empty
 * allocates a PTE page; one installs it and the others free theirs again
 * at once, from process context (pte_free() after a lost pmd_install()),
 * not through an mmu_gather and its RCU grace period.  munmap() then frees
 * the installed ones through the gather.  Multi-threaded programs that
 * touch fresh memory together (runtimes, allocators) do the same.
 *
 * --dontneed: thread 0 empties each range with MADV_DONTNEED while the
 * others fault into it, four times per range.  The kernel frees a PTE page
 * emptied that way under the mmap read lock (PT_RECLAIM), while another
 * thread may be taking its lock in pte_offset_map_lock(): the table stays
 * in flight, its lock live, until a grace period has passed.
 */
#include "common.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define RANGE (2UL << 20)	/* what one PTE page maps on x86-64 */
#define PAGE 4096UL

static const char usage[] =
	"Usage: ptfault [options]\n"
	"N rounds: map R fresh 2 MiB ranges; T threads touch a page of each at once; unmap.\n"
	"  --threads T  threads touching at once, 1..64 (default 4)\n"
	"  --ranges R  2 MiB ranges per round, 1..4096 (default 64)\n"
	"  --n N  timed rounds, 1..10000000 (default 100)\n"
	"  --dontneed  thread 0 empties each range (MADV_DONTNEED) as the others fault in, 4 times\n"
	"  --help  print this help and exit\n"
	"Output: result ops=<N x R ranges> time_us=<mean per round> threads=T ranges=R dontneed=0|1\n";

static pthread_barrier_t start, done;
static char *region;
static uint64_t nthreads, nranges, rounds;
static int dontneed;
static atomic_uint arrived, generation;

/* All touchers leave together: a futex barrier would wake them one by one. */
static void spin_barrier(void)
{
	unsigned int gen = atomic_load(&generation);

	if (atomic_fetch_add(&arrived, 1) + 1 == nthreads) {
		atomic_store(&arrived, 0);
		atomic_fetch_add(&generation, 1);
		return;
	}
	while (atomic_load(&generation) == gen)
		sched_yield();
}

static void *toucher(void *arg)
{
	uintptr_t id = (uintptr_t)arg;

	for (uint64_t r = 0; r < rounds; r++) {
		pthread_barrier_wait(&start);
		/* Range by range, each thread its own page: the faults race on the PMD. */
		for (uint64_t i = 0; i < nranges; i++) {
			for (int k = 0; k < (dontneed ? 4 : 1); k++) {
				spin_barrier();
				if (dontneed && id == 0) {
					if (madvise(region + i * RANGE, RANGE, MADV_DONTNEED))
						die_sys("madvise MADV_DONTNEED");
				} else {
					region[i * RANGE + (id % (RANGE / PAGE)) * PAGE] = 1;
				}
			}
		}
		pthread_barrier_wait(&done);
	}
	return NULL;
}

/* R ranges, 2 MiB aligned, never huge pages: every range needs a PTE page. */
static char *map_ranges(void)
{
	size_t len = nranges * RANGE;
	char *p = mmap(NULL, len + RANGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t aligned;

	if (p == MAP_FAILED)
		die_sys("mmap %zu bytes", len + RANGE);
	aligned = ((uintptr_t)p + RANGE - 1) & ~(RANGE - 1);
	if (aligned > (uintptr_t)p && munmap(p, aligned - (uintptr_t)p))
		die_sys("munmap");
	if (munmap((char *)aligned + len, (uintptr_t)p + RANGE - aligned))
		die_sys("munmap");
	/* EINVAL: a kernel without transparent huge pages, which maps none. */
	if (madvise((char *)aligned, len, MADV_NOHUGEPAGE) && errno != EINVAL)
		die_sys("madvise MADV_NOHUGEPAGE");
	return (char *)aligned;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "ranges", required_argument, NULL, 'r' },
		{ "n", required_argument, NULL, 'n' },
		{ "dontneed", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	pthread_t *tids;
	double t0, total;
	int c, err;

	nthreads = 4;
	nranges = 64;
	rounds = 100;
	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 't': nthreads = parse_u64("--threads", optarg, 1, 64); break;
		case 'r': nranges = parse_u64("--ranges", optarg, 1, 4096); break;
		case 'n': rounds = parse_u64("--n", optarg, 1, 10000000); break;
		case 'd': dontneed = 1; break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	if (dontneed && nthreads < 2)
		die("--dontneed needs --threads 2 or more (thread 0 empties, the others fault)");

	if (pthread_barrier_init(&start, NULL, nthreads + 1) || pthread_barrier_init(&done, NULL, nthreads + 1))
		die("pthread_barrier_init failed");
	tids = calloc(nthreads, sizeof(*tids));
	if (!tids)
		die("out of memory");
	for (uint64_t i = 0; i < nthreads; i++) {
		err = pthread_create(&tids[i], NULL, toucher, (void *)(uintptr_t)i);
		if (err)
			die("pthread_create: error %d", err);
	}
	measure_point();
	t0 = now_us();
	for (uint64_t r = 0; r < rounds; r++) {
		region = map_ranges();
		pthread_barrier_wait(&start);
		pthread_barrier_wait(&done);
		if (munmap(region, nranges * RANGE))
			die_sys("munmap");
	}
	total = now_us() - t0;
	for (uint64_t i = 0; i < nthreads; i++)
		pthread_join(tids[i], NULL);

	out_begin("result");
	out_u64("ops", rounds * nranges);
	out_f3("time_us", total / rounds);
	out_u64("threads", nthreads);
	out_u64("ranges", nranges);
	out_u64("dontneed", dontneed);
	out_end();
	free(tids);
	return 0;
}
