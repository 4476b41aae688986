// SPDX-License-Identifier: GPL-2.0
/*
 * dmatest - can a device write into page-table pages?  Drives the DMA
 * engine of QEMU's edu device (docs/specs/edu.rst; run QEMU with
 * -device edu,dma_mask=0xffffffffffffffff) from dom0 user space through its
 * PCI BAR, at three targets, each page's machine frame taken from
 * /sys/kernel/debug/ptcache/frames (patches/linux/0001):
 *
 *   control    an ordinary writable page of ours: the write must land,
 *              which shows the test can see a DMA write;
 *   pagetable  a live PTE page of ours: must stay unchanged;
 *   pool       a page sitting in ptcache's pool (cache on): likewise.
 *
 * Frames are read back through privcmd (read-only mappings), so a page
 * table can be compared before and after.  Prints "check NAME ok|FAIL ..."
 * and "skip NAME why"; the host also looks for Xen's DMA fault reports.
 */
#include <dirent.h>
#include <time.h>

#include "privcmd.h"

#define EDU_VENDOR	0x1234
#define EDU_DEVICE	0x11e8
#define EDU_ID		0x00
#define EDU_DMA_SRC	0x80
#define EDU_DMA_DST	0x88
#define EDU_DMA_CNT	0x90
#define EDU_DMA_CMD	0x98
#define EDU_DMA_START	0x1
#define EDU_DMA_TO_RAM	0x2
#define EDU_BUF		0x40000
#define PAGE		4096
/*
 * Bytes per transfer: QEMU 7.2's edu aborts the whole VM (hw_error) for a
 * transfer that ends exactly at the end of its 4 KiB buffer (off-by-one in
 * edu_check_range()), so move half a page.
 */
#define DMA_LEN		2048

static volatile uint8_t *bar;

/* Progress on stderr: if the machine dies, the console shows the last step. */
#define step(...) do { fprintf(stderr, "dmatest: " __VA_ARGS__); fputc('\n', stderr); } while (0)

static void die(const char *what)
{
	fprintf(stderr, "dmatest: %s: %s\n", what, strerror(errno));
	exit(1);
}

static unsigned long read_hex(const char *dir, const char *file)
{
	char path[512], buf[64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		return 0;
	fclose(f);
	return strtoul(buf, NULL, 16);
}

/* Find edu, enable memory decoding and bus mastering, map BAR0. */
static void edu_open(void)
{
	const char *root = "/sys/bus/pci/devices";
	char dir[512], path[600];
	struct dirent *de;
	uint16_t command;
	DIR *d = opendir(root);
	int fd;

	if (!d)
		die(root);
	while ((de = readdir(d))) {
		snprintf(dir, sizeof(dir), "%s/%s", root, de->d_name);
		if (read_hex(dir, "vendor") == EDU_VENDOR &&
		    read_hex(dir, "device") == EDU_DEVICE)
			break;
	}
	closedir(d);
	if (!de) {
		fprintf(stderr, "dmatest: no edu device (QEMU needs -device edu,dma_mask=0xffffffffffffffff)\n");
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/config", dir);
	fd = open(path, O_RDWR);
	if (fd < 0 || pread(fd, &command, 2, 4) != 2)
		die(path);
	command |= 0x6; /* PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER */
	if (pwrite(fd, &command, 2, 4) != 2)
		die(path);
	close(fd);
	snprintf(path, sizeof(path), "%s/resource0", dir);
	fd = open(path, O_RDWR | O_SYNC);
	if (fd < 0)
		die(path);
	bar = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (bar == MAP_FAILED)
		die("mmap BAR0");
	if ((*(volatile uint32_t *)(bar + EDU_ID) & 0xffff) != 0xed) {
		fprintf(stderr, "dmatest: edu id register reads %#x\n",
			*(volatile uint32_t *)(bar + EDU_ID));
		exit(1);
	}
}

static void edu_w64(unsigned int reg, uint64_t v)
{
	*(volatile uint64_t *)(bar + reg) = v;
}

/* One DMA of a page; edu starts it 100 ms (virtual) after the command. */
static int edu_dma(uint64_t src, uint64_t dst, int to_ram)
{
	int i;

	edu_w64(EDU_DMA_SRC, src);
	edu_w64(EDU_DMA_DST, dst);
	edu_w64(EDU_DMA_CNT, DMA_LEN);
	edu_w64(EDU_DMA_CMD, EDU_DMA_START | (to_ram ? EDU_DMA_TO_RAM : 0));
	for (i = 0; i < 3000; i++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		if (!(*(volatile uint64_t *)(bar + EDU_DMA_CMD) & EDU_DMA_START))
			return 0;
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "dmatest: edu DMA did not complete in 30 s\n");
	return -1;
}

/* Copy machine frame MFN (ours) into BUF through a read-only mapping. */
static void read_frame(uint64_t mfn, void *buf)
{
	xen_pfn_t arr = mfn;
	int err = 0;
	void *p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, privcmd_fd, 0);
	struct privcmd_mmapbatch_v2 batch = {
		.num = 1, .dom = DOMID_SELF, .addr = (uintptr_t)p,
		.arr = &arr, .err = &err,
	};

	if (p == MAP_FAILED)
		die("mmap privcmd");
	if (ioctl(privcmd_fd, IOCTL_PRIVCMD_MMAPBATCH_V2, &batch) || err) {
		fprintf(stderr, "dmatest: cannot map frame %#llx: %s\n",
			(unsigned long long)mfn, strerror(err ? -err : errno));
		exit(1);
	}
	memcpy(buf, p, PAGE);
	munmap(p, PAGE);
}

struct frames {
	uint64_t src, ctl, pte, pool;
};

/* Frames of our two buffers, one of our PTE pages, one pool page. */
static void find_frames(void *src, void *ctl, struct frames *fr)
{
	const char *path = "/sys/kernel/debug/ptcache/frames";
	FILE *f = fopen(path, "r");
	char what[16], level[32];
	unsigned long long a, b, c;
	char line[256];

	if (!f) {
		fprintf(stderr, "dmatest: %s: %s (a kernel with patches/linux and debugfs mounted)\n",
			path, strerror(errno));
		exit(1);
	}
	memset(fr, 0, sizeof(*fr));
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "page %llx %llx %llx", &a, &b, &c) == 3) {
			if (a == (uintptr_t)src)
				fr->src = c;
			if (a == (uintptr_t)ctl)
				fr->ctl = c;
		} else if (sscanf(line, "%15s %31s %llx %llx", what, level, &b, &c) == 4) {
			if (!strcmp(what, "mm") && !strcmp(level, "pte") && !fr->pte)
				fr->pte = c;
			if (!strcmp(what, "pool") && !strcmp(level, "pte") && !fr->pool)
				fr->pool = c;
		}
	}
	fclose(f);
}

