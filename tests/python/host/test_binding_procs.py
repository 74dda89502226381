# SPDX-License-Identifier: GPL-2.0
"""Ownership across open files and processes: the real module only (the fake
kernel is one client in one process), so these skip on the host."""

import errno
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

import beluga

KEYS = beluga.hash_chain(range(64), 16)


def child(code, **kw):
    pkg_dir = str(pathlib.Path(beluga.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=pkg_dir)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, text=True, **kw)


@pytest.mark.real_only("two open files of one pool")
def test_publish_needs_the_allocating_file(pool, device, unique_ns):
    offs = pool.alloc(2)
    with beluga.Pool(device) as other:
        res = other.publish(unique_ns, offs, KEYS[:32])
        assert list(res.results) == [-errno.EPERM] * 2 and res.failed == 2
        with pytest.raises(beluga.InvalidArgument):
            other.free(offs)
    pool.free(offs)


@pytest.mark.real_only("closing a file returns what it holds")
def test_close_returns_allocations_and_pins(pool, device, unique_ns):
    pool.publish(unique_ns, pool.alloc(1), KEYS[:16])
    base = pool.stats()
    other = beluga.Pool(device)
    other.alloc(3)
    other.lookup(unique_ns, KEYS[:16], pin=True)
    s = pool.stats()
    assert s["allocated_blocks"] == base["allocated_blocks"] + 3
    assert s["pins"] == base["pins"] + 1
    other.close()
    s = pool.stats()
    assert (s["allocated_blocks"], s["pins"]) == (base["allocated_blocks"], base["pins"])
    pool.evict_ns(unique_ns)


@pytest.mark.real_only("two processes")
def test_blocks_cross_processes(pool, unique_ns):
    p = child(f"""
        import beluga
        with beluga.Pool() as pool:
            offs = pool.alloc(4)
            m = pool.map()
            for i, o in enumerate(offs):
                m.block(o)[:8] = b"block-%02d" % i
            print(pool.publish({unique_ns}, offs, {KEYS!r}).published)
    """)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and out.strip() == "4"
    hits, pinned = pool.lookup(unique_ns, KEYS, pin=True)
    assert hits == 4
    m = pool.map()
    assert [bytes(m.block(o)[:8]) for o in pinned] == [b"block-%02d" % i for i in range(4)]
    pool.release(pinned)
    assert pool.evict_ns(unique_ns) == (4, 0)


@pytest.mark.real_only("a process killed with SIGKILL")
def test_sigkill_leaks_nothing(pool, unique_ns):
    pool.publish(unique_ns, pool.alloc(1), KEYS[:16])
    base = pool.stats()
    p = child(f"""
        import sys, time, beluga
        pool = beluga.Pool()
        pool.alloc(5)
        pool.lookup({unique_ns}, {KEYS[:16]!r}, pin=True)
        print("holding", flush=True)
        time.sleep(60)
    """)
    assert p.stdout.readline().strip() == "holding"
    s = pool.stats()
    assert s["allocated_blocks"] == base["allocated_blocks"] + 5
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    s = pool.stats()
    assert (s["allocated_blocks"], s["pins"]) == (base["allocated_blocks"], base["pins"])
    pool.evict_ns(unique_ns)
