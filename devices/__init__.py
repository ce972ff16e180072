"""Block devices, in one place for the recorder, the workload and the replayer.

`naming`: a path or a number to the kernel's device (its sysfs facts, the trace's
`dev` numbering) and the machine's devices by name. `targets`: what a path a command
would write to is (a block device, a regular file, one to create), refused under /dev
unless a block device and always under /proc and /sys. `safety`: whether a block
device may be written over (not the root disk, not mounted, swap, held or opened
exclusively, no filesystem or partition table) unless named with `--destroy-data-on`.

It imports only base/: every component may use it, and it uses none of them.
"""
