/*
 * forkbench - mean cost of fork + wait, optionally with the child exec'ing
 * a tiny static program, optionally with resident anonymous memory in the
 * parent whose page tables every fork has to copy.  With --procs P, P
 * processes run the loop at once (one per vCPU: does the cache scale?).
 */
#include "common.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage[] =
	"Usage: forkbench [options]\n"
	"Time N x (fork; child _exit(0) or execve(hello); parent waitpid).\n"
	"  --n N  timed repetitions, 1..10000000 (default 200)\n"
	"  --exec  child execve()s the hello program, stdout to /dev/null\n"
	"  --hello PATH  hello program for --exec (default hello next to this binary)\n"
	"  --touch-mb M  MiB of anonymous memory the parent writes before the loop, 0..4096 (default 0)\n"
	"  --warmup W  untimed repetitions first, 0..10000000 (default 0)\n"
	"  --procs P  P processes each run the warm-up and the N repetitions at once, 1..64 (default 1)\n"
	"  --help  print this help and exit\n"
	"Output: result ops=<P x N> time_us=<mean per fork+wait of one loop> exec=0|1 touch_mb=M procs=P\n"
	"        total_s=<timed seconds> ops_per_s=<all loops together>\n";

/* P loops at once: each warms up, then all start together; returns the seconds taken. */
static double run_parallel(uint64_t procs, uint64_t n, uint64_t warmup, enum child_mode mode,
			   const char *hello, int devnull)
{
	int ready[2], go[2], status;
	double t0;
	char byte;

	if (pipe(ready) || pipe(go))
		die_sys("pipe");
	for (uint64_t p = 0; p < procs; p++) {
		pid_t pid = fork();

		if (pid < 0)
			die_sys("fork");
		if (pid == 0) {
			close(ready[0]);
			close(go[1]);
			for (uint64_t i = 0; i < warmup; i++)
				fork_run_wait(mode, hello, devnull);
			if (write(ready[1], "r", 1) != 1)
				_exit(1);
			/* EOF when the parent closes its end: everyone starts. */
			if (read(go[0], &byte, 1) != 0)
				_exit(1);
			for (uint64_t i = 0; i < n; i++)
				fork_run_wait(mode, hello, devnull);
			_exit(0);
		}
	}
	close(ready[1]);
	close(go[0]);
	for (uint64_t p = 0; p < procs; p++)
		if (read(ready[0], &byte, 1) != 1)
			die("a loop process died during its warm-up");
	measure_point();
	t0 = now_us();
	close(go[1]);
	for (uint64_t p = 0; p < procs; p++) {
		if (wait(&status) < 0)
			die_sys("wait");
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			die("a loop process failed");
	}
	close(ready[0]);
	return (now_us() - t0) / 1e6;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "n", required_argument, NULL, 'n' },
		{ "exec", no_argument, NULL, 'e' },
		{ "hello", required_argument, NULL, 'H' },
		{ "touch-mb", required_argument, NULL, 't' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "procs", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t n = 200, touch_mb = 0, warmup = 0, procs = 1;
	const char *hello_opt = NULL;
	char *hello = NULL;
	enum child_mode mode = CHILD_EXIT;
	int devnull = -1, c;
	double t0, total_us;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'n': n = parse_u64("--n", optarg, 1, 10000000); break;
		case 'e': mode = CHILD_EXEC; break;
		case 'H': hello_opt = optarg; break;
		case 't': touch_mb = parse_u64("--touch-mb", optarg, 0, 4096); break;
		case 'w': warmup = parse_u64("--warmup", optarg, 0, 10000000); break;
		case 'p': procs = parse_u64("--procs", optarg, 1, 64); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);

	/* An explicit --hello is checked even without --exec: fail early. */
	if (mode == CHILD_EXEC || hello_opt)
		hello = resolve_hello("--hello", hello_opt);
	if (mode == CHILD_EXEC) {
		devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (devnull < 0)
			die_sys("open /dev/null");
	}
	if (touch_mb) {
		size_t len = (size_t)touch_mb << 20;

		touch_pages(map_anon(len), len);	/* kept until exit */
	}

	/* Children only _exit or exec, so buffered stdout is never duplicated;
	 * flush anyway so nothing is pending across the forks. */
	fflush(stdout);
	if (procs > 1) {
		total_us = run_parallel(procs, n, warmup, mode, hello, devnull) * 1e6;
	} else {
		for (uint64_t i = 0; i < warmup; i++)
			fork_run_wait(mode, hello, devnull);
		measure_point();
		t0 = now_us();
		for (uint64_t i = 0; i < n; i++)
			fork_run_wait(mode, hello, devnull);
		total_us = now_us() - t0;
	}

	out_begin("result");
	out_u64("ops", procs * n);
	out_f3("time_us", total_us / n);
	out_u64("exec", mode == CHILD_EXEC);
	out_u64("touch_mb", touch_mb);
	out_u64("procs", procs);
	out_f3("total_s", total_us / 1e6);
	out_f3("ops_per_s", procs * n / (total_us / 1e6));
	out_end();
	free(hello);
	return 0;
}
