/* common.c - helpers shared by the flushless workload programs. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *prog_name = "workload";
static const char *usage_text = "";
static void (*die_hook)(void);
static pid_t main_pid;

void prog_init(char **argv, const char *usage)
{
	if (argv[0] && argv[0][0]) {
		const char *slash = strrchr(argv[0], '/');
		prog_name = slash ? slash + 1 : argv[0];
	}
	usage_text = usage;
	main_pid = getpid();
}

void set_die_hook(void (*hook)(void))
{
	die_hook = hook;
}

static void vmsg(const char *fmt, va_list ap, int err)
{
	fflush(stdout);
	fprintf(stderr, "%s: ", prog_name);
	vfprintf(stderr, fmt, ap);
	if (err)
		fprintf(stderr, ": %s", strerror(err));
	fputc('\n', stderr);
}

static NORETURN void fail_exit(void)
{
	if (die_hook && getpid() == main_pid)
		die_hook();
	exit(1);
}

void die_usage(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, 0);
	va_end(ap);
	fprintf(stderr, "\n%s", usage_text);
	exit(2);
}

void die_sys(const char *fmt, ...)
{
	int err = errno;
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, err);
	va_end(ap);
	fail_exit();
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, 0);
	va_end(ap);
	fail_exit();
}

void help_exit(void)
{
	fputs(usage_text, stdout);
	exit(0);
}

void bad_option(int c, char **argv)
{
	/* With a leading ':' in optstring and opterr = 0, getopt_long returns
	 * ':' for a missing value and '?' for anything it does not know;
	 * argv[optind - 1] is the offending word in both cases. */
	const char *word = optind > 0 ? argv[optind - 1] : "?";

	if (c == ':')
		die_usage("option '%s' requires a value", word);
	if (strncmp(word, "--", 2) == 0 && strchr(word, '='))
		die_usage("unknown option, or option takes no value: '%s'", word);
	die_usage("unknown option '%s'", word);
}

void no_operands(int argc, char **argv)
{
	if (optind < argc)
		die_usage("unexpected argument '%s'", argv[optind]);
}

uint64_t parse_u64(const char *opt, const char *arg, uint64_t min, uint64_t max)
{
	unsigned long long v;
	char *end;

	/* strtoull alone would accept " 1", "+1" and even "-1" (as 2^64-1). */
	if (arg[0] < '0' || arg[0] > '9')
		goto bad;
	errno = 0;
	v = strtoull(arg, &end, 10);
	if (errno || *end != '\0')
		goto bad;
	if (v < min || v > max)
		die_usage("%s: value %llu out of range (allowed %llu..%llu)", opt,
			  v, (unsigned long long)min, (unsigned long long)max);
	return v;
bad:
	die_usage("%s: invalid value '%s' (expected an integer in %llu..%llu)",
		  opt, arg, (unsigned long long)min, (unsigned long long)max);
}

double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

char *resolve_hello(const char *opt, const char *opt_value)
{
	char buf[PATH_MAX + 16];
	char *path, *abs;
	struct stat st;

	if (opt_value) {
		path = strdup(opt_value);
	} else {
		ssize_t n = readlink("/proc/self/exe", buf, PATH_MAX);
		char *slash;

		if (n <= 0)
			die_usage("%s not given and /proc/self/exe unreadable (%s): "
				  "cannot locate the hello program", opt,
				  n < 0 ? strerror(errno) : "empty");
		buf[n] = '\0';
		slash = strrchr(buf, '/');
		strcpy(slash ? slash + 1 : buf, "hello");
		path = strdup(buf);
	}
	if (!path)
		die_sys("strdup");
	if (stat(path, &st) < 0)
		die_usage("%s: '%s': %s", opt, path, strerror(errno));
	if (!S_ISREG(st.st_mode) || access(path, X_OK) < 0)
		die_usage("%s: '%s' is not an executable file", opt, path);
	/* Absolute, so "sh -c PATH" runs the same file instead of a PATH search. */
	abs = realpath(path, NULL);
	if (!abs)
		die_usage("%s: '%s': %s", opt, path, strerror(errno));
	free(path);
	return abs;
}

