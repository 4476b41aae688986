/*
 * tcpstream - a netperf TCP_STREAM-like sender: connect to a receiver, send
 * for a fixed time, then wait until the receiver has read everything and
 * closed. Throughput counts only delivered data: the clock stops at the
 * receiver's close, not at the last write.
 *
 * On the testbed the receiver runs on the host (flushless/experiments/study.py) and
 * dom0 reaches it through QEMU's e1000e, whose DMA goes through the
 * emulated VT-d IOMMU, and user-mode networking (10.0.2.2 is the host).
 */
#include "common.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char usage[] =
	"Usage: tcpstream --host ADDR --port P [options]\n"
	"Send a TCP stream to ADDR:P for --seconds, then wait for the receiver to\n"
	"read it all and close.\n"
	"  --host ADDR  receiver's IPv4 address (dotted quad)\n"
	"  --port P  receiver's TCP port, 1..65535\n"
	"  --seconds S  sending time, 1..3600 (default 3)\n"
	"  --chunk-kb K  bytes per write in KiB, 1..1024 (default 64)\n"
	"  --help  print this help and exit\n"
	"Output: result ops=<writes> time_us=<us per write> bytes=<sent> seconds=<until close>\n"
	"               mbps=<delivered megabits per second>\n";

static void on_alarm(int sig)
{
	static const char msg[] = "tcpstream: receiver did not answer in time\n";

	(void)sig;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "host", required_argument, NULL, 'H' },
		{ "port", required_argument, NULL, 'p' },
		{ "seconds", required_argument, NULL, 's' },
		{ "chunk-kb", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t port = 0, seconds = 3, chunk_kb = 64, writes = 0, bytes = 0;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	const char *host = NULL;
	double t0, t_end, t_close;
	char *buf, rbuf[256];
	int c, fd;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'H': host = optarg; break;
		case 'p': port = parse_u64("--port", optarg, 1, 65535); break;
		case 's': seconds = parse_u64("--seconds", optarg, 1, 3600); break;
		case 'c': chunk_kb = parse_u64("--chunk-kb", optarg, 1, 1024); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	if (!host || !port)
		die_usage("--host and --port are required");
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die_usage("--host: not an IPv4 address: '%s'", host);
	sa.sin_port = htons(port);

	buf = calloc(chunk_kb, 1024);
	if (!buf)
		die_sys("calloc");
	/* A receiver that never accepts or never closes must not hang us. */
	signal(SIGALRM, on_alarm);
	signal(SIGPIPE, SIG_IGN);
	alarm(seconds + 60);

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die_sys("socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die_sys("connect %s:%lu", host, (unsigned long)port);

	t0 = now_us();
	t_end = t0 + seconds * 1e6;
	while (now_us() < t_end) {
		ssize_t n = write(fd, buf, chunk_kb * 1024);

		if (n < 0)
			die_sys("write");
		bytes += n;
		writes++;
	}
	if (shutdown(fd, SHUT_WR) < 0)
		die_sys("shutdown");
	/* The receiver closes once it has read everything: wait for EOF. */
	for (;;) {
		ssize_t n = read(fd, rbuf, sizeof(rbuf));

		if (n < 0)
			die_sys("read");
		if (n == 0)
			break;
	}
	t_close = now_us();
	close(fd);

	out_begin("result");
	out_u64("ops", writes);
	out_f3("time_us", (t_close - t0) / writes);
	out_u64("bytes", bytes);
	out_fp("seconds", (t_close - t0) / 1e6, 6);
	out_fp("mbps", bytes * 8.0 / (t_close - t0), 3);
	out_end();
	free(buf);
	return 0;
}
