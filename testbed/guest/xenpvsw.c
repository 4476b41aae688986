// SPDX-License-Identifier: GPL-2.0
/*
 * xenpvsw - drive Xen's no-DMA marks and audit from a PV dom0
 * (patches/xen/0002, 0004), for the testbed's checks.
 *
 *   xenpvsw audit [DOMID [KIND]] XEN_DOMCTL_pv_iommu_audit over every frame of
 *                                the host: "name value" lines; with KIND
 *                                (violation, marked, mapped,
 *                                writable_unmapped, l1, ...), the frames
 *                                of that kind instead, one per line
 *   xenpvsw mark MFN...          MMUEXT_MARK_NO_DMA, "MFN RC" per frame
 *   xenpvsw unmark MFN...        MMUEXT_UNMARK_NO_DMA
 *   xenpvsw mark-for DOMID MFN...  the mark with DOMID as the page owner
 *   xenpvsw grant DOMID          offer DOMID a page of ours (gntalloc):
 *                                prints "gref N", keeps it until killed
 *   xenpvsw mark-granted DOMID GREF  map DOMID's grant GREF for our device
 *                                (GNTMAP_device_map: Xen then gives its
 *                                machine address) and try to mark and
 *                                unmark that frame: "mfn M", "mark RC",
 *                                "unmark RC"; exit 0 if both were refused
 *   xenpvsw refusals OWN_MFN     bad arguments; "check NAME ok|FAIL rc=.."
 *   xenpvsw fuzz N SEED MFN...   N random mmuext calls on the new ops, every
 *                                successful mark undone; prints a tally
 *   xenpvsw audit-answer DOMID range FIRST NR | list MFN...
 *                                the audit a domU asked for on its console
 *                                (guestrun): "@@audit-result RC SYNC
 *                                VIOLATIONS HEX", one line
 *
 * RC is the hypercall's result, 0 or -errno.
 */
#include "privcmd.h"

static long mmuext_arg2(unsigned int cmd, uint64_t mfn, uint64_t arg2,
			unsigned int count, domid_t dom)
{
	struct mmuext_op *op = hcall_buf(sizeof(*op) * (count ? count : 1));
	unsigned int i;
	long rc;

	for (i = 0; i < (count ? count : 1); i++) {
		op[i].cmd = cmd;
		op[i].arg1.mfn = mfn;
		op[i].arg2.src_mfn = arg2;	/* all of the union */
	}
	rc = hypercall(__HYPERVISOR_mmuext_op, (uintptr_t)op, count, 0, dom);
	munlock(op, sizeof(*op) * (count ? count : 1));
	munmap(op, sizeof(*op) * (count ? count : 1));
	return rc;
}

static long mmuext(unsigned int cmd, uint64_t mfn, unsigned int count,
		   domid_t dom)
{
	return mmuext_arg2(cmd, mfn, 0, count, dom);
}

/* Whether Xen says the no-DMA marks take effect for us (XENFEAT_pv_no_dma). */
static long xenfeat_pv_no_dma(void)
{
	xen_feature_info_t *fi = hcall_buf(sizeof(*fi));
	long rc;

	fi->submap_idx = 0;
	rc = hypercall(__HYPERVISOR_xen_version, XENVER_get_features, (uintptr_t)fi, 0, 0);
	if (rc)
		return rc;
	return !!(fi->submap & (1U << XENFEAT_pv_no_dma));
}

static uint64_t parse_mfn(const char *s)
{
	char *end;
	uint64_t v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || end == s) {
		fprintf(stderr, "xenpvsw: bad frame number '%s'\n", s);
		exit(2);
	}
	return v;
}

