import os

import pytest

from flushless.experiments import measure, workloads
from flushless.testbed.build import REPO


def test_parse_counters_names_with_spaces():
    c = measure.parse_counters(["calls to mmuext_op 1823", "vtd_qi_iotlb_inv 17938", "#IPIs 4"])
    assert c == {"calls to mmuext_op": 1823, "vtd_qi_iotlb_inv": 17938, "#IPIs": 4}
    with pytest.raises(ValueError):
        measure.parse_counters(["garbage"])


def test_delta_wraps_at_32_bits():
    assert measure.delta({"a": 2 ** 32 - 5}, {"a": 3}) == {"a": 8}
    assert measure.delta({}, {"b": 7}) == {"b": 7}


def measure_output(before, after, output, status=0):
    lines = ["@@counters-before"] + ["%s %d" % kv for kv in before.items()]
    lines += ["@@output"] + output
    lines += ["@@counters-after"] + ["%s %d" % kv for kv in after.items()]
    return lines + ["@@status %d" % status]


BEFORE = {"pv_iommu_unmap_type": 100, "pv_iommu_map_type": 90, "pv_iommu_unmap_final_put": 5,
          "vtd_qi_iotlb_inv": 1000, "vtd_qi_iotlb_inv_skipped": 7, "hypercalls": 1}
AFTER = {"pv_iommu_unmap_type": 1900, "pv_iommu_map_type": 1890, "pv_iommu_unmap_final_put": 5,
         "vtd_qi_iotlb_inv": 2954, "vtd_qi_iotlb_inv_skipped": 1807, "hypercalls": 99}


def test_figures_per_op():
    rec = measure.figures("forkbench", ["--n", "200"], measure_output(
        BEFORE, AFTER, ["result ops=200 time_us=812.5 exec=0 touch_mb=0 total_s=0.162"]))
    assert rec["ops"] == 200
    assert rec["counters"]["qi_iotlb_inv"] == 1954
    assert rec["per_op"]["qi_iotlb_inv"] == pytest.approx(9.77)
    assert rec["per_op"]["iommu_unmap_type"] == 9.0
    assert rec["per_op"]["time_us"] == 812.5
    # Optional counters appear when Xen has them: here the hypercall count.
    assert set(rec["counters"]) == set(measure.COUNTERS.values()) | {"hypercalls"}
    assert rec["per_op"]["hypercalls"] == pytest.approx(0.49)


def test_figures_rejects_failed_program_and_missing_counters():
    from flushless.progress import ToolError
    with pytest.raises(ToolError, match="exited 1"):
        measure.figures("forkbench", [], measure_output(BEFORE, AFTER, ["fork: no memory"], status=1))
    stock = {"hypercalls": 1}
    with pytest.raises(ToolError, match="no counter"):
        measure.figures("forkbench", [], measure_output(stock, stock, ["result ops=1 time_us=1"]))
    with pytest.raises(ValueError, match="no 'result' line"):
        measure.figures("forkbench", [], measure_output(BEFORE, AFTER, ["# nothing"]))
    with pytest.raises(ValueError, match="counters-after"):
        measure.split_sections(["@@counters-before", "@@output", "@@status 0"])


def test_a_checks_bad_verdict_is_a_record_that_fails_the_run():
    from flushless.progress import ToolError
    swrace = ["row op=mark ok=9 busy=0 einval=0 other=0",
              "result ops=9 time_us=5 rounds=10 bad_states=2 frames=64 threads=2"]
    # swrace exits 3 after its result line: the record is built (a test of a broken shape
    # reads it), and what it found is a failure.
    lines = measure_output(BEFORE, AFTER, swrace)[:-1] + ["@@audit", "violations 0", "@@status %d" % measure.FOUND]
    rec = measure.figures("swrace", [], lines)
    assert rec["bad_states"] == 2
    assert measure.bad_verdicts(rec) == ["swrace ended 2 rounds in a bad state"]
    # Status 3 from any other program is an error, as every non-zero status.
    with pytest.raises(ToolError, match="exited 3"):
        measure.figures("forkbench", [], measure_output(BEFORE, AFTER, ["result ops=1 time_us=1"], status=3))
    # Xen's audit: violations fail, a missing audit fails unless the Xen has none.
    clean = measure.figures("forkbench", [], measure_output(BEFORE, AFTER, ["result ops=1 time_us=1"]))
    assert measure.bad_verdicts(clean) == ["Xen's audit was unavailable (xenpvsw audit failed)"]
    assert measure.bad_verdicts(clean, audit=False) == []
    assert measure.bad_verdicts(dict(clean, invariant_violations=3)) == [
        "Xen's audit found 3 frames against the IOMMU invariant"]
    sweep = dict(clean, workload="dmasweep", invariant_violations=0, control_read_ok=True,
                 pagetable_frames_readable=1, pagetable_readable_list=["0x1234"], writable_frames_faulted=0)
    assert measure.bad_verdicts(sweep) == ["the device read 1 page-table frames (0x1234)"]


def test_parse_output_rows_and_result():
    result, rows = workloads.parse_output([
        "row size_kb=4 ops=20 fork_us=100.500 min_us=90.000",
        "row size_kb=8 ops=20 fork_us=101.000 min_us=91.000",
        "result what=fork ops=40 time_us=100.750"])
    assert rows[1]["size_kb"] == 8 and rows[0]["fork_us"] == 100.5
    assert result == {"what": "fork", "ops": 40, "time_us": 100.75}
    with pytest.raises(ValueError):
        workloads.parse_output(["result ops=1"])


@pytest.mark.parametrize("name,argv,msg", [
    ("forkbench", ["--bogus"], "unknown argument --bogus"),
    ("forkbench", ["--n", "abc"], "whole number"),
    ("forkbench", ["--n", "0"], "from 1 to"),
    ("forkbench", ["--n"], "expected one argument"),
    ("lat_proc", ["--what", "nope"], "one of fork, exec, shell"),
    ("forkdirty", ["--ptes-list", "2,x"], "comma-separated"),
])
def test_workload_args_refused(name, argv, msg):
    with pytest.raises(workloads.UsageError, match=msg):
        workloads.get(name).check_args(argv)


def test_workload_args_passed_through():
    assert workloads.get("forkbench").check_args(["--exec", "--n=5"]) == ["--n", "5", "--exec"]
    with pytest.raises(workloads.UsageError, match="unknown workload"):
        workloads.get("nope")


def test_counter_names_are_in_the_xen_patch():
    # The names measure.py looks for are the ones patches/xen/0001 defines.
    series = sorted(os.listdir(os.path.join(REPO, "patches", "xen")))
    text = open(os.path.join(REPO, "patches", "xen", series[0])).read()
    for name in measure.COUNTERS:
        assert 'PERFCOUNTER(%s,' % name in text
        assert 'perfc_incr(%s)' % name in text
