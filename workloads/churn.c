/*
 * churn - the "busy" state: a browser-like process tree, started, grown
 * tab by tab and closed, in a loop, at a target rate of process creations.
 *
 * Process tree and schedule. Creations are numbered k = 0, 1, 2, ... and
 * creation k happens at t_k = start + k * 60/R s (absolute CLOCK_MONOTONIC
 * sleeps; when behind schedule nothing sleeps, so a slow machine simply
 * runs flat out). A session that starts at slot k0 is:
 *
 *   slot k0         main forks the browser
 *   slot k0+1..k0+T the browser forks tab 1..T (each maps the libraries,
 *                   writes its heap, then blocks reading its own pipe)
 *   slot k0+T+1     the browser closes the tabs one by one (close the
 *                   pipe's write end, waitpid), then exits; main reaps it
 *                   and forks the next browser at that same slot.
 *
 * So closing happens right before the next creation, at its scheduled
 * time, and at most T tabs + 1 browser are alive. Creation and exit rates
 * are both R on average; exits come in a burst of T+1 per session. No tab
 * is opened at or after the end of the run; the browser then closes early
 * at the end time.
 *
 * Counting: main counts the browsers it forks and reaps; the browser
 * writes one byte to an event pipe per tab created ('c') and per tab
 * reaped ('x'), which main reads while the session runs. Counts are exact
 * and --report rows are printed from main's loop. A browser or tab that
 * fails writes 'f' (tabs keep the pipe for that) and main stops the run.
 *
 * Cleanup: the browser and its tabs form their own process group, which
 * main can kill at once without touching its own group (that may be the
 * harness's). Main is a child subreaper, so tabs orphaned by a killed
 * browser are reparented to main and reaped. On error or SIGINT/SIGTERM
 * main kills the group, reaps everything, removes its temp dir (and dies
 * of the signal). If main itself is SIGKILLed, the browser gets
 * PR_SET_PDEATHSIG SIGKILL and the tabs see EOF on their pipes; only the
 * temp dir is then left behind.
 */
#define _GNU_SOURCE	/* pipe2, ppoll */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TABS 256
#define MAX_LIBS 64

static const char usage[] =
	"Usage: churn [options]\n"
	"Run browser-like sessions (a browser process that opens tabs one by one,\n"
	"then closes them all) at a target rate of process creations.\n"
	"  --duration S  seconds to run, 1..86400 (default 60)\n"
	"  --rate R  target process creations (and exits) per minute, 1..100000 (default 542)\n"
	"  --tabs T  tabs per browser session, 1..256 (default 8)\n"
	"  --libs L  shared library files each process maps, 0..64 (default 6)\n"
	"  --lib-kb K  size of each library file in KiB, 1..1048576 (default 512)\n"
	"  --heap-kb H  heap each tab writes, in KiB, 0..4194304 (default 2048)\n"
	"  --report S  seconds between progress rows, 0 = none, 0..86400 (default 0)\n"
	"  --warmup S  seconds of sessions before the measured duration, 0..86400 (default 0)\n"
	"  --resident N  idle processes that map the libraries and write a heap like a tab,\n"
	"       for the whole run: the rest of a desktop, 0..1024 (default 0)\n"
	"  --help  print this help and exit\n"
	"Output: row t_s=<elapsed s> created=<cumulative> exited=<cumulative>   (with --report)\n"
	"        result ops=<created> time_us=<wall time per created process> duration_s=<elapsed s>\n"
	"               rate_per_min=<achieved creations/min> sessions=<browsers> target_rate=R\n";

static uint64_t opt_duration = 60, opt_rate = 542, opt_tabs = 8, opt_libs = 6;
static uint64_t opt_lib_kb = 512, opt_heap_kb = 2048, opt_report = 0;
static uint64_t opt_resident, opt_warmup;

static uint64_t start_ns, end_ns;
static pid_t main_pid;

/* State the signal handler and die hook use; see cleanup(). */
static char tmp_dir[32];
static char lib_path[MAX_LIBS][48];
static volatile sig_atomic_t nlib_paths;	/* paths that may exist */
static volatile sig_atomic_t browser_pgid;	/* 0 = no live session */
static volatile sig_atomic_t resident_pgid;	/* 0 = no residents */

/* In a browser or tab: the event pipe, to report a failure at once. */
static int fail_fd = -1;

/* ----------------------------------------------------------------------- */

