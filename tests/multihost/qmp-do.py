#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Run QMP commands on a QEMU guest, in order (run.sh -S watchdog: stop, cont).

    qmp-do.py SOCKET COMMAND...

Prints "HOST_TIME COMMAND RESULT" per command; exits 1 on the first one
QEMU refuses or when the socket is gone (QEMU exited).
"""
import importlib.machinery
import importlib.util
import os
import sys
import time

# The QMP client of beluga-vm-fence (one copy of it).
_path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "../../userspace/vmfence/beluga-vm-fence")
_loader = importlib.machinery.SourceFileLoader("beluga_vm_fence", _path)
_spec = importlib.util.spec_from_loader("beluga_vm_fence", _loader)
vmfence = importlib.util.module_from_spec(_spec)
_loader.exec_module(vmfence)


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: qmp-do.py SOCKET COMMAND...")
    try:
        qmp = vmfence.Qmp(sys.argv[1], 5.0)
        for command in sys.argv[2:]:
            result = qmp.execute(command)
            print(f"{time.time():.3f} {command} {result}", flush=True)
    except (vmfence.QmpError, OSError, EOFError) as e:
        print(f"{time.time():.3f} qmp-do: {e or 'QEMU closed the socket'}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
