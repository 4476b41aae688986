"""The workload programs, built and run natively; their options match flushless's list."""

import os
import re
import shutil
import subprocess
import tempfile

import pytest

from flushless.experiments import workloads
from flushless.testbed.build import REPO


@pytest.fixture(scope="module")
def bindir():
    # Not tmp_path_factory: its directories rotate across concurrent pytest sessions.
    out = tempfile.mkdtemp(prefix="flushless-workloads-")
    subprocess.run(["make", "-s", "-C", os.path.join(REPO, "workloads"), "OUT=%s" % out], check=True)
    yield out
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(n for n, w in workloads.WORKLOADS.items() if not w.guest_only))
def test_options_match_program_help(bindir, name):
    res = subprocess.run([os.path.join(bindir, name), "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 0 and res.stdout, (res.returncode, res.stdout, res.stderr)
    theirs = set(re.findall(r"^  --([a-z-]+)", res.stdout, re.M)) - {"help"}
    ours = set(o.name for o in workloads.WORKLOADS[name].opts)
    assert ours == theirs


def test_native_contract_script():
    res = subprocess.run(["bash", os.path.join(REPO, "workloads", "tests", "run_native.sh")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    assert re.search(r"^\d+ passed, 0 failed$", res.stdout, re.M), res.stdout[-3000:]
