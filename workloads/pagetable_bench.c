/*
 * pagetable_bench - fork cost against the amount of resident anonymous
 * memory in the parent. fork() copies the parent's page tables (PTEs of
 * anonymous pages are copied and write-protected for copy-on-write), so
 * its cost grows with the mapped size.
 *
 * Note: the first fork of each size also write-protects the parent's
 * PTEs; later forks find them already read-only. Every fork is timed.
 */
#include "common.h"

#include <getopt.h>
#include <stdio.h>
#include <sys/mman.h>

#define MAX_KB (16ULL << 20)	/* 16 GiB */

static const char usage[] =
	"Usage: pagetable_bench [options]\n"
	"For sizes doubling from --min-kb to --max-kb: map and write that much\n"
	"anonymous memory, then time N x (fork; child _exit(0); parent waitpid).\n"
	"  --min-kb K  smallest size in KiB, a multiple of 4, 4..16777216 (default 4)\n"
	"  --max-kb K  largest size in KiB, >= --min-kb, up to 16777216 (default 131072)\n"
	"  --n N  forks per size, 1..10000000 (default 20)\n"
	"  --help  print this help and exit\n"
	"Output: row size_kb=S ops=N fork_us=<mean> min_us=<min>   (per size)\n"
	"        result ops=<all forks> time_us=<mean per fork> sizes=<rows>\n";

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "min-kb", required_argument, NULL, 'a' },
		{ "max-kb", required_argument, NULL, 'b' },
		{ "n", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t min_kb = 4, max_kb = 131072, n = 20, ops = 0, sizes = 0;
	double total_us = 0;
	int c;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'a': min_kb = parse_u64("--min-kb", optarg, 4, MAX_KB); break;
		case 'b': max_kb = parse_u64("--max-kb", optarg, 4, MAX_KB); break;
		case 'n': n = parse_u64("--n", optarg, 1, 10000000); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	check_size_range(min_kb, max_kb);

	fflush(stdout);
	for (uint64_t kb = min_kb; kb <= max_kb; kb *= 2) {
		size_t len = kb * 1024;
		void *p = map_anon(len);
		double sum = 0, min = 0;

		touch_pages(p, len);
		for (uint64_t i = 0; i < n; i++) {
			double t = time_fork_exit();

			sum += t;
			if (i == 0 || t < min)
				min = t;
		}
		if (munmap(p, len) < 0)
			die_sys("munmap");

		out_begin("row");
		out_u64("size_kb", kb);
		out_u64("ops", n);
		out_f3("fork_us", sum / n);
		out_f3("min_us", min);
		out_end();
		ops += n;
		total_us += sum;
		sizes++;
	}

	out_begin("result");
	out_u64("ops", ops);
	out_f3("time_us", total_us / ops);
	out_u64("sizes", sizes);
	out_end();
	return 0;
}
