/*
 * common.h - helpers shared by the flushless workload programs.
 *
 * Output contract (stdout), see README.md:
 *   row key=value ...      one per table row (table programs only)
 *   result key=value ...   exactly one per run, printed last
 *   # text                 rare commentary
 * Errors go to stderr; exit 2 = bad usage, 1 = runtime failure.
 */
#ifndef FLUSHLESS_COMMON_H
#define FLUSHLESS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The page size the workloads reason about (x86-64 base pages). */
#define PAGE_4K 4096UL
/* The span one last-level page-table page maps on x86-64 (512 PTEs). */
#define PT_SPAN (512UL * PAGE_4K)

#define NORETURN __attribute__((noreturn))
#define PRINTF(a, b) __attribute__((format(printf, a, b)))

/* --- setup and errors -------------------------------------------------- */

/* Record the program name (basename of argv[0]) and its usage text. */
void prog_init(char **argv, const char *usage);
extern const char *prog_name;

/* "prog: message" + usage on stderr, exit 2. */
NORETURN void die_usage(const char *fmt, ...) PRINTF(1, 2);
/* "prog: message: strerror(errno)" on stderr, exit 1. */
NORETURN void die_sys(const char *fmt, ...) PRINTF(1, 2);
/* "prog: message" on stderr, exit 1. */
NORETURN void die(const char *fmt, ...) PRINTF(1, 2);
/*
 * Called by die() and die_sys() just before exit(1), in the process that
 * called prog_init() only (churn uses it to kill its children and remove
 * its temp dir).
 */
void set_die_hook(void (*hook)(void));

/* Usage on stdout, exit 0 (for --help). */
NORETURN void help_exit(void);
/* Turn getopt_long's '?' / ':' return into a usage error (exit 2). */
NORETURN void bad_option(int c, char **argv);
/* Reject positional arguments left after option parsing. */
void no_operands(int argc, char **argv);

/*
 * Strict unsigned parse: decimal digits only (no sign, no blanks, no
 * suffix), value in [min, max]; otherwise a usage error naming the option.
 */
uint64_t parse_u64(const char *opt, const char *arg, uint64_t min, uint64_t max);

/* --- time -------------------------------------------------------------- */

/* CLOCK_MONOTONIC in microseconds / nanoseconds. */
double now_us(void);
uint64_t now_ns(void);

/* --- processes and memory ---------------------------------------------- */

enum child_mode {
	CHILD_EXIT,	/* child calls _exit(0) at once */
	CHILD_EXEC,	/* child execve()s the hello program */
	CHILD_SHELL,	/* child runs /bin/sh -c HELLO */
};

/*
 * Resolve the hello program: opt_value if given, else "hello" next to
 * /proc/self/exe. Must be an executable regular file, else a usage error
 * naming opt. Returns an absolute path (malloc'd).
 */
char *resolve_hello(const char *opt, const char *opt_value);

/*
 * fork(); the child does what mode says (for EXEC/SHELL with stdout
 * redirected to devnull_fd, and _exit(127) if the exec fails); the parent
 * waits for it. Any failure, including a non-zero child exit, is fatal
 * (exit 1).
 */
void fork_run_wait(enum child_mode mode, const char *hello, int devnull_fd);

/* Same with CHILD_EXIT, returning the elapsed fork+wait time in us. */
double time_fork_exit(void);

/*
 * Wait (retrying on EINTR) for pid; fatal unless it exited with status 0.
 * what names the child in the message.
 */
void wait_ok(pid_t pid, const char *what);

/* Describe a wait status ("exited with status 3", "killed by signal 9"). */
const char *status_str(int status);

/*
 * Private anonymous mapping with transparent huge pages disabled (so
 * native runs see 4 KiB PTEs like a Xen PV guest does); fatal on failure.
 */
void *map_anon(size_t len);
/* Write one byte in every 4 KiB page of [p, p+len). */
void touch_pages(void *p, size_t len);

/* --- output ------------------------------------------------------------ */

/*
 * End of set-up and warm-up: under the testbed's measure script
 * (FLUSHLESS_SYNC=PATH), create PATH and wait until the script, having read
 * Xen's counters, removes it, so that the counts cover the timed operations
 * only.  Does nothing otherwise.
 */
void measure_point(void);

/* --min-kb/--max-kb of the size sweeps: whole pages, min <= max; else exit 2. */
void check_size_range(uint64_t min_kb, uint64_t max_kb);

void out_begin(const char *kind);		/* "row" or "result" */
void out_u64(const char *key, uint64_t v);
void out_f3(const char *key, double v);		/* "%.3f" */
void out_fp(const char *key, double v, int decimals);
void out_word(const char *key, const char *word);
void out_end(void);				/* newline + flush */
void note(const char *fmt, ...) PRINTF(1, 2);	/* "# ..." line */
/*
 * Inside a result line: ops=N time_us=<mean> min_us= median_us= max_us= of
 * the N timings in t (microseconds); sorts t.
 */
void out_time_stats(double *t, uint64_t n);

#endif