static const char *const kind_names[] = {
	[XEN_DOMCTL_PV_IOMMU_AUDIT_OTHER_OWNER] = "other_owner",
	[XEN_DOMCTL_PV_IOMMU_AUDIT_FREE] = "free",
	[XEN_DOMCTL_PV_IOMMU_AUDIT_WRITABLE] = "writable",
	[XEN_DOMCTL_PV_IOMMU_AUDIT_L1] = "l1",
	[XEN_DOMCTL_PV_IOMMU_AUDIT_L2] = "l2",
	[XEN_DOMCTL_PV_IOMMU_AUDIT_L3] = "l3",
	[XEN_DOMCTL_PV_IOMMU_AUDIT_L4] = "l4",
	[XEN_DOMCTL_PV_IOMMU_AUDIT_SEG_DESC] = "seg_desc",
	[XEN_DOMCTL_PV_IOMMU_AUDIT_NO_TYPE] = "no_type",
};
#define NKINDS (sizeof(kind_names) / sizeof(kind_names[0]))

/* Does frame state B belong to the list named NAME? */
static int in_list(const char *name, uint8_t b)
{
	unsigned int kind = b & XEN_DOMCTL_PV_IOMMU_AUDIT_KIND_MASK;

	if (!strcmp(name, "violation"))
		return !!(b & XEN_DOMCTL_PV_IOMMU_AUDIT_VIOLATION);
	if (!strcmp(name, "marked"))
		return !!(b & XEN_DOMCTL_PV_IOMMU_AUDIT_MARKED);
	if (!strcmp(name, "mapped"))
		return !!(b & XEN_DOMCTL_PV_IOMMU_AUDIT_MAPPED);
	/* Writable, not marked, yet out of the IOMMU: the domain's own DMA would fault. */
	if (!strcmp(name, "writable_unmapped"))
		return kind == XEN_DOMCTL_PV_IOMMU_AUDIT_WRITABLE &&
		       !(b & (XEN_DOMCTL_PV_IOMMU_AUDIT_MAPPED | XEN_DOMCTL_PV_IOMMU_AUDIT_MARKED));
	return kind < NKINDS && kind_names[kind] && !strcmp(name, kind_names[kind]);
}

static int cmd_audit(int argc, char **argv)
{
	unsigned long counts[NKINDS] = { 0 }, mapped[NKINDS] = { 0 };
	unsigned long marked = 0, violations = 0, v;
	uint64_t max = host_max_mfn(), first;
	domid_t dom = argc > 2 ? parse_mfn(argv[2]) : 0;
	const char *list = argc > 3 ? argv[3] : NULL;
	uint8_t *buf = hcall_buf(XEN_DOMCTL_PV_IOMMU_AUDIT_MAX);
	unsigned int i, k;
	int sync = 0;

	if (list && strcmp(list, "violation") && strcmp(list, "marked") && strcmp(list, "mapped") &&
	    strcmp(list, "writable_unmapped")) {
		for (k = 0; k < NKINDS && strcmp(list, kind_names[k]); k++)
			;
		if (k == NKINDS) {
			fprintf(stderr, "xenpvsw: no frame kind '%s'\n", list);
			return 2;
		}
	}
	for (first = 0; first <= max; first += XEN_DOMCTL_PV_IOMMU_AUDIT_MAX) {
		uint32_t nr = max - first + 1 < XEN_DOMCTL_PV_IOMMU_AUDIT_MAX ?
			      max - first + 1 : XEN_DOMCTL_PV_IOMMU_AUDIT_MAX;
		long rc = pv_iommu_audit(dom, first, nr, buf, &sync, &v);

		if (rc) {
			fprintf(stderr, "xenpvsw: audit of frames %#llx+%u: %s\n",
				(unsigned long long)first, nr, strerror(-rc));
			return 1;
		}
		violations += v;
		for (i = 0; i < nr; i++) {
			k = buf[i] & XEN_DOMCTL_PV_IOMMU_AUDIT_KIND_MASK;
			if (list) {
				if (in_list(list, buf[i]))
					printf("%#llx\n", (unsigned long long)(first + i));
				continue;
			}
			if (k >= NKINDS)
				k = XEN_DOMCTL_PV_IOMMU_AUDIT_OTHER_OWNER;
			counts[k]++;
			mapped[k] += !!(buf[i] & XEN_DOMCTL_PV_IOMMU_AUDIT_MAPPED);
			marked += !!(buf[i] & XEN_DOMCTL_PV_IOMMU_AUDIT_MARKED);
		}
	}
	if (list)
		return 0;
	printf("frames %llu\n", (unsigned long long)max + 1);
	printf("pages %lu\n", counts[XEN_DOMCTL_PV_IOMMU_AUDIT_WRITABLE] +
	       counts[XEN_DOMCTL_PV_IOMMU_AUDIT_L1] + counts[XEN_DOMCTL_PV_IOMMU_AUDIT_L2] +
	       counts[XEN_DOMCTL_PV_IOMMU_AUDIT_L3] + counts[XEN_DOMCTL_PV_IOMMU_AUDIT_L4] +
	       counts[XEN_DOMCTL_PV_IOMMU_AUDIT_SEG_DESC] +
	       counts[XEN_DOMCTL_PV_IOMMU_AUDIT_NO_TYPE]);
	for (k = 0; k < NKINDS; k++)
		printf("%s %lu\n%s_mapped %lu\n", kind_names[k], counts[k], kind_names[k], mapped[k]);
	printf("page_tables %lu\n", counts[XEN_DOMCTL_PV_IOMMU_AUDIT_L1] +
	       counts[XEN_DOMCTL_PV_IOMMU_AUDIT_L2] + counts[XEN_DOMCTL_PV_IOMMU_AUDIT_L3] +
	       counts[XEN_DOMCTL_PV_IOMMU_AUDIT_L4]);
	printf("marked %lu\nviolations %lu\nsync %d\n", marked, violations, sync);
	return 0;
}

