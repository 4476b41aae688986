/*
 * tlb_bench - average latency of dependent loads that visit every page of
 * a map in random order, against the map size. Once the pages outnumber
 * the TLB entries, each load pays a TLB miss (page walk).
 *
 * Each page holds one pointer, at a random cache line inside the page (so
 * the slots do not all fall into the same cache set), to the slot of the
 * next page of a random cycle through all pages. Chasing the chain makes
 * every load depend on the previous one.
 */
#include "common.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define MAX_KB (16ULL << 20)	/* 16 GiB */
#define LINE 64

static const char usage[] =
	"Usage: tlb_bench [options]\n"
	"For sizes doubling from --min-kb to --max-kb: time dependent loads\n"
	"following a random cycle that visits every 4 KiB page once.\n"
	"  --min-kb K  smallest size in KiB, a multiple of 4, 4..16777216 (default 4)\n"
	"  --max-kb K  largest size in KiB, >= --min-kb, up to 16777216 (default 262144)\n"
	"  --accesses A  timed loads per size, 1..1000000000000 (default 1000000)\n"
	"  --seed S  xorshift64 PRNG seed, 1..18446744073709551615 (default 1)\n"
	"  --help  print this help and exit\n"
	"Output: row size_kb=S pages=P accesses=A ns_per_access=<mean>   (per size)\n"
	"        result ops=<all accesses> time_us=<mean per access> sizes=<rows> seed=S\n";

static uint64_t rng_state;

/* Marsaglia xorshift64; state must be non-zero. */
static uint64_t rng(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* Uniform-enough value in [0, n) (multiply-shift, no modulo bias worth
 * mentioning for n << 2^64). */
static uint64_t rng_below(uint64_t n)
{
	return (uint64_t)(((unsigned __int128)rng() * n) >> 64);
}

/* Keeps the chain's final pointer observable. */
void *volatile tlb_sink;

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "min-kb", required_argument, NULL, 'a' },
		{ "max-kb", required_argument, NULL, 'b' },
		{ "accesses", required_argument, NULL, 'A' },
		{ "seed", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t min_kb = 4, max_kb = 262144, accesses = 1000000, seed = 1;
	uint64_t ops = 0, sizes = 0;
	double total_ns = 0;
	int c;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'a': min_kb = parse_u64("--min-kb", optarg, 4, MAX_KB); break;
		case 'b': max_kb = parse_u64("--max-kb", optarg, 4, MAX_KB); break;
		case 'A': accesses = parse_u64("--accesses", optarg, 1, 1000000000000ULL); break;
		case 's': seed = parse_u64("--seed", optarg, 1, UINT64_MAX); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	check_size_range(min_kb, max_kb);

	for (uint64_t kb = min_kb; kb <= max_kb; kb *= 2) {
		size_t len = kb * 1024, pages = len / PAGE_4K;
		char *base = map_anon(len);
		size_t *order = malloc(pages * sizeof(*order));
		void **p;
		double t0, ns;

		if (!order)
			die_sys("malloc");
		touch_pages(base, len);

		/* Same seed for every size: a size's chain does not depend on
		 * which sizes ran before it. */
		rng_state = seed;
		for (size_t i = 0; i < pages; i++)
			order[i] = i;
		for (size_t i = pages - 1; i > 0; i--) {	/* Fisher-Yates */
			size_t j = rng_below(i + 1), tmp = order[i];

			order[i] = order[j];
			order[j] = tmp;
		}
		/* order[i] becomes the address of page order[i]'s slot. */
		for (size_t i = 0; i < pages; i++)
			order[i] = (size_t)(base + order[i] * PAGE_4K +
					    rng_below(PAGE_4K / LINE) * LINE);
		/* Link the slots in shuffled order into one cycle. */
		for (size_t i = 0; i < pages; i++)
			*(void **)order[i] = (void *)order[(i + 1) % pages];

		/* One untimed lap to warm the caches/TLB the same way for
		 * every size; then the timed loads. */
		p = (void **)order[0];
		for (size_t i = 0; i < pages; i++)
			p = *p;
		t0 = now_us();
		for (uint64_t i = 0; i < accesses; i++)
			p = *p;
		ns = (now_us() - t0) * 1e3;
		tlb_sink = p;

		free(order);
		if (munmap(base, len) < 0)
			die_sys("munmap");

		out_begin("row");
		out_u64("size_kb", kb);
		out_u64("pages", pages);
		out_u64("accesses", accesses);
		out_f3("ns_per_access", ns / accesses);
		out_end();
		ops += accesses;
		total_ns += ns;
		sizes++;
	}

	out_begin("result");
	out_u64("ops", ops);
	/* Sub-nanosecond resolution: a load is ~0.001 us. */
	out_fp("time_us", total_ns / 1e3 / ops, 6);
	out_u64("sizes", sizes);
	out_u64("seed", seed);
	out_end();
	return 0;
}