static uint64_t slot_ns(uint64_t k)
{
	return start_ns + (uint64_t)((unsigned __int128)k * 60000000000ULL / opt_rate);
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = { .tv_sec = t / 1000000000, .tv_nsec = t % 1000000000 };

	if (now_ns() >= t)
		return;		/* behind schedule: go as fast as possible */
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void block_signals(sigset_t *old);

/*
 * Kill the session's process group, reap every child (including tabs
 * reparented to us as subreaper), remove the temp files. Only
 * async-signal-safe calls: it also runs from the signal handler.
 */
static void cleanup(void)
{
	pid_t g = browser_pgid;
	int saved = errno;

	if (g > 0)
		kill(-g, SIGKILL);
	browser_pgid = 0;
	if (resident_pgid > 0)
		kill(-resident_pgid, SIGKILL);
	resident_pgid = 0;
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
		;
	for (int i = nlib_paths - 1; i >= 0; i--)
		unlink(lib_path[i]);
	nlib_paths = 0;
	if (tmp_dir[0])
		rmdir(tmp_dir);
	tmp_dir[0] = '\0';
	errno = saved;
}

/* die()/die_sys() hook: no signal handler may run cleanup() concurrently. */
static void die_cleanup(void)
{
	block_signals(NULL);
	cleanup();
}

static void on_signal(int sig)
{
	cleanup();
	/* Die of the same signal so our parent sees how we ended. It is
	 * blocked while we are in its handler and delivered on return. */
	signal(sig, SIG_DFL);
	raise(sig);
}

static void block_signals(sigset_t *old)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, old);
}

/* In a new child: default signal handling (main's handler must never run
 * there), then restore the mask the parent had before fork. */
static void child_signals(const sigset_t *old)
{
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	sigprocmask(SIG_SETMASK, old, NULL);
}

/*
 * Browser/tab failure: message, an 'f' event so main stops the run at once
 * (instead of when the session closes), _exit (never exit(): no stdio
 * flush, no atexit, no die hook in a child).
 */
static void __attribute__((noreturn, format(printf, 2, 3)))
child_fail(int err, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (err)
		dprintf(STDERR_FILENO, "%s: [pid %d] %s: %s\n", prog_name,
			(int)getpid(), msg, strerror(err));
	else
		dprintf(STDERR_FILENO, "%s: [pid %d] %s\n", prog_name,
			(int)getpid(), msg);
	if (fail_fd >= 0)
		(void)!write(fail_fd, "f", 1);
	_exit(1);
}

/* ----------------------------------------------------------------------- */

