// SPDX-License-Identifier: GPL-2.0
/*
 * xenpvsw - drive Xen's semi-writable page interface from a PV dom0
 * (patches/xen/0002, 0003), for the testbed's checks.
 *
 *   xenpvsw audit [DOMID]        XEN_SYSCTL_pv_iommu_audit, "name value" lines
 *   xenpvsw mark MFN...          MMUEXT_MARK_SEMI_WRITABLE, "MFN RC" per frame
 *   xenpvsw unmark MFN...        MMUEXT_UNMARK_SEMI_WRITABLE
 *   xenpvsw refusals OWN_MFN     bad arguments; "check NAME ok|FAIL rc=.."
 *   xenpvsw fuzz N SEED MFN...   N random mmuext calls on the new ops, every
 *                                successful mark undone; prints a tally
 *
 * RC is the hypercall's result, 0 or -errno.
 */
#include "privcmd.h"

static long mmuext(unsigned int cmd, uint64_t mfn, unsigned int count,
		   domid_t dom)
{
	struct mmuext_op *op = hcall_buf(sizeof(*op) * (count ? count : 1));
	unsigned int i;
	long rc;

	for (i = 0; i < (count ? count : 1); i++) {
		op[i].cmd = cmd;
		op[i].arg1.mfn = mfn;
	}
	rc = hypercall(__HYPERVISOR_mmuext_op, (uintptr_t)op, count, 0, dom);
	munlock(op, sizeof(*op) * (count ? count : 1));
	munmap(op, sizeof(*op) * (count ? count : 1));
	return rc;
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

static int cmd_audit(int argc, char **argv)
{
	struct xen_sysctl *sysctl = hcall_buf(sizeof(*sysctl));
	struct xen_sysctl_pv_iommu_audit *a = &sysctl->u.pv_iommu_audit;
	long rc;

	sysctl->cmd = XEN_SYSCTL_pv_iommu_audit;
	a->domid = argc > 2 ? parse_mfn(argv[2]) : 0;
	rc = do_sysctl(sysctl);
	if (rc) {
		fprintf(stderr, "xenpvsw: audit: %s\n", strerror(-rc));
		return 1;
	}
	printf("pages %llu\npage_tables %llu\nsemi_writable %llu\n"
	       "iommu_mapped %llu\nviolations %llu\nsync %u\n",
	       (unsigned long long)a->pages, (unsigned long long)a->page_tables,
	       (unsigned long long)a->semi_writable,
	       (unsigned long long)a->iommu_mapped,
	       (unsigned long long)a->violations,
	       !!(a->flags & XEN_SYSCTL_PV_IOMMU_AUDIT_SYNC));
	return 0;
}

static int cmd_mark(int argc, char **argv, unsigned int cmd)
{
	int i, bad = 0;

	for (i = 2; i < argc; i++) {
		long rc = mmuext(cmd, parse_mfn(argv[i]), 1, DOMID_SELF);

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
	struct xen_sysctl *sysctl = hcall_buf(sizeof(*sysctl));
	uint64_t own;
	int bad = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: xenpvsw refusals OWN_MFN\n");
		return 2;
	}
	own = parse_mfn(argv[2]);
	bad |= check("own_page_mark", mmuext(MMUEXT_MARK_SEMI_WRITABLE, own, 1, DOMID_SELF), 0);
	bad |= check("own_page_mark_again", mmuext(MMUEXT_MARK_SEMI_WRITABLE, own, 1, DOMID_SELF), 0);
	bad |= check("own_page_unmark", mmuext(MMUEXT_UNMARK_SEMI_WRITABLE, own, 1, DOMID_SELF), 0);
	bad |= check("own_page_unmark_again", mmuext(MMUEXT_UNMARK_SEMI_WRITABLE, own, 1, DOMID_SELF), 0);
	/* No such domain as page owner. */
	bad |= check("foreign_domid", mmuext(MMUEXT_MARK_SEMI_WRITABLE, own, 1, 4242), -ESRCH);
	/* dom_io owns MMIO: refused as page owner by get_pg_owner(). */
	bad |= check("domid_io", mmuext(MMUEXT_MARK_SEMI_WRITABLE, own, 1, DOMID_IO), -EPERM);
	/* Frames that are not the caller's RAM. */
	bad |= check("mfn_beyond_ram", mmuext(MMUEXT_MARK_SEMI_WRITABLE, 1ULL << 40, 1, DOMID_SELF), -EINVAL);
	bad |= check("mfn_all_ones", mmuext(MMUEXT_UNMARK_SEMI_WRITABLE, ~0ULL, 1, DOMID_SELF), -EINVAL);
	bad |= check("mfn_zero_xen_owned", mmuext(MMUEXT_MARK_SEMI_WRITABLE, 0, 1, DOMID_SELF), -EINVAL);
	bad |= check("unknown_cmd", mmuext(MMUEXT_UNMARK_SEMI_WRITABLE + 1, own, 1, DOMID_SELF), -ENOSYS);
	/* Audit: nonexistent domain, pad not zero. */
	sysctl->cmd = XEN_SYSCTL_pv_iommu_audit;
	sysctl->u.pv_iommu_audit.domid = 4242;
	bad |= check("audit_no_domain", do_sysctl(sysctl), -ESRCH);
	memset(sysctl, 0, sizeof(*sysctl));
	sysctl->cmd = XEN_SYSCTL_pv_iommu_audit;
	sysctl->u.pv_iommu_audit.pad[1] = 1;
	bad |= check("audit_pad_not_zero", do_sysctl(sysctl), -EINVAL);
	return bad;
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
		unsigned int cmd = MMUEXT_MARK_SEMI_WRITABLE + (r & 1);
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
			cmd = MMUEXT_MARK_SEMI_WRITABLE - 2 + rnd() % 5;
		if (cmd < MMUEXT_MARK_SEMI_WRITABLE - 1 || cmd == MMUEXT_MARK_SEMI_WRITABLE - 1)
			cmd = MMUEXT_UNMARK_SEMI_WRITABLE + 1; /* never pin or flush */
		rc = mmuext(cmd, mfn, count, dom);
		tally[(-rc) & 63]++;
		if (rc == 0 && cmd == MMUEXT_MARK_SEMI_WRITABLE && count)
			mmuext(MMUEXT_UNMARK_SEMI_WRITABLE, mfn, 1, dom);
	}
	printf("calls %lu\n", n);
	for (i = 0; i < 64; i++)
		if (tally[i])
			printf("rc_%s %ld\n", i ? strerror(i) : "ok", tally[i]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: xenpvsw audit|mark|unmark|refusals|fuzz ...\n");
		return 2;
	}
	privcmd_open("xenpvsw");
	if (!strcmp(argv[1], "audit"))
		return cmd_audit(argc, argv);
	if (!strcmp(argv[1], "mark"))
		return cmd_mark(argc, argv, MMUEXT_MARK_SEMI_WRITABLE);
	if (!strcmp(argv[1], "unmark"))
		return cmd_mark(argc, argv, MMUEXT_UNMARK_SEMI_WRITABLE);
	if (!strcmp(argv[1], "refusals"))
		return cmd_refusals(argc, argv);
	if (!strcmp(argv[1], "fuzz"))
		return cmd_fuzz(argc, argv);
	fprintf(stderr, "xenpvsw: unknown command '%s'\n", argv[1]);
	return 2;
}
