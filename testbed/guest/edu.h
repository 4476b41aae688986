/* SPDX-License-Identifier: GPL-2.0 */
/*
 * QEMU's edu device (docs/specs/edu.rst) as a DMA engine behind the IOMMU,
 * driven from dom0 user space through its PCI BAR.  QEMU needs
 * -device edu,dma_mask=0xffffffffffffffff.
 */
#ifndef FLUSHLESS_EDU_H
#define FLUSHLESS_EDU_H

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
#define step(...) do { fprintf(stderr, "edu: " __VA_ARGS__); fputc('\n', stderr); } while (0)

static inline void die(const char *what)
{
	fprintf(stderr, "edu: %s: %s\n", what, strerror(errno));
	exit(1);
}

static inline unsigned long read_hex(const char *dir, const char *file)
{
	char path[600], buf[64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		return 0;
	fclose(f);
	return strtoul(buf, NULL, 16);
}

/* Open PATH read-write, waiting up to TENTHS tenths of a second for it to appear. */
static inline int wait_open(const char *path, int tenths)
{
	int fd, i;

	for (i = 0; (fd = open(path, O_RDWR | O_SYNC)) < 0 && errno == ENOENT && i < tenths; i++)
		usleep(100000);
	return fd;
}

/* Find edu, enable memory decoding and bus mastering, map BAR0. */
static inline void edu_open(void)
{
	const char *root = "/sys/bus/pci/devices";
	char dir[512], path[600];
	struct dirent *de;
	uint16_t command;
	DIR *d = opendir(root);
	off_t bar_addr = 0;
	int fd, bar_fd;

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
		fprintf(stderr, "edu: no edu device (QEMU needs -device edu,dma_mask=0xffffffffffffffff)\n");
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/resource0", dir);
	fd = wait_open(path, 100);
	if (fd < 0 && errno == ENOENT) {
		/*
		 * In a domU pcifront can add the device while the kernel's
		 * pci_sysfs_init() runs: both create its resource files and the
		 * loser removes them all.  The BAR is still there: map it
		 * through /dev/mem, at the address the "resource" file gives.
		 */
		step("%s has no resource0: BAR0 through /dev/mem", dir);
		bar_addr = read_hex(dir, "resource");
		fd = open("/dev/mem", O_RDWR | O_SYNC);
		if (fd < 0 || !bar_addr)
			die("/dev/mem");
	}
	if (fd < 0)
		die(path);
	bar_fd = fd;
	snprintf(path, sizeof(path), "%s/config", dir);
	fd = open(path, O_RDWR);
	if (fd < 0 || pread(fd, &command, 2, 4) != 2)
		die(path);
	command |= 0x6; /* PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER */
	if (pwrite(fd, &command, 2, 4) != 2)
		die(path);
	close(fd);
	bar = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, bar_fd, bar_addr);
	if (bar == MAP_FAILED)
		die("mmap BAR0");
	if ((*(volatile uint32_t *)(bar + EDU_ID) & 0xffff) != 0xed) {
		fprintf(stderr, "edu: edu id register reads %#x\n",
			*(volatile uint32_t *)(bar + EDU_ID));
		exit(1);
	}
}

static inline void edu_w64(unsigned int reg, uint64_t v)
{
	*(volatile uint64_t *)(bar + reg) = v;
}

/*
 * One DMA of LEN bytes.  edu starts it 100 ms (virtual time) after the
 * command: sleep that long first, then poll.  Under QEMU's -icount with
 * sleep=off an idle guest jumps to the next timer at once.
 */
static inline int edu_dma_len(uint64_t src, uint64_t dst, uint64_t len, int to_ram)
{
	struct timespec first = { 0, 100 * 1000 * 1000 }, poll = { 0, 1000 * 1000 };
	int i;

	edu_w64(EDU_DMA_SRC, src);
	edu_w64(EDU_DMA_DST, dst);
	edu_w64(EDU_DMA_CNT, len);
	edu_w64(EDU_DMA_CMD, EDU_DMA_START | (to_ram ? EDU_DMA_TO_RAM : 0));
	nanosleep(&first, NULL);
	for (i = 0; i < 30000; i++) {
		if (!(*(volatile uint64_t *)(bar + EDU_DMA_CMD) & EDU_DMA_START))
			return 0;
		nanosleep(&poll, NULL);
	}
	fprintf(stderr, "edu: DMA did not complete in 30 s\n");
	return -1;
}

static inline int edu_dma(uint64_t src, uint64_t dst, int to_ram)
{
	return edu_dma_len(src, dst, DMA_LEN, to_ram);
}

#endif