static void create_libs(void)
{
	static char buf[64 * 1024];
	uint64_t size = opt_lib_kb * 1024;

	strcpy(tmp_dir, "/tmp/churn.XXXXXX");
	if (!mkdtemp(tmp_dir)) {
		tmp_dir[0] = '\0';
		die_sys("mkdtemp /tmp/churn.XXXXXX");
	}
	for (uint64_t i = 0; i < opt_libs; i++) {
		int fd;

		snprintf(lib_path[i], sizeof(lib_path[i]), "%s/lib%02u.so",
			 tmp_dir, (unsigned)i);
		nlib_paths = i + 1;	/* before creating: cleanup must see it */
		fd = open(lib_path[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			die_sys("create %s", lib_path[i]);
		/* Non-zero contents, different per library. */
		for (size_t j = 0; j < sizeof(buf); j++)
			buf[j] = (char)(1 + (j * 7 + i * 13) % 255);
		for (uint64_t done = 0; done < size;) {
			size_t chunk = size - done < sizeof(buf) ? size - done : sizeof(buf);
			ssize_t w = write(fd, buf, chunk);

			if (w < 0) {
				if (errno == EINTR)
					continue;
				die_sys("write %s", lib_path[i]);
			}
			done += w;
		}
		if (close(fd) < 0)
			die_sys("close %s", lib_path[i]);
	}
}

/*
 * Map every library like a dynamic loader would, in a browser or tab:
 * the first half (rounded up) read+exec ("text"), the rest read+write
 * private ("data"). Read every page; write one byte per page of the
 * writable ones (relocations) so they are copied on write. The mappings
 * are left for exit to tear down.
 */
static void map_libs(void)
{
	size_t size = opt_lib_kb * 1024;
	uint64_t exec_libs = (opt_libs + 1) / 2;
	unsigned sum = 0;

	for (uint64_t i = 0; i < opt_libs; i++) {
		int writable = i >= exec_libs;
		int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ | PROT_EXEC;
		int fd = open(lib_path[i], O_RDONLY | O_CLOEXEC);
		volatile char *p;

		if (fd < 0)
			child_fail(errno, "open %s", lib_path[i]);
		p = mmap(NULL, size, prot, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED)
			child_fail(errno, "mmap %s", lib_path[i]);
		close(fd);
		for (size_t off = 0; off < size; off += PAGE_4K) {
			sum += p[off];
			if (writable)
				p[off] = (char)sum;
		}
	}
	/* Keep the reads. */
	__asm__ volatile("" : : "r"(sum));
}

/*
 * The rest of the machine: processes that live through the whole run with
 * their libraries mapped and a heap written, like tabs that never close.
 * Each says 'r' on @readyfd once set up (child_fail() says 'f').
 */
static void start_residents(void)
{
	sigset_t old;
	int fds[2];
	char c;

	if (!opt_resident)
		return;
	if (pipe2(fds, O_CLOEXEC) < 0)
		die_sys("pipe");
	block_signals(&old);
	for (uint64_t i = 0; i < opt_resident; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die_sys("fork resident");
		if (pid == 0) {
			child_signals(&old);
			close(fds[0]);
			fail_fd = fds[1];
			map_libs();
			if (opt_heap_kb) {
				size_t len = opt_heap_kb * 1024;
				volatile char *h = mmap(NULL, len,
							PROT_READ | PROT_WRITE,
							MAP_PRIVATE | MAP_ANONYMOUS,
							-1, 0);

				if (h == MAP_FAILED)
					child_fail(errno, "resident: mmap heap");
				for (size_t off = 0; off < len; off += PAGE_4K)
					h[off] = 1;
			}
			(void)!write(fds[1], "r", 1);
			for (;;)
				pause();
		}
		if (!resident_pgid)
			resident_pgid = pid;
		if (setpgid(pid, resident_pgid) < 0)
			die_sys("setpgid resident %d", (int)pid);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(fds[1]);
	for (uint64_t i = 0; i < opt_resident; i++) {
		ssize_t n;

		while ((n = read(fds[0], &c, 1)) < 0 && errno == EINTR)
			;
		/* EOF: every resident is gone or failed, none said ready. */
		if (n != 1 || c != 'r')
			die("a resident process failed before it was ready");
	}
	close(fds[0]);
}

/* Residents live until cleanup() kills them: one that died on its own is a failure. */
static void check_residents(void)
{
	int status;
	pid_t pid;

	if (!opt_resident)
		return;
	while ((pid = waitpid(-resident_pgid, &status, WNOHANG)) < 0 && errno == EINTR)
		;
	if (pid > 0)
		die("resident %d died: %s %d", (int)pid,
		    WIFSIGNALED(status) ? "signal" : "exit status",
		    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	if (pid < 0)
		die_sys("waitpid residents");
}

static void ev_send(int fd, char c)
{
	while (write(fd, &c, 1) != 1)
		if (errno != EINTR)
			child_fail(errno, "write event pipe");
}

/*
 * A tab: close what is not ours, map, write heap, wait to be closed. It
 * keeps the event pipe (fail_fd) only to report a failure.
 */
static void __attribute__((noreturn))
tab(int rfd, const int *wfds, int nwfds)
{
	char c;

	/* Our pipe's write end and the older tabs' ones were inherited from
	 * the browser; keeping them would stop those tabs seeing EOF. */
	for (int i = 0; i < nwfds; i++)
		close(wfds[i]);

	map_libs();
	if (opt_heap_kb) {
		size_t len = opt_heap_kb * 1024;
		volatile char *h = mmap(NULL, len, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (h == MAP_FAILED)
			child_fail(errno, "tab: mmap heap %llu KiB",
				   (unsigned long long)opt_heap_kb);
		for (size_t off = 0; off < len; off += PAGE_4K)
			h[off] = 1;
	}
	/* Block until the browser closes the write end (EOF). */
	while (read(rfd, &c, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

static void kill_tabs(const pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	for (int i = 0; i < n; i++)
		while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
			;
}

/* The browser process of the session starting at slot k0. */
static void __attribute__((noreturn)) browser(uint64_t k0, int evfd)
{
	pid_t pids[MAX_TABS];
	int wfds[MAX_TABS];
	int opened = 0, bad = 0;
	uint64_t close_at;

	/* If main dies (even by SIGKILL) take the session down with it;
	 * tabs follow as their pipes hit EOF. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		child_fail(errno, "browser: prctl(PR_SET_PDEATHSIG)");
	if (getppid() != main_pid)	/* main already gone */
		_exit(1);
	fail_fd = evfd;
	map_libs();

	for (uint64_t i = 1; i <= opt_tabs; i++) {
		uint64_t t = slot_ns(k0 + i);
		int p[2];
		pid_t pid;

		if (t >= end_ns)
			break;
		sleep_until(t);
		if (pipe2(p, O_CLOEXEC) < 0) {
			int err = errno;

			kill_tabs(pids, opened);
			child_fail(err, "browser: pipe");
		}
		pid = fork();
		if (pid < 0) {
			int err = errno;

			kill_tabs(pids, opened);
			child_fail(err, "browser: fork tab");
		}
		if (pid == 0) {
			wfds[opened] = p[1];
			tab(p[0], wfds, opened + 1);
		}
		close(p[0]);
		pids[opened] = pid;
		wfds[opened] = p[1];
		opened++;
		ev_send(evfd, 'c');
	}

	/* Close at the next creation's slot (main's next browser), or at the
	 * end of the run if that comes first. */
	close_at = slot_ns(k0 + opened + 1);
	sleep_until(close_at < end_ns ? close_at : end_ns);
	for (int i = 0; i < opened; i++) {
		int status;

		close(wfds[i]);
		while (waitpid(pids[i], &status, 0) < 0)
			if (errno != EINTR) {
				int err = errno;

				kill_tabs(pids + i + 1, opened - i - 1);
				child_fail(err, "browser: waitpid tab %d", (int)pids[i]);
			}
		ev_send(evfd, 'x');
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			dprintf(STDERR_FILENO, "%s: [pid %d] browser: tab %d %s\n",
				prog_name, (int)getpid(), (int)pids[i], status_str(status));
			bad = 1;	/* keep closing the others */
		}
	}
	_exit(bad);
}

/* ----------------------------------------------------------------------- */

static uint64_t created, exited, next_report = UINT64_MAX;

/* Print a progress row if one is due (main only). */
static void maybe_report(void)
{
	uint64_t now = now_ns();

	if (now < next_report)
		return;
	out_begin("row");
	out_f3("t_s", (now - start_ns) / 1e9);
	out_u64("created", created);
	out_u64("exited", exited);
	out_end();
	/* Next multiple of the period after now (skip missed ones). */
	while (next_report <= now)
		next_report += opt_report * 1000000000ULL;
}

/* Main's sleep until t, waking up for progress rows on the way. */
static void main_sleep_until(uint64_t t)
{
	for (;;) {
		maybe_report();
		if (now_ns() >= t)
			return;
		sleep_until(t < next_report ? t : next_report);
	}
}

/* Run one session from slot k; returns the number of tabs it opened. */
static uint64_t session(uint64_t k)
{
	uint64_t opened = 0;
	sigset_t old;
	siginfo_t si;
	int ev[2], status;
	pid_t pid;

	if (pipe2(ev, O_CLOEXEC) < 0)
		die_sys("pipe");
	fflush(stdout);		/* nothing buffered may be inherited */
	block_signals(&old);
	pid = fork();
	if (pid < 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		die_sys("fork browser");
	}
	if (pid == 0) {
		child_signals(&old);
		if (setpgid(0, 0) < 0)
			child_fail(errno, "browser: setpgid");
		close(ev[0]);
		browser(k, ev[1]);
	}
	/* Also here, so the group exists before anyone could signal it (ESRCH: the
	 * browser already failed and was reaped; the event pipe reports why). */
	if (setpgid(pid, pid) < 0 && errno != ESRCH)
		die_sys("setpgid browser %d", (int)pid);
	browser_pgid = pid;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(ev[1]);
	created++;

	/* Pump events until the browser (the last writer) is gone. */
	for (;;) {
		struct pollfd pfd = { .fd = ev[0], .events = POLLIN };
		struct timespec ts, *tsp = NULL;
		char buf[256];
		ssize_t r;

		if (next_report != UINT64_MAX) {
			uint64_t now = now_ns();
			uint64_t d = next_report > now ? next_report - now : 0;

			ts.tv_sec = d / 1000000000;
			ts.tv_nsec = d % 1000000000;
			tsp = &ts;
		}
		if (ppoll(&pfd, 1, tsp, NULL) < 0 && errno != EINTR)
			die_sys("ppoll");
		r = -1;
		if (pfd.revents) {
			r = read(ev[0], buf, sizeof(buf));
			if (r < 0 && errno != EINTR)
				die_sys("read event pipe");
			for (ssize_t i = 0; i < r; i++) {
				if (buf[i] == 'c') {
					created++;
					opened++;
				} else if (buf[i] == 'x') {
					exited++;
				} else {	/* 'f', message already on stderr */
					die("session at slot %llu: a browser or tab process failed",
					    (unsigned long long)k);
				}
			}
		}
		/* After reading, so a row includes the events already sent. */
		maybe_report();
		if (r == 0)
			break;
	}
	close(ev[0]);

	/*
	 * Wait for the exit but leave the zombie, which keeps the group id
	 * from being reused, until browser_pgid is cleared: the signal
	 * handler must never kill(-pgid) a recycled group.
	 */
	while (waitid(P_PID, pid, &si, WEXITED | WNOWAIT) < 0)
		if (errno != EINTR)
			die_sys("waitid browser");
	browser_pgid = 0;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die_sys("waitpid browser");
	exited++;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		die("browser %d (session at slot %llu) %s", (int)pid,
		    (unsigned long long)k, status_str(status));
	return opened;
}

/* Sessions at the target rate for @seconds; returns how many ran. */
static uint64_t run_sessions(uint64_t seconds)
{
	uint64_t k = 0, n = 0;

	start_ns = now_ns();
	end_ns = start_ns + seconds * 1000000000ULL;
	for (;;) {
		uint64_t t = slot_ns(k);

		if (t >= end_ns)
			break;
		main_sleep_until(t);
		k += 1 + session(k);
		n++;
	}
	return n;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "rate", required_argument, NULL, 'r' },
		{ "tabs", required_argument, NULL, 't' },
		{ "libs", required_argument, NULL, 'l' },
		{ "lib-kb", required_argument, NULL, 'k' },
		{ "heap-kb", required_argument, NULL, 'H' },
		{ "report", required_argument, NULL, 'R' },
		{ "resident", required_argument, NULL, 'N' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct sigaction sa;
	sigset_t old;
	uint64_t sessions;
	double elapsed_s;
	int c;

	prog_init(argv, usage);
	main_pid = getpid();
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': opt_duration = parse_u64("--duration", optarg, 1, 86400); break;
		case 'r': opt_rate = parse_u64("--rate", optarg, 1, 100000); break;
		case 't': opt_tabs = parse_u64("--tabs", optarg, 1, MAX_TABS); break;
		case 'l': opt_libs = parse_u64("--libs", optarg, 0, MAX_LIBS); break;
		case 'k': opt_lib_kb = parse_u64("--lib-kb", optarg, 1, 1048576); break;
		case 'H': opt_heap_kb = parse_u64("--heap-kb", optarg, 0, 4194304); break;
		case 'R': opt_report = parse_u64("--report", optarg, 0, 86400); break;
		case 'N': opt_resident = parse_u64("--resident", optarg, 0, 1024); break;
		case 'w': opt_warmup = parse_u64("--warmup", optarg, 0, 86400); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);

	/* Signals stay blocked until the handler and its state are ready. */
	block_signals(&old);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;	/* no SA_RESTART: sleeps return EINTR */
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		die_sys("sigaction");
	set_die_hook(die_cleanup);
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		die_sys("prctl(PR_SET_CHILD_SUBREAPER)");
	create_libs();
	sigprocmask(SIG_SETMASK, &old, NULL);
	start_residents();
	if (opt_warmup) {
		run_sessions(opt_warmup);
		created = exited = 0;
	}
	/* Under the testbed's measure, counting starts here: set-up excluded. */
	measure_point();

	if (opt_report)
		next_report = now_ns() + opt_report * 1000000000ULL;
	sessions = run_sessions(opt_duration);
	elapsed_s = (now_ns() - start_ns) / 1e9;
	check_residents();

	cleanup();	/* no children left; removes the temp dir */
	out_begin("result");
	out_u64("ops", created);
	out_f3("time_us", elapsed_s * 1e6 / created);
	out_f3("duration_s", elapsed_s);
	out_f3("rate_per_min", created / elapsed_s * 60);
	out_u64("sessions", sessions);
	out_u64("target_rate", opt_rate);
	out_end();
	return 0;
}