static int cmd_mark(int argc, char **argv, unsigned int cmd, domid_t owner)
{
	int i, bad = 0;

	for (i = 2; i < argc; i++) {
		long rc = mmuext(cmd, parse_mfn(argv[i]), 1, owner);

		printf("%s %ld\n", argv[i], rc);
		bad |= rc != 0;
	}
	return bad;
}

static int check(const char *name, long rc, long want)
{
	printf("check %s %s rc=%ld want=%ld\n", name, rc == want ? "ok" : "FAIL",
	       rc, want);
	return rc != want;
}

/* Arguments Xen must refuse, each with its documented error. */
static int cmd_refusals(int argc, char **argv)
{
	uint64_t own;
	int bad = 0, sync = 0;
	long want;

	if (argc != 3) {
		fprintf(stderr, "usage: xenpvsw refusals OWN_MFN\n");
		return 2;
	}
	own = parse_mfn(argv[2]);
	{
		uint8_t *b = hcall_buf(1);

		if (pv_iommu_audit(0, own, 1, b, &sync, NULL)) {
			fprintf(stderr, "xenpvsw: cannot audit frame %#llx\n", (unsigned long long)own);
			return 1;
		}
	}
	/* Without IOMMU sync marking spares nothing, and says so. */
	want = sync ? 0 : -EOPNOTSUPP;
	bad |= check("own_page_mark", mmuext(MMUEXT_MARK_NO_DMA, own, 1, DOMID_SELF), want);
	bad |= check("own_page_mark_again", mmuext(MMUEXT_MARK_NO_DMA, own, 1, DOMID_SELF), want);
	bad |= check("own_page_unmark", mmuext(MMUEXT_UNMARK_NO_DMA, own, 1, DOMID_SELF), want);
	bad |= check("own_page_unmark_again", mmuext(MMUEXT_UNMARK_NO_DMA, own, 1, DOMID_SELF), want);
	/* No such domain as page owner. */
	bad |= check("foreign_domid", mmuext(MMUEXT_MARK_NO_DMA, own, 1, 4242), -ESRCH);
	/* dom_io owns MMIO: refused as page owner by get_pg_owner(). */
	bad |= check("domid_io", mmuext(MMUEXT_MARK_NO_DMA, own, 1, DOMID_IO), -EPERM);
	/* Frames that are not the caller's RAM. */
	bad |= check("mfn_beyond_ram", mmuext(MMUEXT_MARK_NO_DMA, 1ULL << 40, 1, DOMID_SELF), -EINVAL);
	bad |= check("mfn_all_ones", mmuext(MMUEXT_UNMARK_NO_DMA, ~0ULL, 1, DOMID_SELF), -EINVAL);
	bad |= check("mfn_zero_xen_owned", mmuext(MMUEXT_MARK_NO_DMA, 0, 1, DOMID_SELF), -EINVAL);
	bad |= check("unknown_cmd", mmuext(MMUEXT_UNMARK_NO_DMA + 1, own, 1, DOMID_SELF), -ENOSYS);
	/* Unused fields must be zero, so that they can mean something later. */
	bad |= check("arg2_not_zero", mmuext_arg2(MMUEXT_MARK_NO_DMA, own, 1, 1, DOMID_SELF), -EINVAL);
	bad |= check("arg2_high_half_not_zero",
		     mmuext_arg2(MMUEXT_MARK_NO_DMA, own, 1ULL << 32, 1, DOMID_SELF), -EINVAL);
	/* Discovery: the feature bit is set exactly where marking takes effect. */
	bad |= check("xenfeat_pv_no_dma", xenfeat_pv_no_dma(), sync);
	/* Audit: nonexistent domain, bad ranges, pad not zero. */
	{
		struct xen_domctl *domctl = hcall_buf(sizeof(*domctl));
		uint8_t *out = hcall_buf(2 * XEN_DOMCTL_PV_IOMMU_AUDIT_MAX);
		struct xen_domctl_pv_iommu_audit *a = &domctl->u.pv_iommu_audit;

#define AUDIT_CHECK(name, dom, first_, nr_, pad_, want) do {		\
		memset(domctl, 0, sizeof(*domctl));				\
		a->first_mfn = (first_);					\
		a->nr = (nr_);							\
		a->pad = (pad_);						\
		set_xen_guest_handle(a->frames, out);				\
		bad |= check(name, do_domctl(domctl, XEN_DOMCTL_pv_iommu_audit, dom), want); \
	} while (0)
		AUDIT_CHECK("audit_no_domain", 4242, 0, 1, 0, -ESRCH);
		AUDIT_CHECK("audit_nr_zero", 0, 0, 0, 0, -EINVAL);
		AUDIT_CHECK("audit_nr_too_big", 0, 0, XEN_DOMCTL_PV_IOMMU_AUDIT_MAX + 1, 0, -EINVAL);
		AUDIT_CHECK("audit_range_wraps", 0, ~0ULL, 2, 0, -EINVAL);
		AUDIT_CHECK("audit_pad_not_zero", 0, 0, 1, 1, -EINVAL);
		AUDIT_CHECK("audit_own_frame", 0, own, 1, 0, 0);
		memset(domctl, 0, sizeof(*domctl));
		a->first_mfn = 0;
		a->nr = 1;
		set_xen_guest_handle(a->frames, (uint8_t *)8);
		bad |= check("audit_bad_buffer", do_domctl(domctl, XEN_DOMCTL_pv_iommu_audit, 0),
			     -EFAULT);
#undef AUDIT_CHECK
	}
	return bad;
}

