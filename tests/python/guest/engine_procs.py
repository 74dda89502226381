# SPDX-License-Identifier: GPL-2.0
"""Engine processes for the multi-process tests: start one, hear from it, reap it.

An engine is a function fn(conn, *args) run in a forked process; it reports
through its end of a Pipe.
An exception in it is sent to the parent as {"error": ...}, which fails the
test with that message instead of a silent exit.

The tests here are marked real_only: engine processes share blocks through
the kernel, and the fake kernel lives inside one process. make test runs them
in the 6.12 guest (BELUGA_TEST_REAL=1, scripts/vm/guest-python.sh). This
directory has no conftest.py on purpose: tests that `import conftest` must get
tests/python/conftest.py.
"""

import multiprocessing

import pytest

# Long enough for a child to start and report, short enough not to hide a hang
# for long (a deadline for a child's message, not a performance bound).
CHILD_DEADLINE_S = 120


# multiprocessing with fork: a child starts in milliseconds, where spawn would
# import Python and the tests again (seconds under TCG). Each engine process
# opens the device itself, so that it owns its allocations and pins (a forked
# child shares its parent's open file description).
MP = multiprocessing.get_context("fork")


def engine(fn):
    """Decorate an engine function: report its exception, close its pipe."""
    def run(conn, *args):
        try:
            fn(conn, *args)
        except BaseException as e:  # noqa: B902 (reported to the parent)
            conn.send({"error": "%s: %s" % (type(e).__name__, e)})
        finally:
            conn.close()
    run.__name__ = fn.__name__
    return run


def start(target, *args):
    """Start target(conn, *args) in a new process: (process, parent's end)."""
    parent, child_conn = MP.Pipe()
    p = MP.Process(target=target, args=(child_conn,) + args)
    p.start()
    child_conn.close()
    return p, parent


def recv(conn, what):
    """The next message of the engine `what`; fails the test on its error or
    its silence."""
    if not conn.poll(CHILD_DEADLINE_S):
        pytest.fail("no message from the %s within %d s" % (what, CHILD_DEADLINE_S))
    try:
        msg = conn.recv()
    except EOFError:
        pytest.fail("the %s exited without a message" % what)
    if "error" in msg:
        pytest.fail("the %s failed: %s" % (what, msg["error"]))
    return msg


def join_all(procs):
    """Reap engine processes; each must exit with status 0."""
    for p in procs:
        p.join(CHILD_DEADLINE_S)
        if p.is_alive():
            p.kill()
            p.join()
            pytest.fail("engine process %d did not exit" % p.pid)
        assert p.exitcode == 0, "engine process %d exited with %s" % (p.pid, p.exitcode)
