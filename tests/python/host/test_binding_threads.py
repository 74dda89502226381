# SPDX-License-Identifier: GPL-2.0
"""Threads: the GIL is released around calls, close() waits for calls in
flight, concurrent users see no crash and their own error messages."""

import threading
import time

import pytest

import beluga
from beluga import _beluga

fake_only = pytest.mark.skipif(not beluga.FAKE_KERNEL,
                               reason="needs the fake kernel's _fake_delay")


@pytest.fixture(autouse=True)
def no_delay_after():
    yield
    if beluga.FAKE_KERNEL:
        _beluga._fake_delay(0)


def run_in_thread(fn):
    box = {}
    inside = threading.Event()

    def body():
        inside.set()
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
        box["done"] = time.monotonic()

    t = threading.Thread(target=body)
    t.start()
    inside.wait()
    return t, box


@fake_only
def test_gil_is_released_during_a_call(pool):
    _beluga._fake_delay(0.5)
    t, box = run_in_thread(pool.stats)
    time.sleep(0.05)
    # This thread ran while the other one was inside the call.
    assert "done" not in box
    t.join()
    _beluga._fake_delay(0)
    assert "error" not in box and box["result"]["total_blocks"] > 0


@fake_only
def test_close_waits_for_calls_in_flight(pool, unique_ns):
    keys = beluga.hash_chain(range(64), 16)
    pool.publish(unique_ns, pool.alloc(4), keys)
    _beluga._fake_delay(0.5)
    t, box = run_in_thread(lambda: pool.lookup(unique_ns, keys))
    time.sleep(0.1)
    pool.close()
    closed_at = time.monotonic()
    t.join()
    # The call finished, with its answer, before the handle went away.
    assert box.get("result") == (4, None), box.get("error")
    assert box["done"] <= closed_at
    assert pool.closed
    with pytest.raises(ValueError, match="pool is closed"):
        pool.lookup(unique_ns, keys)
    _beluga._fake_delay(0)
    with beluga.Pool() as p:
        assert p.evict_ns(unique_ns) == (4, 0)


@fake_only
def test_calls_during_close_are_refused(pool):
    _beluga._fake_delay(0.5)
    t, box = run_in_thread(pool.stats)
    time.sleep(0.1)
    closer = threading.Thread(target=pool.close)
    closer.start()
    time.sleep(0.1)
    assert pool.closed            # closing, waiting for the stats call
    with pytest.raises(ValueError, match="pool is closed"):
        pool.info()
    m_err = None
    try:
        pool.map()
    except ValueError as exc:
        m_err = exc
    assert m_err is not None
    pool.close()                  # a second close waits for the first
    closer.join()
    t.join()
    _beluga._fake_delay(0)
    assert "error" not in box


@pytest.mark.allow_leaks  # a worker may hold an allocation when the pool closes
def test_workers_and_a_closer(pool, unique_ns):
    stop = threading.Event()
    errors, counts = [], [0] * 4

    def worker(i):
        keys = beluga.hash_chain(range(i * 1000, i * 1000 + 8 * 16), 16)
        try:
            while not stop.is_set():
                offs = pool.alloc(1)
                pool.publish(unique_ns, offs, keys[:16])  # the first wins, others race
                hits, pinned = pool.lookup(unique_ns, keys, pin=True)
                pool.release(pinned)
                assert hits >= 1
                pool.lookup(unique_ns, keys)
                counts[i] += 1
        except ValueError as exc:
            if "pool is closed" not in str(exc):
                errors.append(exc)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    while min(counts) < 20 and not errors:
        time.sleep(0.01)
    closer_errors = []

    def closer():
        try:
            pool.close()
        except BaseException as exc:  # noqa: BLE001
            closer_errors.append(exc)

    c = threading.Thread(target=closer)
    c.start()
    c.join()
    stop.set()
    for t in threads:
        t.join()
    assert not errors and not closer_errors
    assert pool.closed and min(counts) >= 20


def test_each_thread_gets_its_own_message(pool):
    mismatches = []
    start = threading.Barrier(2)

    def fail_region():
        start.wait()
        for _ in range(500):
            try:
                pool.region_info(beluga.MAX_REGIONS - 1)
            except beluga.NotFound as exc:
                if "no region in slot" not in str(exc):
                    mismatches.append(str(exc))

    def fail_free():
        start.wait()
        for _ in range(500):
            try:
                pool.free([3])
            except beluga.InvalidArgument as exc:
                if "not a block allocated" not in str(exc):
                    mismatches.append(str(exc))

    ts = [threading.Thread(target=fail_region), threading.Thread(target=fail_free)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not mismatches, mismatches[:3]


def test_exports_against_map_close(pool):
    m = pool.map()
    stop = threading.Event()
    errors = []

    def exporter():
        try:
            while not stop.is_set():
                try:
                    with memoryview(m) as mv:
                        mv[0]  # the bytes are there while the view lives
                except BufferError as exc:
                    if "closed" not in str(exc):
                        errors.append(exc)
                    return
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    ts = [threading.Thread(target=exporter) for _ in range(3)]
    for t in ts:
        t.start()
    deadline = time.monotonic() + 10
    while not m.closed and time.monotonic() < deadline:
        try:
            m.close()
        except BufferError as exc:
            assert "still exported" in str(exc)
    stop.set()
    for t in ts:
        t.join()
    assert m.closed and not errors