/* From Linux's include/uapi/xen/gntalloc.h. */
struct ioctl_gntalloc_alloc_gref {
	uint16_t domid;
	uint16_t flags;
	uint32_t count;
	uint64_t index;
	uint32_t gref_ids[1];
};
#define IOCTL_GNTALLOC_ALLOC_GREF \
	_IOC(_IOC_NONE, 'G', 5, sizeof(struct ioctl_gntalloc_alloc_gref))
#define GNTALLOC_FLAG_WRITABLE 1

static int cmd_grant(int argc, char **argv)
{
	struct ioctl_gntalloc_alloc_gref op = { .flags = GNTALLOC_FLAG_WRITABLE, .count = 1 };
	int fd;

	if (argc != 3) {
		fprintf(stderr, "usage: xenpvsw grant DOMID\n");
		return 2;
	}
	op.domid = parse_mfn(argv[2]);
	fd = open("/dev/xen/gntalloc", O_RDWR | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, IOCTL_GNTALLOC_ALLOC_GREF, &op)) {
		fprintf(stderr, "xenpvsw: gntalloc: %s\n", strerror(errno));
		return 1;
	}
	printf("gref %u\n", op.gref_ids[0]);
	fflush(stdout);
	/* The grant lasts while the file is open. */
	for (;;)
		pause();
}

