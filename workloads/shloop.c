/*
 * shloop - a shell script run in bursts on an otherwise quiet system, as
 * builds, cron jobs and scripts run: each burst is one /bin/sh running K
 * short-lived programs one after the other, and bursts are GAP ms apart.
 * Page tables are allocated and freed in bursts with idle time between,
 * the case a pool policy that gives pages back too soon pays for.
 */
#include "common.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
	"Usage: shloop [options]\n"
	"Run B bursts, GAP ms apart, each one /bin/sh running HELLO K times in a loop.\n"
	"  --bursts B  timed bursts, 1..100000 (default 20)\n"
	"  --k K  programs run by each burst's shell, 1..10000 (default 20)\n"
	"  --gap-ms GAP  idle time between bursts, 0..600000 (default 500)\n"
	"  --hello PATH  program each burst runs (default hello next to this binary)\n"
	"  --warmup W  untimed bursts first, 0..100000 (default 2)\n"
	"  --help  print this help and exit\n"
	"Output: result ops=<B x (K + 1) processes> time_us=<mean per burst> bursts=B k=K gap_ms=GAP\n";

static void gap(uint64_t ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (ms && nanosleep(&ts, &ts))
		;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "bursts", required_argument, NULL, 'b' },
		{ "k", required_argument, NULL, 'k' },
		{ "gap-ms", required_argument, NULL, 'g' },
		{ "hello", required_argument, NULL, 'H' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t bursts = 20, k = 20, gap_ms = 500, warmup = 2;
	const char *hello_opt = NULL;
	double busy_us = 0;
	char *hello, *script;
	int devnull, c;
	size_t len;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'b': bursts = parse_u64("--bursts", optarg, 1, 100000); break;
		case 'k': k = parse_u64("--k", optarg, 1, 10000); break;
		case 'g': gap_ms = parse_u64("--gap-ms", optarg, 0, 600000); break;
		case 'H': hello_opt = optarg; break;
		case 'w': warmup = parse_u64("--warmup", optarg, 0, 100000); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	hello = resolve_hello("--hello", hello_opt);
	len = strlen(hello) + 128;
	script = malloc(len);
	if (!script)
		die("out of memory");
	/* A counting loop in the shell itself: K programs, no other process. A
	 * program that fails ends the script with its status (the loop's own
	 * status would be that of the count). */
	snprintf(script, len, "i=0; while [ $i -lt %llu ]; do '%s' >/dev/null || exit $?; i=$((i+1)); done",
		 (unsigned long long)k, hello);

	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0)
		die_sys("open /dev/null");
	fflush(stdout);
	for (uint64_t i = 0; i < warmup; i++) {
		fork_run_wait(CHILD_SHELL, script, devnull);
		gap(gap_ms);
	}
	measure_point();
	for (uint64_t i = 0; i < bursts; i++) {
		double t0 = now_us();

		fork_run_wait(CHILD_SHELL, script, devnull);
		busy_us += now_us() - t0;
		if (i + 1 < bursts)
			gap(gap_ms);
	}

	out_begin("result");
	out_u64("ops", bursts * (k + 1));
	out_f3("time_us", busy_us / bursts);
	out_u64("bursts", bursts);
	out_u64("k", k);
	out_u64("gap_ms", gap_ms);
	out_end();
	free(script);
	free(hello);
	return 0;
}