const char *status_str(int status)
{
	static char buf[64];

	if (WIFEXITED(status))
		snprintf(buf, sizeof(buf), "exited with status %d",
			 WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, sizeof(buf), "killed by signal %d (%s)",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, sizeof(buf), "wait status 0x%x", status);
	return buf;
}

void wait_ok(pid_t pid, const char *what)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die_sys("waitpid(%s %d)", what, (int)pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("%s %d %s", what, (int)pid, status_str(status));
}

void fork_run_wait(enum child_mode mode, const char *hello, int devnull_fd)
{
	pid_t pid = fork();

	if (pid < 0)
		die_sys("fork");
	if (pid == 0) {
		if (mode == CHILD_EXIT)
			_exit(0);
		if (dup2(devnull_fd, STDOUT_FILENO) < 0)
			_exit(127);
		if (mode == CHILD_EXEC) {
			char *const args[] = { (char *)"hello", NULL };
			extern char **environ;

			execve(hello, args, environ);
		} else {
			execl("/bin/sh", "sh", "-c", hello, (char *)NULL);
		}
		/* Single-threaded child: stdio on stderr is safe here. */
		fprintf(stderr, "%s: child: exec %s: %s\n", prog_name,
			mode == CHILD_EXEC ? hello : "/bin/sh", strerror(errno));
		_exit(127);
	}
	wait_ok(pid, "child");
}

double time_fork_exit(void)
{
	double t0 = now_us();

	fork_run_wait(CHILD_EXIT, NULL, -1);
	return now_us() - t0;
}

void *map_anon(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die_sys("mmap %zu KiB anonymous", len / 1024);
	/* EINVAL: a kernel without THP, where no huge page can form anyway. */
	if (madvise(p, len, MADV_NOHUGEPAGE) < 0 && errno != EINVAL)
		die_sys("madvise %zu KiB MADV_NOHUGEPAGE", len / 1024);
	return p;
}

void touch_pages(void *p, size_t len)
{
	/* volatile: the stores must happen even though nothing reads them. */
	volatile char *c = p;

	for (size_t off = 0; off < len; off += PAGE_4K)
		c[off] = 1;
}

/* --- output ------------------------------------------------------------ */

void out_begin(const char *kind)
{
	fputs(kind, stdout);
}

void out_u64(const char *key, uint64_t v)
{
	printf(" %s=%llu", key, (unsigned long long)v);
}

void out_fp(const char *key, double v, int decimals)
{
	printf(" %s=%.*f", key, decimals, v);
}

void out_f3(const char *key, double v)
{
	out_fp(key, v, 3);
}

void out_word(const char *key, const char *word)
{
	printf(" %s=%s", key, word);
}

void out_end(void)
{
	putchar('\n');
	fflush(stdout);
}

void note(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

void out_time_stats(double *t, uint64_t n)
{
	double sum = 0;

	for (uint64_t i = 0; i < n; i++)
		sum += t[i];
	qsort(t, n, sizeof(*t), cmp_double);
	out_u64("ops", n);
	out_f3("time_us", sum / n);
	out_f3("min_us", t[0]);
	out_f3("median_us", n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2);
	out_f3("max_us", t[n - 1]);
}

void measure_point(void)
{
	const char *path = getenv("FLUSHLESS_SYNC");
	int fd, i;

	if (!path || !*path)
		return;
	fflush(stdout);
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		die_sys("FLUSHLESS_SYNC file %s", path);
	close(fd);
	/* 10 ms steps, at most ten minutes: never hang on a lost reader. */
	for (i = 0; access(path, F_OK) == 0; i++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		if (i == 60000)
			die("nobody removed FLUSHLESS_SYNC file %s", path);
		nanosleep(&ts, NULL);
	}
}

void check_size_range(uint64_t min_kb, uint64_t max_kb)
{
	if (min_kb % 4)
		die_usage("--min-kb: %llu is not a multiple of 4 (whole 4 KiB pages)",
			  (unsigned long long)min_kb);
	if (max_kb < min_kb)
		die_usage("--max-kb (%llu) must be >= --min-kb (%llu)",
			  (unsigned long long)max_kb, (unsigned long long)min_kb);
}
