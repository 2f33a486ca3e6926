"""Mounts a workspace onto a target from a descriptor opened without following symlinks.

    python3 mount-workspace.py ROOT RELATIVE TARGET OWNER_UID OWNER_GID SANDBOX_UID SANDBOX_GID READ_ONLY
    python3 mount-workspace.py --serve     (one request a line: a JSON array of those 8 arguments)

The service checked the workspace by path (inside the tenant's roots, never Tack's own files),
but a path can change between that check and a mount by name: a session that swaps a directory
of its workspace with a symlink to / would have the next session's mount follow the link
(decision 0021). So the directory is opened once, with openat2 from ROOT (the allowed root it
lies under, itself opened without symlinks) along RELATIVE with RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS: whatever is renamed meanwhile, the descriptor is a directory reached from
ROOT through real directories only, and it must still have the owner the service checked. The
mount is cloned from that descriptor (open_tree), never from a name.

Its attributes are set before it is attached (move_mount onto TARGET, also opened without
symlinks): nosuid and nodev always, read-only for READ_ONLY=1, and, when the owner
(OWNER_UID:OWNER_GID) is not the sandbox user, an ID mapping (Linux >= 5.12, decision 0008):
the owner's files appear as the sandbox user's and what the sandbox user creates is stored as
the owner's. So the target is never visible writable or unmapped, not even for a moment.

Run as root on the sandbox host. On success prints {"dev": D, "ino": I} (the mounted directory's
device and inode, as decimal strings) and exits 0. On failure prints one line naming the failed
step and exits 3 when the workspace is not the directory that was checked (a symlink on its path,
not beneath ROOT, another owner) or 1 for any other failure. With --serve it stays up (the service
keeps one, saving a Python start per mount) and answers each request line with one JSON line:
{"dev": D, "ino": I}, or {"code": 1|2|3, "message": M}; it ends when its input does.
"""

import ctypes
import json
import os
import stat
import sys

# x86_64 and aarch64 share these numbers (the newer syscalls are numbered alike on every architecture).
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_OPENAT2, SYS_MOUNT_SETATTR = 428, 429, 437, 442
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
OPEN_TREE_CLONE = 1
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x2, 0x4, 0x8
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 0x1, 0x2, 0x4, 0x100000
CLONE_NEWUSER = 0x10000000
# The directory is not the one that was checked: the service refuses with sandbox.workspace_changed.
CHANGED = 3

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class Failure(Exception):
    """A failed mount: `code` is the exit code (3: not the directory that was checked)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def fail(step, errno_value=None, code=1):
    say(f"{step}: {os.strerror(errno_value if errno_value is not None else ctypes.get_errno())}", code)


def say(message, code):
    raise Failure(message, code)


def open_directory(dirfd, path, resolve, what, changed=CHANGED):
    """openat2(O_PATH | O_DIRECTORY) under `resolve`; a symlink or an escape on the way exits with `changed`."""
    how = OpenHow(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, resolve)
    for _ in range(8):
        fd = libc.syscall(SYS_OPENAT2, dirfd, path.encode(), ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        errno_value = ctypes.get_errno()
        # EAGAIN: a rename raced a RESOLVE_BENEATH lookup; the kernel asks to try again.
        if errno_value != 11:
            break
    if errno_value == 38:  # ENOSYS
        fail("openat2 (opening a workspace without following symlinks needs Linux >= 5.6)", errno_value)
    # ELOOP: a symlink on the way; EXDEV: a path leading out of the root; ENOTDIR/ENOENT: replaced or gone.
    if errno_value in (40, 18, 20, 2):
        fail(f"{what} is not the directory that was checked (a symlink or another file took its place on the way)", errno_value, changed)
    fail(f"openat2 of {what}", errno_value)


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


def mount(args, opened):
    """Mounts per the 8 arguments; every descriptor it opens goes to `opened` (closed by the caller)."""
    if len(args) != 8:
        say("usage: mount-workspace.py ROOT RELATIVE TARGET OWNER_UID OWNER_GID SANDBOX_UID SANDBOX_GID READ_ONLY", 2)
    root, relative, target = (str(v) for v in args[:3])
    owner_uid, owner_gid, uid, gid, read_only = (int(v) for v in args[3:8])
    if not os.path.isabs(root) or os.path.isabs(relative) or ".." in relative.split("/"):
        say(f"bad arguments: ROOT {root!r} must be absolute and RELATIVE {relative!r} relative without '..'", 2)
    root_fd = open_directory(AT_FDCWD, root, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, f"root {root}")
    opened.append(root_fd)
    fd = root_fd
    if relative:
        fd = open_directory(root_fd, relative, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, f"{relative} under {root}")
        opened.append(fd)
    # The checks the service made by path, made again on the descriptor that will be mounted.
    info = os.fstat(fd)
    if not stat.S_ISDIR(info.st_mode):
        say(f"{relative or root} is no longer a directory", CHANGED)
    if (info.st_uid, info.st_gid) != (owner_uid, owner_gid):
        say(f"{relative or root} is owned by {info.st_uid}:{info.st_gid} now, not by {owner_uid}:{owner_gid} as when it was checked (it was replaced)", CHANGED)
    tree = libc.syscall(SYS_OPEN_TREE, fd, b"", AT_EMPTY_PATH | OPEN_TREE_CLONE | os.O_CLOEXEC)
    if tree < 0:
        fail("open_tree")
    opened.append(tree)
    attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if read_only else 0)
    userns = 0
    if (owner_uid, owner_gid) != (uid, gid):
        attrs |= MOUNT_ATTR_IDMAP
        userns = mapping_namespace(owner_uid, owner_gid, uid, gid)
        opened.append(userns)
    attr = MountAttr(attrs, 0, 0, userns)
    if libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) < 0:
        fail("mount_setattr (idmapped mounts need Linux >= 5.12 and a filesystem that supports them)" if userns else "mount_setattr")
    target_fd = open_directory(AT_FDCWD, target, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, f"target {target}", changed=1)
    opened.append(target_fd)
    if libc.syscall(SYS_MOVE_MOUNT, tree, b"", target_fd, b"", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0:
        fail("move_mount")
    return {"dev": str(info.st_dev), "ino": str(info.st_ino)}


def answer(args):
    """One request's answer: what `mount` returned, or the failure; its descriptors closed either way."""
    opened = []
    try:
        return mount(args, opened)
    except Failure as failure:
        return {"code": failure.code, "message": str(failure)}
    except (ValueError, TypeError, OSError) as error:
        return {"code": 1, "message": f"{type(error).__name__}: {error}"}
    finally:
        for fd in opened:
            os.close(fd)


def serve():
    for line in sys.stdin:
        try:
            args = json.loads(line)
        except ValueError as error:
            args = [f"not JSON: {error}"]
        sys.stdout.write(json.dumps(answer(args if isinstance(args, list) else [])) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        result = answer(sys.argv[1:])
        sys.stdout.write((json.dumps(result) if "dev" in result else result["message"]) + "\n")
        sys.exit(result.get("code", 0))