static int cmd_mark_granted(int argc, char **argv)
{
	struct gnttab_map_grant_ref *map = hcall_buf(sizeof(*map));
	struct gnttab_unmap_grant_ref *unmap = hcall_buf(sizeof(*unmap));
	uint64_t mfn;
	long mark, unmark, rc;

	if (argc != 4) {
		fprintf(stderr, "usage: xenpvsw mark-granted DOMID GREF\n");
		return 2;
	}
	map->dom = parse_mfn(argv[2]);
	map->ref = parse_mfn(argv[3]);
	map->flags = GNTMAP_device_map;
	rc = hypercall(__HYPERVISOR_grant_table_op, GNTTABOP_map_grant_ref, (uintptr_t)map, 1, 0);
	if (rc || map->status != GNTST_okay) {
		fprintf(stderr, "xenpvsw: map of grant %u of d%u: rc %ld status %d\n",
			map->ref, map->dom, rc, map->status);
		return 1;
	}
	mfn = map->dev_bus_addr >> 12;
	printf("mfn %#llx\n", (unsigned long long)mfn);
	mark = mmuext(MMUEXT_MARK_NO_DMA, mfn, 1, DOMID_SELF);
	unmark = mmuext(MMUEXT_UNMARK_NO_DMA, mfn, 1, DOMID_SELF);
	printf("mark %ld\nunmark %ld\n", mark, unmark);
	unmap->dev_bus_addr = map->dev_bus_addr;
	unmap->handle = map->handle;
	rc = hypercall(__HYPERVISOR_grant_table_op, GNTTABOP_unmap_grant_ref, (uintptr_t)unmap, 1, 0);
	if (rc || unmap->status != GNTST_okay) {
		fprintf(stderr, "xenpvsw: unmap of grant %u: rc %ld status %d\n", map->ref, rc,
			unmap->status);
		return 1;
	}
	return !(mark < 0 && unmark < 0);
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/*
 * Random calls: commands around the new ones, frames from the caller's own
 * (argv), small, huge and random, odd counts and owners.  Whatever was
 * marked is unmarked again at once, so dom0 keeps its IOMMU mappings.
 */
static int cmd_fuzz(int argc, char **argv)
{
	long tally[64] = { 0 };
	unsigned long n, i, nown;
	uint64_t *own;

	if (argc < 5) {
		fprintf(stderr, "usage: xenpvsw fuzz N SEED OWN_MFN...\n");
		return 2;
	}
	n = parse_mfn(argv[2]);
	rng_state = parse_mfn(argv[3]) | 1;
	nown = argc - 4;
	own = calloc(nown, sizeof(*own));
	if (!own)
		return 1;
	for (i = 0; i < nown; i++)
		own[i] = parse_mfn(argv[4 + i]);

	for (i = 0; i < n; i++) {
		uint64_t r = rnd(), mfn;
		unsigned int cmd = MMUEXT_MARK_NO_DMA + (r & 1);
		unsigned int count = 1;
		domid_t dom = DOMID_SELF;
		long rc;

		switch ((r >> 1) & 7) {
		case 0: mfn = rnd(); break;
		case 1: mfn = rnd() & 0xfffff; break;
		case 2: mfn = rnd() & 0xff; break;
		default: mfn = own[rnd() % nown]; break;
		}
		if (((r >> 4) & 15) == 0)
			dom = rnd() & 0xffff;
		if (((r >> 8) & 15) == 0)
			count = rnd() % 4;
		if (((r >> 12) & 31) == 0)
			cmd = MMUEXT_MARK_NO_DMA - 2 + rnd() % 5;
		if (cmd < MMUEXT_MARK_NO_DMA - 1 || cmd == MMUEXT_MARK_NO_DMA - 1)
			cmd = MMUEXT_UNMARK_NO_DMA + 1; /* never pin or flush */
		rc = mmuext(cmd, mfn, count, dom);
		tally[(-rc) & 63]++;
		if (rc == 0 && cmd == MMUEXT_MARK_NO_DMA && count)
			mmuext(MMUEXT_UNMARK_NO_DMA, mfn, 1, dom);
	}
	printf("calls %lu\n", n);
	for (i = 0; i < 64; i++)
		if (tally[i])
			printf("rc_%s %ld\n", i ? strerror(i) : "ok", tally[i]);
	return 0;
}

static int cmd_audit_answer(int argc, char **argv)
{
	static uint8_t out[AUDIT_WINDOW];
	unsigned long violations = 0;
	uint64_t *mfns = NULL;
	uint32_t nr = 0, i, j;
	int sync = 0, tokens = 0;
	long rc = -EINVAL;

	if (argc >= 6 && !strcmp(argv[3], "range")) {
		nr = strtoul(argv[5], NULL, 0);
		if (nr && nr <= AUDIT_WINDOW)
			rc = pv_iommu_audit(atoi(argv[2]), parse_mfn(argv[4]), nr, out, &sync, &violations);
	} else if (argc >= 5 && !strcmp(argv[3], "list") && argc - 4 <= AUDIT_WINDOW) {
		nr = argc - 4;
		mfns = calloc(nr, sizeof(*mfns));
		for (i = 0; mfns && i < nr; i++)
			mfns[i] = parse_mfn(argv[4 + i]);
		rc = mfns ? pv_iommu_audit_list(atoi(argv[2]), mfns, nr, out, &sync) : -ENOMEM;
		for (i = 0; !rc && i < nr; i++)
			violations += !!(out[i] & XEN_DOMCTL_PV_IOMMU_AUDIT_VIOLATION);
	}
	/* Always answered, with the end line: the domU waits for it. */
	printf("@@audit-result %ld %d %lu %u\n", rc, sync, violations, rc ? 0 : nr);
	for (i = 0; !rc && i < nr; i = j) {
		for (j = i + 1; j < nr && out[j] == out[i]; j++)
			;
		if (!tokens)
			printf("@@audit-data");
		printf(j - i > 1 ? " %02x*%u" : " %02x", out[i], j - i);
		if (++tokens == AUDIT_TOKENS_PER_LINE || j == nr) {
			printf("\n");
			tokens = 0;
		}
	}
	printf("@@audit-end\n");
	free(mfns);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: xenpvsw audit|mark|unmark|mark-for|grant|mark-granted|refusals|fuzz ...\n");
		return 2;
	}
	/* gntalloc needs no hypercall of ours. */
	if (!strcmp(argv[1], "grant"))
		return cmd_grant(argc, argv);
	privcmd_open("xenpvsw");
	if (!strcmp(argv[1], "audit"))
		return cmd_audit(argc, argv);
	if (!strcmp(argv[1], "mark"))
		return cmd_mark(argc, argv, MMUEXT_MARK_NO_DMA, DOMID_SELF);
	if (!strcmp(argv[1], "unmark"))
		return cmd_mark(argc, argv, MMUEXT_UNMARK_NO_DMA, DOMID_SELF);
	if (!strcmp(argv[1], "mark-for") && argc > 2)
		return cmd_mark(argc - 1, argv + 1, MMUEXT_MARK_NO_DMA, parse_mfn(argv[2]));
	if (!strcmp(argv[1], "mark-granted"))
		return cmd_mark_granted(argc, argv);
	if (!strcmp(argv[1], "refusals"))
		return cmd_refusals(argc, argv);
	if (!strcmp(argv[1], "audit-answer") && argc > 2)
		return cmd_audit_answer(argc, argv);
	if (!strcmp(argv[1], "fuzz"))
		return cmd_fuzz(argc, argv);
	fprintf(stderr, "xenpvsw: unknown command '%s'\n", argv[1]);
	return 2;
}
