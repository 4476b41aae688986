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
#include <public/domctl.h>
#include <public/memory.h>
#include <public/sysctl.h>
#include <public/version.h>
#include <public/features.h>

/* The design tests/fixtures/xen-old-design keeps names the ops had then. */
#if !defined(MMUEXT_MARK_NO_DMA) && defined(MMUEXT_MARK_SEMI_WRITABLE)
#define MMUEXT_MARK_NO_DMA	MMUEXT_MARK_SEMI_WRITABLE
#define MMUEXT_UNMARK_NO_DMA	MMUEXT_UNMARK_SEMI_WRITABLE
#endif
#ifndef XENFEAT_pv_no_dma
#define XENFEAT_pv_no_dma	21	/* Not set by a Xen that lacks it. */
#endif

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
static const char *privcmd_prog = "privcmd";

static inline void privcmd_open(const char *prog)
{
	privcmd_prog = prog;
	privcmd_fd = open("/dev/xen/privcmd", O_RDWR | O_CLOEXEC);
	if (privcmd_fd < 0)
		privcmd_fd = open("/proc/xen/privcmd", O_RDWR | O_CLOEXEC);
	if (privcmd_fd < 0) {
		fprintf(stderr, "%s: /dev/xen/privcmd: %s (is this a Xen dom0 with privcmd?)\n",
			prog, strerror(errno));
		exit(1);
	}
}

/* Map one of our own frames through privcmd, writable. */
static inline void *map_own(uint64_t mfn)
{
	xen_pfn_t arr = mfn;
	int err = 0;
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, privcmd_fd, 0);
	struct privcmd_mmapbatch_v2 batch = {
		.num = 1, .dom = DOMID_SELF, .addr = (uintptr_t)p, .arr = &arr, .err = &err,
	};

	if (p == MAP_FAILED || ioctl(privcmd_fd, IOCTL_PRIVCMD_MMAPBATCH_V2, &batch) || err) {
		fprintf(stderr, "%s: cannot map frame %#llx\n", privcmd_prog, (unsigned long long)mfn);
		exit(1);
	}
	return p;
}

