import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config):
    config.addinivalue_line("markers", "testbed: boots Xen + dom0 under QEMU (builds what is missing first)")
    config.addinivalue_line("markers", "slow: beyond make test's 15-minute budget; make test-all runs it")
