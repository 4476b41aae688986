/*
 * dmaread - read a block device with O_DIRECT, in blocks of a fixed size,
 * into one buffer used for every read: the device DMAs straight into the
 * same pages each time, so an IOMMU's translations of them stay valid
 * unless something flushes them.
 *
 * On the testbed the device is QEMU's NVMe behind the emulated VT-d
 * (flushless/experiments/device_io.py), whose trace counts each translation, hit and miss.
 */
#define _GNU_SOURCE
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static const char usage[] =
	"Usage: dmaread --dev PATH [options]\n"
	"Read --mib MiB from the block device PATH with O_DIRECT, --block-kb at a\n"
	"time into one buffer, from the start again at the device's end.\n"
	"  --dev PATH  block device (its contents are only read)\n"
	"  --mib M  MiB to read, 1..1048576 (default 64)\n"
	"  --block-kb K  bytes per read in KiB, 4..4096, a multiple of 4 (default 64)\n"
	"  --help  print this help and exit\n"
	"Output: result ops=<reads> time_us=<us per read> bytes=<read> seconds=<total>\n"
	"               mbps=<megabits per second>\n";

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "dev", required_argument, NULL, 'd' },
		{ "mib", required_argument, NULL, 'm' },
		{ "block-kb", required_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t mib = 64, block_kb = 64, size = 0, want, done = 0, reads = 0, off = 0;
	const char *dev = NULL;
	size_t block;
	double t0, t1;
	void *buf;
	int c, fd;

	prog_init(argv, usage);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'm': mib = parse_u64("--mib", optarg, 1, 1048576); break;
		case 'b': block_kb = parse_u64("--block-kb", optarg, 4, 4096); break;
		case 'h': help_exit();
		default: bad_option(c, argv);
		}
	}
	no_operands(argc, argv);
	if (!dev)
		die_usage("--dev is required");
	if (block_kb % 4)
		die_usage("--block-kb: %lu is not a multiple of 4", (unsigned long)block_kb);
	block = block_kb * 1024;
	want = mib << 20;

	fd = open(dev, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		die_sys("open %s", dev);
	if (ioctl(fd, BLKGETSIZE64, &size) < 0)
		die_sys("%s: BLKGETSIZE64 (not a block device?)", dev);
	if (size < block)
		die_usage("%s holds %lu bytes, less than one block of %zu", dev, (unsigned long)size, block);
	size -= size % block;
	/* O_DIRECT wants the buffer aligned; a page boundary serves every device. */
	errno = posix_memalign(&buf, 4096, block);
	if (errno)
		die_sys("posix_memalign");
	memset(buf, 0, block);

	t0 = now_us();
	while (done < want) {
		ssize_t n = pread(fd, buf, block, off);

		if (n < 0)
			die_sys("pread %s at %lu", dev, (unsigned long)off);
		if ((size_t)n != block)
			die("pread %s at %lu: %zd bytes, not %zu", dev, (unsigned long)off, n, block);
		done += n;
		reads++;
		off = (off + block) % size;
	}
	t1 = now_us();
	close(fd);

	out_begin("result");
	out_u64("ops", reads);
	out_f3("time_us", (t1 - t0) / reads);
	out_u64("bytes", done);
	out_fp("seconds", (t1 - t0) / 1e6, 6);
	out_fp("mbps", done * 8.0 / (t1 - t0), 3);
	out_end();
	free(buf);
	return 0;
}
