"""pytest plugin: one TAP result per test, for make test's summary.

Load it with ``-p tap_plugin`` (tests/python on sys.path) and name the output
with ``--tap=PATH``. Each test becomes one line, named by its node id relative to
the rootdir, written as soon as the test finishes:

    ok - host/test_store.py::test_roundtrip
    not ok - guest/test_processes.py::test_sigkill      (+ "# " lines: the failure)
    ok - host/test_binding.py::test_real_only # SKIP the fake backend cannot ...
    not ok - host/test_x.py::test_known_bug # TODO xfail: the reason

A test fails when any of its phases failed (an error in a fixture's setup or
teardown counts). A collection error is a result of its own (``collect:PATH``).
The last lines report pytest's exit status; a status other than 0 (passed) or 1
(tests failed) is a failure of its own (``pytest:exit-status-N``), so that
"no tests collected" (5) can never pass quietly. The lines carry no numbers:
the reader numbers them (scripts/vm/tap-filter.awk).
"""

import pytest

# pytest's exit statuses (pytest.ExitCode), for the message
_EXIT_MEANING = {
    2: "interrupted (a collection error, or a signal)",
    3: "pytest internal error",
    4: "pytest usage error",
    5: "no tests were collected",
}
# Enough of a failure's report to see what broke; the whole report is in
# pytest's own output.
_MAX_DETAIL_LINES = 60


def pytest_addoption(parser):
    parser.getgroup("tap").addoption(
        "--tap", metavar="PATH", default=None,
        help="write one TAP result per test to PATH (tests/python/tap_plugin.py)")


def pytest_configure(config):
    path = config.getoption("tap")
    if path:
        config.pluginmanager.register(TapWriter(path), "tap_writer")


def _name(text):
    # A '#' in a parametrized id would read as a TAP directive.
    return " ".join(text.replace("#", "%23").split())


def _skip_reason(report):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr or "")
    if reason.startswith("Skipped: "):
        reason = reason[len("Skipped: "):]
    return " ".join(reason.split())


class TapWriter:
    def __init__(self, path):
        self._out = open(path, "w", encoding="utf-8", buffering=1)
        self._reports = {}

    def _line(self, text):
        self._out.write(text + "\n")

    def _detail(self, text):
        lines = text.splitlines()
        if len(lines) > _MAX_DETAIL_LINES:
            lines = (["(the first lines of %d; pytest's output has them all)" % len(lines)]
                     + lines[:_MAX_DETAIL_LINES])
        for line in lines:
            self._line("# " + line if line else "#")

    def pytest_collectreport(self, report):
        if report.failed:
            self._line("not ok - collect:%s" % _name(report.nodeid or "."))
            self._detail(report.longreprtext)

    def pytest_runtest_logreport(self, report):
        self._reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid, location):
        reports = self._reports.pop(nodeid, [])
        name = _name(nodeid)
        failed = [r for r in reports if r.failed]
        skipped = [r for r in reports if r.skipped]
        if failed:
            self._line("not ok - " + name)
            for r in failed:
                if r.when != "call":
                    self._line("# error in %s" % r.when)
                self._detail(r.longreprtext)
        elif skipped and hasattr(skipped[0], "wasxfail"):
            self._line("not ok - %s # TODO xfail: %s" % (
                name, " ".join(str(skipped[0].wasxfail).split()) or "no reason given"))
        elif skipped:
            self._line("ok - %s # SKIP %s" % (name, _skip_reason(skipped[0])))
        elif reports:
            self._line("ok - " + name)
        else:
            self._line("not ok - %s" % name)
            self._line("# pytest reported no phase of this test")

    def pytest_sessionfinish(self, session, exitstatus):
        status = int(exitstatus)
        if status not in (0, 1):
            self._line("not ok - pytest:exit-status-%d" % status)
            self._line("# pytest exited with status %d: %s" % (
                status, _EXIT_MEANING.get(status, "unknown status")))
        self._line("# tap_plugin: pytest exit status %d" % status)
        self._out.close()