/* Option OPT's value V as a number from LO to HI, or exit 2 saying so. */
static inline unsigned long arg_num(const char *prog, const char *opt, const char *v,
				    unsigned long lo, unsigned long hi)
{
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(v ? v : "", &end, 0);
	if (!v || errno || *end || end == v || n < lo || n > hi) {
		fprintf(stderr, "%s: %s takes a number from %lu to %lu\n", prog, opt, lo, hi);
		exit(2);
	}
	return n;
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

/* DOMCTL must come from hcall_buf(). */
static inline long do_domctl(struct xen_domctl *domctl, unsigned int cmd, domid_t dom)
{
	domctl->cmd = cmd;
	domctl->domain = dom;
	domctl->interface_version = XEN_DOMCTL_INTERFACE_VERSION;
	return hypercall(__HYPERVISOR_domctl, (uintptr_t)domctl, 0, 0, 0);
}

#ifdef XEN_DOMCTL_pv_iommu_audit /* patches/xen/0004 */
/*
 * The audit is the control domain's.  A domU's tool, run by guestrun
 * (which sets FLUSHLESS_DOMID), asks dom0 for it on its console:
 * "@@audit range FIRST NR" or "@@audit list MFN...".  guestrun answers with
 * xenpvsw audit-answer: "@@audit-result RC SYNC VIOLATIONS NR", then the NR
 * bytes run-length encoded on "@@audit-data" lines of at most
 * AUDIT_TOKENS_PER_LINE tokens ("HH" or "HH*COUNT", hex byte), then
 * "@@audit-end".  Short lines: the domU's console reads in canonical mode.
 * The console's shell waits for the tool meanwhile (testbed/guest/domu).
 */
#define AUDIT_TOKENS_PER_LINE	64
/* A domU walks the host in windows of this many frames: one request each. */
#define AUDIT_WINDOW		(64 * 1024)

static inline uint64_t host_max_mfn(void);

static inline long audit_via_dom0(const char *request, uint32_t nr, uint8_t *out,
				  int *sync, unsigned long *violations)
{
	static FILE *con_in, *con_out;
	static char *line;
	static size_t cap;
	long rc, s;
	unsigned long v, n, got = 0;
	int fd;

	if (!con_in) {
		/* Two streams: C wants a seek between a read and a write on one. */
		fd = open("/dev/hvc0", O_RDWR | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		con_out = fdopen(dup(fd), "w");
		con_in = fdopen(fd, "r");
		if (!con_in || !con_out)
			return -errno;
	}
	fprintf(con_out, "@@audit %s\n", request);
	fflush(con_out);
	do {
		if (getline(&line, &cap, con_in) < 0)
			return -EIO;
	} while (strncmp(line, "@@audit-result ", 15));
	if (sscanf(line + 15, "%ld %ld %lu %lu", &rc, &s, &v, &n) != 4)
		return -EPROTO;
	for (;;) {
		char *p, *end;

		if (getline(&line, &cap, con_in) < 0)
			return -EIO;
		if (!strncmp(line, "@@audit-end", 11))
			break;
		if (strncmp(line, "@@audit-data ", 13))
			return -EPROTO;
		for (p = line + 13; *p && *p != '\n';) {
			unsigned long b = strtoul(p, &end, 16), count = 1;

			if (end == p)
				return -EPROTO;
			if (*end == '*')
				count = strtoul(end + 1, &end, 10);
			if (b > 0xff || got + count > nr)
				return -EPROTO;
			memset(out + got, (int)b, count);
			got += count;
			p = end + strspn(end, " ");
		}
	}
	if (rc)
		return rc;
	if (got != nr || n != nr)
		return -EPROTO;
	if (sync)
		*sync = s;
	if (violations)
		*violations = v;
	return 0;
}

/* Run in domU DOM itself (guestrun's FLUSHLESS_DOMID), not in dom0? */
static inline int audit_in_domu(domid_t dom)
{
	const char *s = getenv("FLUSHLESS_DOMID");

	return dom && s && dom == strtoul(s, NULL, 10);
}

/*
 * A domU's range audit, served from a window of AUDIT_WINDOW frames fetched
 * in one request.  A walk goes up: a request below the last one starts a
 * new walk and fetches afresh.
 */
static inline long audit_window(uint64_t first, uint32_t nr, uint8_t *out, int *sync,
				unsigned long *violations)
{
	static uint8_t *win;
	static uint64_t win_first, last_first = ~0ULL;
	static uint32_t win_nr;
	static int win_sync;
	uint64_t host_end = host_max_mfn() + 1;
	uint32_t i;

	if (nr > AUDIT_WINDOW)
		return -EINVAL;
	if (!win && !(win = malloc(AUDIT_WINDOW)))
		return -ENOMEM;
	if (last_first == ~0ULL || first < last_first || first + nr > win_first + win_nr) {
		char req[64];
		long rc;

		win_first = first;
		win_nr = host_end > first && host_end - first < AUDIT_WINDOW ? host_end - first : AUDIT_WINDOW;
		if (win_nr < nr)
			win_nr = nr;
		snprintf(req, sizeof(req), "range %llu %u", (unsigned long long)win_first, win_nr);
		rc = audit_via_dom0(req, win_nr, win, &win_sync, NULL);
		if (rc) {
			last_first = ~0ULL;
			return rc;
		}
	}
	last_first = first;
	memcpy(out, win + (first - win_first), nr);
	if (sync)
		*sync = win_sync;
	if (violations) {
		*violations = 0;
		for (i = 0; i < nr; i++)
			*violations += !!(out[i] & XEN_DOMCTL_PV_IOMMU_AUDIT_VIOLATION);
	}
	return 0;
}

/*
 * XEN_DOMCTL_pv_iommu_audit (patches/xen/0004) of NR frames from FIRST into
 * OUT (NR bytes; any NR: calls of at most XEN_DOMCTL_PV_IOMMU_AUDIT_MAX).
 * Returns 0 or -errno; *SYNC and *VIOLATIONS as Xen reports them.
 */
static inline long pv_iommu_audit(domid_t dom, uint64_t first, uint32_t nr, uint8_t *out,
				  int *sync, unsigned long *violations)
{
	static struct xen_domctl *domctl;
	static uint8_t *frames;
	uint32_t done, n;
	long rc;

	if (audit_in_domu(dom))
		return audit_window(first, nr, out, sync, violations);
	if (!domctl) {
		domctl = hcall_buf(sizeof(*domctl));
		frames = hcall_buf(XEN_DOMCTL_PV_IOMMU_AUDIT_MAX);
	}
	if (violations)
		*violations = 0;
	for (done = 0; done < nr; done += n) {
		n = nr - done < XEN_DOMCTL_PV_IOMMU_AUDIT_MAX ? nr - done : XEN_DOMCTL_PV_IOMMU_AUDIT_MAX;
		memset(domctl, 0, sizeof(*domctl));
		domctl->u.pv_iommu_audit.first_mfn = first + done;
		domctl->u.pv_iommu_audit.nr = n;
		set_xen_guest_handle(domctl->u.pv_iommu_audit.frames, frames);
		rc = do_domctl(domctl, XEN_DOMCTL_pv_iommu_audit, dom);
		if (rc)
			return rc;
		memcpy(out + done, frames, n);
		if (sync)
			*sync = !!(domctl->u.pv_iommu_audit.flags & XEN_DOMCTL_PV_IOMMU_AUDIT_SYNC);
		if (violations)
			*violations += domctl->u.pv_iommu_audit.violations;
	}
	return 0;
}

/* The audit of N frames, each looked up on its own, into OUT (N bytes). */
static inline long pv_iommu_audit_list(domid_t dom, const uint64_t *mfns, uint32_t n, uint8_t *out,
				       int *sync)
{
	uint32_t i;
	long rc;

	if (audit_in_domu(dom)) {
		static char *req;
		size_t len;

		req = realloc(req, 8 + 21 * (size_t)n);
		if (!req)
			return -ENOMEM;
		len = sprintf(req, "list");
		for (i = 0; i < n; i++)
			len += sprintf(req + len, " %llu", (unsigned long long)mfns[i]);
		return audit_via_dom0(req, n, out, sync, NULL);
	}
	for (i = 0; i < n; i++) {
		rc = pv_iommu_audit(dom, mfns[i], 1, out + i, sync, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

#endif

/*
 * Pages of dom0's own that its kernel never sees: populated at pseudo-physical
 * frames far above its RAM, so nothing maps them and their machine frame
 * numbers are known.  Buffers R and EXT come from hcall_buf().
 */
#define OWN_GPFN_BASE	0x10000000ULL

/* One page's XENMEM_populate_physmap or XENMEM_decrease_reservation. */
static inline long reservation_op(unsigned int cmd, struct xen_memory_reservation *r,
				  xen_pfn_t *ext, uint64_t frame)
{
	memset(r, 0, sizeof(*r));
	ext[0] = frame;
	set_xen_guest_handle(r->extent_start, ext);
	r->nr_extents = 1;
	r->domid = DOMID_SELF;
	return hypercall(__HYPERVISOR_memory_op, cmd, (uintptr_t)r, 0, 0);
}

/* Populate one page at GPFN: its machine frame, or 0. */
static inline uint64_t populate(struct xen_memory_reservation *r, xen_pfn_t *ext, uint64_t gpfn)
{
	return reservation_op(XENMEM_populate_physmap, r, ext, gpfn) == 1 ? ext[0] : 0;
}

/* Give frame MFN back: 1 if it left us. */
static inline long decrease(struct xen_memory_reservation *r, xen_pfn_t *ext, uint64_t mfn)
{
	return reservation_op(XENMEM_decrease_reservation, r, ext, mfn);
}

static inline long set_max_mem(uint64_t kb)
{
	struct xen_domctl *d = hcall_buf(sizeof(*d));
	long rc;

	d->u.max_mem.max_memkb = kb;
	rc = do_domctl(d, XEN_DOMCTL_max_mem, 0);
	munmap(d, sizeof(*d));
	return rc;
}

/*
 * This domain's id, for the domctls that want a number: 0 in dom0; in a domU
 * guestrun (testbed/guest) exports it as FLUSHLESS_DOMID.
 */
static inline domid_t self_domid(void)
{
	const char *s = getenv("FLUSHLESS_DOMID");

	return s ? (domid_t)strtoul(s, NULL, 10) : 0;
}

/* XENMEM_current_reservation or _maximum_reservation of this domain, in pages. */
static inline uint64_t own_reservation(unsigned int cmd)
{
	domid_t *dom = hcall_buf(sizeof(*dom));
	long rc;

	*dom = DOMID_SELF;
	rc = hypercall(__HYPERVISOR_memory_op, cmd, (uintptr_t)dom, 0, 0);
	munmap(dom, sizeof(*dom));
	if (rc < 0) {
		fprintf(stderr, "memory_op %u: %s\n", cmd, strerror(-rc));
		exit(1);
	}
	return rc;
}

/*
 * Let this domain hold EXTRA pages beyond what it has: raise its memory limit
 * if needed, which only dom0 may do to itself (a domU needs maxmem above its
 * memory).  Returns 1 if raised (*ORIG_KB: the limit to restore), 0 if not.
 */
static inline int raise_mem_limit(uint64_t extra, uint64_t *orig_kb)
{
	uint64_t need = (own_reservation(XENMEM_current_reservation) + extra) * 4;
	long rc;

	*orig_kb = own_reservation(XENMEM_maximum_reservation) * 4;
	if (need <= *orig_kb)
		return 0;
	rc = set_max_mem(need);
	if (rc) {
		fprintf(stderr, "max_mem: %s (%llu pages more needed; a domU needs maxmem above its memory)\n",
			strerror(-rc), (unsigned long long)extra);
		exit(1);
	}
	return 1;
}

/*
 * The largest machine frame number of this host: XEN_SYSCTL_physinfo in dom0,
 * XENMEM_maximum_ram_page (one past the highest RAM frame) in a domU.
 */
static inline uint64_t host_max_mfn(void)
{
	struct xen_sysctl *sysctl = hcall_buf(sizeof(*sysctl));
	uint64_t max;
	long rc;

	sysctl->cmd = XEN_SYSCTL_physinfo;
	rc = do_sysctl(sysctl);
	max = sysctl->u.physinfo.max_mfn;
	munmap(sysctl, sizeof(*sysctl));
	if (rc == -EPERM) {
		rc = hypercall(__HYPERVISOR_memory_op, XENMEM_maximum_ram_page, 0, 0, 0);
		max = rc - 1;
	}
	if (rc < 0) {
		fprintf(stderr, "physinfo: %s\n", strerror(-rc));
		exit(1);
	}
	return max;
}

#endif
