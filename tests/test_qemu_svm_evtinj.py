"""An interrupt injected with SVM's EVENTINJ is delivered once (docs/qemu-svm-evtinj.md).

QEMU 10.0.2's TCG delivers it a second time, with IF clear, when the CPU loop exits before the
guest's next exception or #VMEXIT: under -icount, at the end of an instruction budget. PVH
domUs under -icount hung or oopsed from it. The testbed's QEMU carries the fix
(testbed/qemu/0001); the host's QEMU, as Debian ships it, is the broken shape the reproducer
must catch.
"""

import pytest

from flushless.testbed import qemu


@pytest.mark.parametrize("icount", [True, False])
def test_testbed_qemu_delivers_an_injected_interrupt_once(icount):
    qemu.use("testbed")
    res = qemu.svm_evtinj(icount=icount)
    print(qemu.info(), "icount" if icount else "no icount", res)
    assert res == {"deliveries": 1, "if_clear": 0}, res


def test_host_qemu_delivers_it_twice_under_icount():
    qemu.use("system")
    try:
        res = qemu.svm_evtinj(icount=True)
        info = qemu.info()
    finally:
        qemu.use("testbed")
    print(info, res)
    assert res == {"deliveries": 2, "if_clear": 1}, (
        "the host's QEMU %s %s delivers the injected interrupt %d time(s) under -icount: if once, it has the fix, "
        "and testbed/qemu/0001 with docs/qemu-svm-evtinj.md are to be revisited"
        % (info["qemu_version"], info["qemu_package"], res["deliveries"]))
