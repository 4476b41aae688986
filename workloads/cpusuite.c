/*
 * cpusuite - one CPU-bound integer program, timed: the stand-in for a
 * SPECint component. The programs are busybox's (or the host's) gzip,
 * bzip2, lzop, sha256sum, sort, awk and bc, run on a generated input in
 * the spirit of SPEC's 164.gzip, 256.bzip2, and the interpreters.
 *
 * The input is pseudo-random English-like text from a fixed seed, so every
 * run on every machine compresses, hashes and sorts the same bytes. It is
 * written to a temporary file that each run reads on stdin; output goes to
 * /dev/null. Each run is one fork+exec+wait, timed from fork to reap.
 */
#define _GNU_SOURCE
#include "common.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage[] =
	"Usage: cpusuite --program NAME [options]\n"
	"Run a CPU-bound integer program --n times on the same generated input.\n"
	"  --program NAME  gzip, bzip2, lzop, sha256, sort, awk or bc\n"
	"  --input-kb K  size of the generated text in KiB, 1..1048576 (default 1024);\n"
	"       for bc, the factorial computed is of 10*K\n"
	"  --n N  timed runs, 1..10000 (default 3)\n"
	"  --help  print this help and exit\n"
	"Output: row run=<i> us=<time>   (per run)\n"
	"        result ops=N time_us=<mean> min_us= median_us= max_us= program=NAME\n";

struct program {
	const char *name;
	const char *const argv[6];
};

static const struct program programs[] = {
	{ "gzip", { "gzip", "-9", "-c", NULL } },
	{ "bzip2", { "bzip2", "-9", "-c", NULL } },
	{ "lzop", { "lzop", "-c", NULL } },
	{ "sha256", { "sha256sum", NULL } },
	{ "sort", { "sort", NULL } },
	/* Word frequencies: hashing and string handling in an interpreter. */
	{ "awk", { "awk", "{ for (i = 1; i <= NF; i++) n[$i]++ } END { for (w in n) k++; print k }", NULL } },
	/* Big-integer arithmetic in an interpreter; the script is the input. */
	{ "bc", { "bc", NULL } },
};

static const char *const words[] = {
	"the", "page", "table", "of", "a", "process", "is", "freed", "when", "it",
	"exits", "and", "allocated", "again", "for", "next", "one", "cache",
	"keeps", "pages", "out", "IOMMU", "flush", "device", "memory", "kernel",
	"hypervisor", "guest", "writable", "pinned", "fork", "exec", "browser",
	"tab", "opens", "closes", "in", "loop", "busy", "machine",
};

/* The generated input file: text, or bc's factorial script. */
static void write_input(int fd, const char *name, uint64_t kb)
{
	uint64_t state = 0x9e3779b97f4a7c15ULL, size = kb * 1024, done = 0;
	char line[128];

	if (strcmp(name, "bc") == 0) {
		int n = snprintf(line, sizeof(line),
				 "define f(n) { auto i, r; r = 1; for (i = 2; i <= n; i++) r *= i; return (r); }\n"
				 "x = f(%llu); length(x)\n", (unsigned long long)(10 * kb));

		if (write(fd, line, n) != n)
			die_sys("write input");
		return;
	}
	while (done < size) {
		int len = 0;

		while (len < 72) {
			state ^= state << 13;
			state ^= state >> 7;
			state ^= state << 17;
			len += snprintf(line + len, sizeof(line) - len, "%s ",
					words[state % (sizeof(words) / sizeof(words[0]))]);
		}
		line[len - 1] = '\n';
		if (done + len > size)
			len = size - done;
		if (write(fd, line, len) != len)
			die_sys("write input");
		done += len;
	}
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "program", required_argument, NULL, 'p' },
		{ "input-kb", required_argument, NULL, 'k' },
		{ "n", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t kb = 1024, n = 3;
	const struct program *prog = NULL;
	char path[] = "/tmp/cpusuite.XXXXXX";
	double *t;
	int c, in, devnull;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			for (size_t i = 0; i < sizeof(programs) / sizeof(programs[0]); i++)
				if (strcmp(optarg, programs[i].name) == 0)
					prog = &programs[i];
			if (!prog)
				die_usage("--program: unknown program '%s'", optarg);
			break;
		case 'k': kb = parse_u64("--input-kb", optarg, 1, 1048576); break;
		case 'n': n = parse_u64("--n", optarg, 1, 10000); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	if (!prog)
		die_usage("--program is required");

	in = mkstemp(path);
	if (in < 0)
		die_sys("mkstemp %s", path);
	unlink(path);
	write_input(in, prog->name, kb);
	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0)
		die_sys("open /dev/null");
	t = malloc(n * sizeof(*t));
	if (!t)
		die_sys("malloc");

	fflush(stdout);
	for (uint64_t i = 0; i < n; i++) {
		double t0 = now_us();
		pid_t pid = fork();

		if (pid < 0)
			die_sys("fork");
		if (pid == 0) {
			if (lseek(in, 0, SEEK_SET) < 0 || dup2(in, 0) < 0 || dup2(devnull, 1) < 0)
				_exit(126);
			execvp(prog->argv[0], (char *const *)prog->argv);
			dprintf(2, "%s: cannot run %s: %m\n", prog_name, prog->argv[0]);
			_exit(127);
		}
		wait_ok(pid, prog->argv[0]);
		t[i] = now_us() - t0;
		out_begin("row");
		out_u64("run", i);
		out_f3("us", t[i]);
		out_end();
	}

	out_begin("result");
	out_time_stats(t, n);
	out_word("program", prog->name);
	out_end();
	close(in);
	free(t);
	return 0;
}
