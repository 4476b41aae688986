/*
 * lat_proc - lmbench's lat_proc process-creation latencies (own code):
 *   fork:  fork, child _exit(0), parent waits
 *   exec:  fork, child redirects stdout to /dev/null and execve()s hello
 *   shell: fork, child redirects stdout to /dev/null and runs
 *          /bin/sh -c HELLO
 * Every repetition is timed individually for min/median/max.
 */
#include "common.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"Usage: lat_proc [options]\n"
	"Time fork+wait, fork+exec(hello)+wait or fork+sh -c hello+wait.\n"
	"  --what WHAT  fork, exec or shell (default fork)\n"
	"  --n N  timed repetitions, 1..10000000 (default 100)\n"
	"  --warmup W  untimed repetitions first, 0..10000000 (default 10)\n"
	"  --hello PATH  hello program for exec/shell (default hello next to this binary)\n"
	"  --help  print this help and exit\n"
	"Output: result what=WHAT ops=N time_us=<mean> min_us=<min> median_us=<median> max_us=<max>\n";

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "what", required_argument, NULL, 'W' },
		{ "n", required_argument, NULL, 'n' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "hello", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	static const char *const names[] = {
		[CHILD_EXIT] = "fork", [CHILD_EXEC] = "exec", [CHILD_SHELL] = "shell",
	};
	uint64_t n = 100, warmup = 10;
	enum child_mode mode = CHILD_EXIT;
	const char *hello_opt = NULL;
	char *hello = NULL;
	int devnull = -1, c;
	double *t;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'W':
			if (strcmp(optarg, "fork") == 0)
				mode = CHILD_EXIT;
			else if (strcmp(optarg, "exec") == 0)
				mode = CHILD_EXEC;
			else if (strcmp(optarg, "shell") == 0)
				mode = CHILD_SHELL;
			else
				die_usage("--what: invalid value '%s' (allowed: fork, exec, shell)",
					  optarg);
			break;
		case 'n': n = parse_u64("--n", optarg, 1, 10000000); break;
		case 'w': warmup = parse_u64("--warmup", optarg, 0, 10000000); break;
		case 'H': hello_opt = optarg; break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);

	if (mode != CHILD_EXIT || hello_opt)
		hello = resolve_hello("--hello", hello_opt);
	if (mode == CHILD_SHELL && access("/bin/sh", X_OK) < 0)
		die_sys("/bin/sh");
	if (mode != CHILD_EXIT) {
		devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (devnull < 0)
			die_sys("open /dev/null");
	}
	t = malloc(n * sizeof(*t));
	if (!t)
		die_sys("malloc");

	fflush(stdout);
	for (uint64_t i = 0; i < warmup; i++)
		fork_run_wait(mode, hello, devnull);
	measure_point();
	for (uint64_t i = 0; i < n; i++) {
		double t0 = now_us();

		fork_run_wait(mode, hello, devnull);
		t[i] = now_us() - t0;
	}

	out_begin("result");
	out_word("what", names[mode]);
	out_time_stats(t, n);
	out_end();
	free(t);
	free(hello);
	return 0;
}
