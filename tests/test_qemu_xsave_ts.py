"""QEMU's TCG raises no #NM for XSAVE, XSAVEOPT and XRSTOR under CR0.TS (docs/qemu-xsave-ts.md).

The testbed boots Xen with eager FPU switching because of it (BootConfig.xen_fpu). The
reproducer's controls, an SSE instruction and FXSAVE, must fault: they show that its #NM
handler works, so a missing #NM is QEMU's. If a QEMU raises #NM for the XSAVE family, the
workaround and the page are stale: this test then says so.
"""

import pytest

from flushless.testbed import qemu


@pytest.mark.parametrize("which", ["testbed", "system", "7.2"])
def test_xsave_family_ignores_cr0_ts(which):
    qemu.use(which)
    try:
        res = qemu.xsave_ts()
    finally:
        qemu.use("testbed")
    print(which, res)
    assert res["pxor"] and res["fxsave"], "the reproducer's own #NM controls failed: %s" % res
    stale = [k for k in ("xsave", "xsaveopt", "xrstor") if res.get(k)]
    assert not stale, ("QEMU %s raises #NM for %s under CR0.TS now: docs/qemu-xsave-ts.md and the testbed's "
                       "eager FPU (BootConfig.xen_fpu) are to be revisited" % (which, ", ".join(stale)))
