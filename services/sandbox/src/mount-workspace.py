"""Mounts a host directory onto a target with an ID mapping (an idmapped mount, Linux >= 5.12).

    python3 idmap.py SOURCE TARGET OWNER_UID OWNER_GID SANDBOX_UID SANDBOX_GID READ_ONLY

Through the new mount, files the workspace's owner (OWNER_UID:OWNER_GID) owns on disk appear
owned by the sandbox user, and files the sandbox user creates are stored as the owner's. So a
root-owned workspace is writable by an unprivileged sandbox without anything in the container
running as host root, and the sandbox's uid stays the one fixed by configuration. Other ids on
disk appear as the overflow id (nobody) and can only be used through their "other" bits.

The mount is prepared detached (open_tree clone), its attributes (idmap, nosuid, nodev and,
for READ_ONLY=1, read-only) are set before it is attached with move_mount, so the target is
never visible writable or unmapped, not even for a moment. Run as root on the sandbox host.
Exits 0 on success; on failure prints one line naming the failed step and exits 1.
"""

import ctypes
import os
import sys

SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442  # x86_64 and aarch64 share these numbers
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
MOVE_MOUNT_F_EMPTY_PATH = 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 0x1, 0x2, 0x4, 0x100000
CLONE_NEWUSER = 0x10000000

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def fail(step, errno_value=None):
    reason = os.strerror(errno_value if errno_value is not None else ctypes.get_errno())
    sys.stdout.write(f"{step}: {reason}\n")
    sys.exit(1)


def mapping_namespace(owner_uid, owner_gid, uid, gid):
    """A user namespace whose maps send the owner's ids to the sandbox user's; returns an fd of it."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(done_w)
        code = 0 if libc.unshare(CLONE_NEWUSER) == 0 else 1
        os.write(ready_w, b"x")
        os.read(done_r, 1)  # held until the parent has opened the namespace
        os._exit(code)
    os.close(ready_w)
    os.close(done_r)
    os.read(ready_r, 1)
    try:
        if os.readlink(f"/proc/{pid}/ns/user") == os.readlink("/proc/self/ns/user"):
            fail("unshare(CLONE_NEWUSER)", 1)
        # Columns: id inside the namespace (the id on disk), id outside (the id seen through the mount), count.
        with open(f"/proc/{pid}/uid_map", "w") as f:
            f.write(f"{owner_uid} {uid} 1\n")
        with open(f"/proc/{pid}/setgroups", "w") as f:
            f.write("deny")
        with open(f"/proc/{pid}/gid_map", "w") as f:
            f.write(f"{owner_gid} {gid} 1\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(done_w)
        os.waitpid(pid, 0)


def main(argv):
    if len(argv) != 8:
        sys.stdout.write("usage: idmap.py SOURCE TARGET OWNER_UID OWNER_GID SANDBOX_UID SANDBOX_GID READ_ONLY\n")
        sys.exit(2)
    source, target = argv[1], argv[2]
    owner_uid, owner_gid, uid, gid, read_only = (int(v) for v in argv[3:8])
    userns = mapping_namespace(owner_uid, owner_gid, uid, gid)
    tree = libc.syscall(SYS_OPEN_TREE, AT_FDCWD, source.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    if tree < 0:
        fail("open_tree")
    attrs = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if read_only else 0)
    attr = MountAttr(attrs, 0, 0, userns)
    if libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) < 0:
        fail("mount_setattr (idmapped mounts need Linux >= 5.12 and a filesystem that supports them)")
    if libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH) < 0:
        fail("move_mount")


if __name__ == "__main__":
    main(sys.argv)
