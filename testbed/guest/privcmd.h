/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Hypercalls from dom0 user space through /dev/xen/privcmd, for the
 * testbed's tools.  Build with -I <xen>/xen/include of the Xen under test.
 */
#ifndef FLUSHLESS_PRIVCMD_H
#define FLUSHLESS_PRIVCMD_H

#define __XEN_TOOLS__ 1
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <public/xen.h>
#include <public/sysctl.h>

/* From Linux's include/uapi/xen/privcmd.h. */
struct privcmd_hypercall {
	uint64_t op;
	uint64_t arg[5];
};
#define IOCTL_PRIVCMD_HYPERCALL \
	_IOC(_IOC_NONE, 'P', 0, sizeof(struct privcmd_hypercall))

struct privcmd_mmapbatch_v2 {
	unsigned int num;
	domid_t dom;
	uint64_t addr;
	const xen_pfn_t *arr;
	int *err;
};
#define IOCTL_PRIVCMD_MMAPBATCH_V2 \
	_IOC(_IOC_NONE, 'P', 4, sizeof(struct privcmd_mmapbatch_v2))

static int privcmd_fd = -1;

static inline void privcmd_open(const char *prog)
{
	privcmd_fd = open("/dev/xen/privcmd", O_RDWR | O_CLOEXEC);
	if (privcmd_fd < 0)
		privcmd_fd = open("/proc/xen/privcmd", O_RDWR | O_CLOEXEC);
	if (privcmd_fd < 0) {
		fprintf(stderr, "%s: /dev/xen/privcmd: %s (is this a Xen dom0 with privcmd?)\n",
			prog, strerror(errno));
		exit(1);
	}
}

/*
 * Xen copies hypercall buffers from the caller's address space: they must be
 * present while it runs, so allocate them page-aligned and locked.
 */
static inline void *hcall_buf(size_t size)
{
	void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED || mlock(p, size ? size : 1)) {
		perror("hypercall buffer");
		exit(1);
	}
	memset(p, 0, size);
	return p;
}

/* Returns the hypercall's result: 0 or -errno. */
static inline long hypercall(unsigned int op, uint64_t a0, uint64_t a1, uint64_t a2,
		      uint64_t a3)
{
	struct privcmd_hypercall call = {
		.op = op,
		.arg = { a0, a1, a2, a3, 0 },
	};
	long rc = ioctl(privcmd_fd, IOCTL_PRIVCMD_HYPERCALL, &call);

	return rc < 0 ? -errno : rc;
}

static inline long do_sysctl(struct xen_sysctl *sysctl)
{
	sysctl->interface_version = XEN_SYSCTL_INTERFACE_VERSION;
	return hypercall(__HYPERVISOR_sysctl, (uintptr_t)sysctl, 0, 0, 0);
}

#endif