static int target(const char *name, uint64_t mfn, const uint8_t *pattern)
{
	static uint8_t before[PAGE], after[PAGE];

	step("%s: reading frame %#llx", name, (unsigned long long)mfn);
	read_frame(mfn, before);
	step("%s: DMA edu -> frame", name);
	if (edu_dma(EDU_BUF, mfn << 12, 1))
		return 1;
	step("%s: reading frame again", name);
	read_frame(mfn, after);
	if (!memcmp(after, pattern, DMA_LEN)) {
		printf("check %s FAIL frame=%#llx written by the device\n", name,
		       (unsigned long long)mfn);
		return 1;
	}
	printf("check %s %s frame=%#llx unchanged=%d\n", name,
	       memcmp(before, after, PAGE) ? "FAIL" : "ok",
	       (unsigned long long)mfn, !memcmp(before, after, PAGE));
	return memcmp(before, after, PAGE) != 0;
}

int main(void)
{
	uint8_t *src, *ctl;
	struct frames fr;
	int i, bad = 0;

	privcmd_open("dmatest");
	step("opening edu");
	edu_open();
	step("edu BAR0 mapped");
	src = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (src == MAP_FAILED || mlock(src, 2 * PAGE))
		die("buffers");
	ctl = src + PAGE;
	srand(time(NULL));
	for (i = 0; i < PAGE; i++) {
		src[i] = rand() | 1;
		ctl[i] = 0;
	}
	find_frames(src, ctl, &fr);
	step("frames: src %#llx ctl %#llx pte %#llx pool %#llx",
	     (unsigned long long)fr.src, (unsigned long long)fr.ctl,
	     (unsigned long long)fr.pte, (unsigned long long)fr.pool);
	if (!fr.src || !fr.ctl || !fr.pte) {
		fprintf(stderr, "dmatest: frames not found (src %#llx ctl %#llx pte %#llx)\n",
			(unsigned long long)fr.src, (unsigned long long)fr.ctl,
			(unsigned long long)fr.pte);
		return 1;
	}

	/* The pattern into the device, then out to our control page. */
	step("DMA src -> edu");
	if (edu_dma(fr.src << 12, EDU_BUF, 0))
		return 1;
	step("DMA edu -> control");
	if (edu_dma(EDU_BUF, fr.ctl << 12, 1))
		return 1;
	i = !memcmp(ctl, src, DMA_LEN);
	printf("check control %s frame=%#llx written=%d\n", i ? "ok" : "FAIL",
	       (unsigned long long)fr.ctl, i);
	bad |= !i;

	bad |= target("pagetable", fr.pte, src);
	if (fr.pool)
		bad |= target("pool", fr.pool, src);
	else
		printf("skip pool no page in ptcache's pool (cache off or empty)\n");

	/* The device still works after the refused writes. */
	memset(ctl, 0, PAGE);
	if (edu_dma(EDU_BUF, fr.ctl << 12, 1))
		return 1;
	i = !memcmp(ctl, src, DMA_LEN);
	printf("check control_after %s written=%d\n", i ? "ok" : "FAIL", i);
	bad |= !i;
	return bad;
}
