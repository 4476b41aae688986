import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _boots():
    from flushless.testbed import boot
    boots, retried = boot.BOOTS["boots"], boot.BOOTS["retried"]
    return boots, retried, boot.retries_explained(boots) if boots else 0


def pytest_sessionfinish(session, exitstatus):
    """More boots retried after a stall than the census's stall rate explains fail the run."""
    boots, retried, allowed = _boots()
    if len(retried) > allowed:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    """Every boot retried after a stall is listed, never silent."""
    boots, retried, allowed = _boots()
    if not boots:
        return
    bad = len(retried) > allowed
    terminalreporter.write_line("testbed: %d boots, %d retried after a stall (the census's stall rate explains up "
                                "to %d)%s" % (boots, len(retried), allowed, ": FAILED" if bad else ""),
                                red=bad, yellow=bool(retried) and not bad)
    for path in retried:
        terminalreporter.write_line("    stalled, booted again: " + path)
