#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Log a QEMU guest's QMP events with the host's clock (run.sh -S watchdog).

    qmp-events.py SOCKET OUT [SECS]

Connects to the QMP server at the Unix socket SOCKET (waits up to SECS,
default 120, for QEMU to create it), enables the protocol, and appends one
line per event to OUT: "HOST_TIME EVENT JSON", HOST_TIME being time.time()
when the line arrived. Exits when QEMU closes the socket.
"""
import json
import socket
import sys
import time


def connect(path, secs):
    deadline = time.time() + secs
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: qmp-events.py SOCKET OUT [SECS]")
    path, out = sys.argv[1], sys.argv[2]
    secs = float(sys.argv[3]) if len(sys.argv) > 3 else 120.0
    try:
        s = connect(path, secs)
    except OSError as e:
        sys.exit(f"qmp-events: cannot connect to {path}: {e}")
    f = s.makefile("rwb", buffering=0)
    f.readline()  # the greeting
    f.write(b'{"execute": "qmp_capabilities"}\n')
    with open(out, "a", buffering=1) as log:
        for line in f:
            now = time.time()
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "event" in msg:
                log.write(f"{now:.3f} {msg['event']} {json.dumps(msg.get('data', {}))}\n")


if __name__ == "__main__":
    main()
