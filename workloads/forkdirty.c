/*
 * forkdirty - fork cost when each of P last-level page-table pages maps K
 * present (written) PTEs. The region is P x 2 MiB, 2 MiB aligned, so that
 * chunk i is mapped by exactly one page-table page; the first K 4 KiB
 * pages of every chunk are written. fork() then copies K PTEs out of each
 * of P page-table pages.
 */
#include "common.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_TABLES 65536	/* 128 GiB of address space */
#define MAX_LIST 512

static const char usage[] =
	"Usage: forkdirty [options]\n"
	"For each K: map a fresh 2 MiB-aligned region of P x 2 MiB, write the\n"
	"first K 4 KiB pages of every 2 MiB chunk, time N x (fork; child _exit(0); wait).\n"
	"  --tables P  page-table pages (2 MiB chunks) to cover, 1..65536 (default 64)\n"
	"  --ptes K  run only this K (PTEs per page-table page), 1..512 (default unset: use --ptes-list)\n"
	"  --ptes-list LIST  comma-separated K values, each 1..512 (default 2,4,6,8,10,12,14,16)\n"
	"  --n N  forks per K, 1..10000000 (default 50)\n"
	"  --help  print this help and exit\n"
	"Output: row ptes=K tables=P ops=N fork_us=<mean>   (per K)\n"
	"        result ops=<all forks> time_us=<mean per fork> tables=P settings=<rows>\n"
	"Under flushless's measure -s the counters start after the first K's writes.\n";

/* Parse "2,4,6" into list[]; returns the count. Strict, like parse_u64. */
static size_t parse_list(const char *arg, uint64_t *list)
{
	char *copy = strdup(arg), *save = NULL, *tok;
	size_t count = 0;

	if (!copy)
		die_sys("strdup");
	/* strtok_r would silently skip empty items ("2,,4", ",2"). */
	if (!arg[0] || arg[0] == ',' || arg[strlen(arg) - 1] == ',' || strstr(arg, ",,"))
		die_usage("--ptes-list: invalid value '%s' (expected comma-separated integers in 1..512)",
			  arg);
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (count == MAX_LIST)
			die_usage("--ptes-list: more than %d values", MAX_LIST);
		list[count++] = parse_u64("--ptes-list", tok, 1, 512);
	}
	free(copy);
	return count;
}

/* Anonymous region of len bytes aligned to PT_SPAN: over-allocate by one
 * span, then trim the unaligned head and the excess tail. */
static char *map_aligned(size_t len)
{
	char *raw = map_anon(len + PT_SPAN);
	char *p = (char *)(((uintptr_t)raw + PT_SPAN - 1) & ~(PT_SPAN - 1));
	size_t head = p - raw, tail = PT_SPAN - head;

	if (head && munmap(raw, head) < 0)
		die_sys("munmap");
	if (tail && munmap(p + len, tail) < 0)
		die_sys("munmap");
	return p;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "tables", required_argument, NULL, 'P' },
		{ "ptes", required_argument, NULL, 'K' },
		{ "ptes-list", required_argument, NULL, 'L' },
		{ "n", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	static uint64_t list[MAX_LIST] = { 2, 4, 6, 8, 10, 12, 14, 16 };
	size_t nlist = 8;
	uint64_t tables = 64, n = 50, ops = 0, one = 0;
	int have_list = 0, c;
	double total_us = 0;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'P': tables = parse_u64("--tables", optarg, 1, MAX_TABLES); break;
		case 'K': one = parse_u64("--ptes", optarg, 1, 512); break;
		case 'L': nlist = parse_list(optarg, list); have_list = 1; break;
		case 'n': n = parse_u64("--n", optarg, 1, 10000000); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	if (one && have_list)
		die_usage("--ptes and --ptes-list are mutually exclusive");
	if (one) {
		list[0] = one;
		nlist = 1;
	}

	fflush(stdout);
	for (size_t s = 0; s < nlist; s++) {
		uint64_t k = list[s];
		size_t len = tables * PT_SPAN;
		char *p = map_aligned(len);
		volatile char *v = p;
		double sum = 0;

		for (uint64_t t = 0; t < tables; t++)
			for (uint64_t i = 0; i < k; i++)
				v[t * PT_SPAN + i * PAGE_4K] = 1;
		/* Under measure -s the counters start here: the forks only (one K). */
		if (s == 0)
			measure_point();
		for (uint64_t i = 0; i < n; i++)
			sum += time_fork_exit();
		if (munmap(p, len) < 0)
			die_sys("munmap");

		out_begin("row");
		out_u64("ptes", k);
		out_u64("tables", tables);
		out_u64("ops", n);
		out_f3("fork_us", sum / n);
		out_end();
		ops += n;
		total_us += sum;
	}

	out_begin("result");
	out_u64("ops", ops);
	out_f3("time_us", total_us / ops);
	out_u64("tables", tables);
	out_u64("settings", nlist);
	out_end();
	return 0;
}
