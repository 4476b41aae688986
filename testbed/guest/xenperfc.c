// SPDX-License-Identifier: GPL-2.0
/*
 * xenperfc - read or reset Xen's perf counters from a PV dom0, without a
 * toolstack: one XEN_SYSCTL_perfc_op hypercall through /dev/xen/privcmd.
 *
 *   xenperfc [-r] [NAME...]
 *
 * Prints "NAME VALUE" lines (vmstat style), VALUE summed over all CPUs;
 * with NAMEs, only those counters (in that order; an unknown name is an
 * error).  -r resets every counter after reading.  Xen must be built with
 * CONFIG_PERF_COUNTERS=y, otherwise the sysctl fails with ENOSYS.
 *
 * Built against the public headers of the Xen tree being tested, so the
 * sysctl interface version always matches the hypervisor.
 */
#include "privcmd.h"

static int perfc_op(uint32_t cmd, xen_sysctl_perfc_desc_t *desc,
		    xen_sysctl_perfc_val_t *val, uint32_t *nr_counters,
		    uint32_t *nr_vals)
{
	struct xen_sysctl *sysctl = hcall_buf(sizeof(*sysctl));
	long rc;

	sysctl->cmd = XEN_SYSCTL_perfc_op;
	sysctl->u.perfc_op.cmd = cmd;
	set_xen_guest_handle(sysctl->u.perfc_op.desc, desc);
	set_xen_guest_handle(sysctl->u.perfc_op.val, val);
	rc = do_sysctl(sysctl);
	if (!rc) {
		*nr_counters = sysctl->u.perfc_op.nr_counters;
		*nr_vals = sysctl->u.perfc_op.nr_vals;
	}
	munmap(sysctl, sizeof(*sysctl));
	errno = rc < 0 ? -rc : 0;
	return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
	xen_sysctl_perfc_desc_t *desc;
	xen_sysctl_perfc_val_t *val;
	uint32_t nr_counters, nr_vals, i, j, v;
	int reset = 0, first = 1, a;
	uint64_t *sum;

	if (argc > 1 && !strcmp(argv[1], "-r")) {
		reset = 1;
		first = 2;
	}
	for (a = first; a < argc; a++) {
		if (argv[a][0] == '-') {
			fprintf(stderr, "usage: xenperfc [-r] [NAME...]\n");
			return 2;
		}
	}

	privcmd_open("xenperfc");

	/* First call sizes the arrays, second fills them. */
	if (perfc_op(XEN_SYSCTL_PERFCOP_query, NULL, NULL, &nr_counters, &nr_vals)) {
		if (errno == ENOSYS)
			fprintf(stderr, "xenperfc: Xen has no perf counters (build it with CONFIG_PERF_COUNTERS=y)\n");
		else
			perror("xenperfc: perfc query");
		return 1;
	}
	desc = hcall_buf(sizeof(*desc) * nr_counters);
	val = hcall_buf(sizeof(*val) * nr_vals);
	if (perfc_op(reset ? XEN_SYSCTL_PERFCOP_reset : XEN_SYSCTL_PERFCOP_query,
		     desc, val, &nr_counters, &nr_vals)) {
		perror("xenperfc: perfc read");
		return 1;
	}

	sum = calloc(nr_counters, sizeof(*sum));
	if (!sum) {
		perror("xenperfc");
		return 1;
	}
	for (i = v = 0; i < nr_counters; i++) {
		desc[i].name[sizeof(desc[i].name) - 1] = '\0';
		for (j = 0; j < desc[i].nr_vals && v < nr_vals; j++)
			sum[i] += val[v++];
	}

	if (argc == first) {
		for (i = 0; i < nr_counters; i++)
			printf("%s %llu\n", desc[i].name, (unsigned long long)sum[i]);
		return 0;
	}
	for (a = first; a < argc; a++) {
		for (i = 0; i < nr_counters; i++)
			if (!strcmp(desc[i].name, argv[a]))
				break;
		if (i == nr_counters) {
			fprintf(stderr, "xenperfc: no counter named '%s'\n", argv[a]);
			return 1;
		}
		printf("%s %llu\n", desc[i].name, (unsigned long long)sum[i]);
	}
	return 0;
}
