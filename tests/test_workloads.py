"""The workload programs, built and run natively; their options match flushless's list."""

import os
import re
import subprocess

import pytest

from flushless import workloads
from flushless.build import REPO


@pytest.fixture(scope="module")
def bindir(tmp_path_factory):
    out = tmp_path_factory.mktemp("workloads")
    subprocess.run(["make", "-s", "-C", os.path.join(REPO, "workloads"), "OUT=%s" % out], check=True)
    return out


@pytest.mark.parametrize("name", sorted(workloads.WORKLOADS))
def test_options_match_program_help(bindir, name):
    res = subprocess.run([str(bindir / name), "--help"], stdout=subprocess.PIPE, text=True, check=True)
    theirs = set(re.findall(r"^  --([a-z-]+)", res.stdout, re.M)) - {"help"}
    ours = set(o.name for o in workloads.WORKLOADS[name].opts)
    assert ours == theirs


def test_native_contract_script():
    res = subprocess.run(["bash", os.path.join(REPO, "workloads", "tests", "run_native.sh")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    assert re.search(r"^\d+ passed, 0 failed$", res.stdout, re.M), res.stdout[-3000:]
