"""Tack exec agent: PID 1 of every sandbox container.

It runs commands for the sandbox service over its own stdin/stdout, which the service holds
open through a Docker attach, so a command costs a fork/exec instead of a `docker exec`.

Framing, both directions: an 8-byte prefix (big-endian u32 header length, u32 body length),
a JSON header, then the raw body bytes.
  service -> agent  {"op":"hello"}                               kill what an earlier connection left running
                    {"op":"run","id":N,"argv":[..],"cwd":"/workspace","timeout_ms":T,"cap":C}  body = stdin
                    {"op":"ps","id":N}                           list the container's processes
                    {"op":"spawn","id":N,"argv":[..],"cwd":"/workspace","env":{..}}  a long-lived process (protocol 3)
                    {"op":"in","id":N,"eof":B}                   body = bytes for a spawned process's stdin; eof closes it
                    {"op":"kill","id":N}                         SIGKILL a spawned process's group
  agent -> service  {"op":"hello","protocol":P,"pid":PID}
                    {"op":"spawned","id":N,"pid":PID}            a spawned process runs (its output and exit follow as for run)
                    {"op":"out","id":N,"fd":1|2}                  body = an output chunk (only the first C bytes per stream)
                    {"op":"exit","id":N,"code":E,"timed_out":B,"truncated":B}
                    {"op":"ps","id":N,"processes":[{"pid":P,"ppid":P,"command":S,"state":S},..],"truncated":B}

Each command runs in a new session (its own process group). At its timeout the whole group
gets SIGKILL and the exit code is 137. A spawned process has no timeout and no output cap: it
lives until it exits, is killed, or a new connection says hello; its environment is PATH, HOME
and LANG of the agent's plus the request's `env` (decision 0016). Stdlib only: the image has python3 and nothing else.

The channel is what the service trusts, and commands run as the agent's own user, so the agent
keeps it out of their reach (docs/decisions/0010-agent-channel.md): it is PID 1 (no init in
front of it holding the channel), not dumpable, its channel's pipes carry mode 0, it runs with
an empty environment, and it reaps every process that ends up its child.
"""

import ctypes
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time

PROTOCOL = 3
PREFIX = struct.Struct(">II")
# Longest a request may be: the bus limits stdin to well under this.
MAX_FRAME = 4 * 1024 * 1024
CHUNK = 64 * 1024
# A command whose own process has exited but whose children still hold its output open
# is finished this long afterwards, so a stray `sleep 300 &` cannot hold the result.
DRAIN_AFTER_EXIT_S = 0.2
# A process listing keeps this much of each command line and this many processes (more than
# either runtime's pids limit allows), so that it always fits in one bus reply.
MAX_COMMAND = 1024
MAX_PROCESSES = 512
# How the re-executed agent receives the commands' environment (see protect_environment).
ENV_FLAG = "--env"
PR_SET_DUMPABLE = 4

# Where the container's memory cgroup counts OOM kills (cgroup v1, then v2).
OOM_COUNTERS = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")

write_lock = threading.Lock()
running_lock = threading.Lock()
running = {}  # id -> Popen
# Held while a command is forked and its pid registered, and while any child is reaped: so the
# reaper never collects a command's status before the command's thread has said it wants it.
children_lock = threading.Lock()
exits = {}  # pid -> Exit, for the processes the agent started itself
spawned = threading.Event()
child_env = {}
streams_lock = threading.Lock()
streams = {}  # id -> Stream, the spawned processes
# What a spawned process's environment takes from the agent's (the rest comes from its request).
SPAWN_PASSED_ENV = ("PATH", "HOME", "LANG")
# Input queued for a spawned process that does not read it; past this the process is killed.
MAX_PENDING_INPUT = 16 * 1024 * 1024


class Exit:
    """The exit status of a process the agent started, delivered by the reaper."""

    __slots__ = ("done", "code")

    def __init__(self):
        self.done = threading.Event()
        self.code = None  # as Popen.returncode: the exit code, or -N for signal N


def send(header, body=b""):
    data = json.dumps(header, separators=(",", ":")).encode()
    frame = PREFIX.pack(len(data), len(body)) + data + body
    with write_lock:
        view = memoryview(frame)
        while view:
            written = os.write(1, view)
            view = view[written:]


def read_exactly(n):
    parts = []
    while n > 0:
        part = os.read(0, min(n, 1 << 20))
        if not part:
            return None
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def oom_kills():
    for path in OOM_COUNTERS:
        try:
            with open(path) as counters:
                for line in counters:
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def reap():
    """Reaps every child of PID 1 (commands, and the orphans the kernel re-parents to it)."""
    while True:
        spawned.clear()
        try:
            # WNOWAIT: learn which child ended without reaping it yet; it is reaped under the lock below.
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            # No child at all. Orphans only come from descendants, so the next one follows a spawn;
            # the timeout covers processes that got here another way (a `docker exec` from the host).
            spawned.wait(1.0)
            continue
        if info is None:
            continue
        with children_lock:
            try:
                # WNOHANG: should the pid already be gone and reused by a live process, never block holding the lock.
                pid, status = os.waitpid(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                # Popen reaped it itself (a command that failed to execute).
                continue
            waiter = exits.pop(pid, None) if pid else None
        if waiter is not None:
            waiter.code = os.waitstatus_to_exitcode(status)
            waiter.done.set()


def spawn_failure(command_id, message, code):
    send({"op": "out", "id": command_id, "fd": 2}, message.encode())
    send({"op": "exit", "id": command_id, "code": code, "timed_out": False, "truncated": False})


def run(request, stdin):
    command_id = request["id"]
    argv = request["argv"]
    cwd = request.get("cwd") or "/workspace"
    cap = int(request["cap"])
    deadline = time.monotonic() + int(request["timeout_ms"]) / 1000
    oom_before = oom_kills()
    try:
        with children_lock:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=child_env,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                # The channel is fds 0-1 of this process only: the command gets its own pipes and nothing else.
                close_fds=True,
            )
            waiter = exits[process.pid] = Exit()
    except FileNotFoundError as error:
        if error.filename == cwd:
            spawn_failure(command_id, f"tack-agent: cannot use working directory {cwd}: {error.strerror}\n", 126)
        else:
            spawn_failure(command_id, f"tack-agent: {argv[0]}: command not found\n", 127)
        return
    except (PermissionError, NotADirectoryError, OSError) as error:
        spawn_failure(command_id, f"tack-agent: cannot run {argv[0]} in {cwd}: {error.strerror}\n", 126)
        return
    spawned.set()
    with running_lock:
        running[command_id] = process
    try:
        finish(command_id, process, waiter, stdin, cap, deadline, oom_before)
    finally:
        with running_lock:
            running.pop(command_id, None)
        # Popen's own bookkeeping: one left without a return code is polled by every later Popen,
        # which would reap (and so steal) whatever now has its pid.
        if process.returncode is None:
            process.returncode = waiter.code if waiter.code is not None else -signal.SIGKILL


def finish(command_id, process, waiter, stdin, cap, deadline, oom_before):
    selector = selectors.DefaultSelector()
    sent = {1: 0, 2: 0}
    truncated = False
    for fd, pipe in ((1, process.stdout), (2, process.stderr)):
        os.set_blocking(pipe.fileno(), False)
        selector.register(pipe.fileno(), selectors.EVENT_READ, fd)
    pending = memoryview(stdin)
    if stdin:
        os.set_blocking(process.stdin.fileno(), False)
        selector.register(process.stdin.fileno(), selectors.EVENT_WRITE, 0)

    timed_out = False
    finish_by = None  # set once the process exited or was killed: how long its output may still come
    while selector.get_map():
        now = time.monotonic()
        if not timed_out and now >= deadline:
            kill_group(process)
            timed_out = True
            finish_by = now + DRAIN_AFTER_EXIT_S
        if finish_by is not None and now >= finish_by:
            break
        wait = (finish_by if finish_by is not None else deadline) - now
        events = selector.select(timeout=min(max(wait, 0), 0.05))
        if finish_by is None and waiter.done.is_set():
            finish_by = time.monotonic() + DRAIN_AFTER_EXIT_S
        for key, _ in events:
            if key.data == 0:
                try:
                    pending = pending[os.write(key.fd, pending[:CHUNK]):]
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    # The command closed its input (or exited) without reading all of it.
                    pending = pending[:0]
                if not pending:
                    selector.unregister(key.fd)
                    process.stdin.close()
                continue
            try:
                chunk = os.read(key.fd, CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                selector.unregister(key.fd)
                continue
            room = cap - sent[key.data]
            if len(chunk) > room:
                truncated = True
                chunk = chunk[:room]
            if chunk:
                sent[key.data] += len(chunk)
                send({"op": "out", "id": command_id, "fd": key.data}, chunk)
    selector.close()
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None and not pipe.closed:
            pipe.close()

    # The output is closed (or abandoned); the process itself may still run until the deadline.
    if not waiter.done.wait(max(deadline - time.monotonic(), 0)):
        kill_group(process)
        timed_out = True
        waiter.done.wait()
    code = process.returncode = waiter.code
    if code == -signal.SIGKILL and not timed_out and oom_before is not None and (oom_kills() or 0) > oom_before:
        send({"op": "out", "id": command_id, "fd": 2}, b"tack-agent: killed by the kernel's out-of-memory killer: the sandbox reached its memory limit\n")
    send({"op": "exit", "id": command_id, "code": 128 - code if code < 0 else code, "timed_out": timed_out, "truncated": truncated})


class Stream:
    """A spawned process: its stdin is fed by a writer thread so that the channel never blocks on it."""

    __slots__ = ("process", "queue", "pending", "cond", "closed")

    def __init__(self, process):
        self.process = process
        self.queue = []  # bytes, or None for end of input
        self.pending = 0
        self.cond = threading.Condition()
        self.closed = False

    def put(self, data, eof):
        with self.cond:
            if self.closed:
                return True
            if data:
                self.pending += len(data)
                if self.pending > MAX_PENDING_INPUT:
                    return False
                self.queue.append(data)
            if eof:
                self.queue.append(None)
            self.cond.notify()
        return True

    def write_loop(self):
        stdin = self.process.stdin
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                item = self.queue.pop(0)
                if item is not None:
                    self.pending -= len(item)
            if item is None:
                break
            try:
                view = memoryview(item)
                while view:
                    view = view[os.write(stdin.fileno(), view):]
            except (ValueError, OSError):
                break
        with self.cond:
            self.closed = True
            self.queue.clear()
        try:
            stdin.close()
        except OSError:
            pass


def spawn(request):
    """Starts a long-lived process; its output is sent as it comes, its exit code at the end."""
    command_id = request["id"]
    argv = request["argv"]
    cwd = request.get("cwd") or "/workspace"
    env = {name: child_env[name] for name in SPAWN_PASSED_ENV if name in child_env}
    env.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
    try:
        with children_lock:
            process = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True, bufsize=0,
            )
            waiter = exits[process.pid] = Exit()
    except FileNotFoundError as error:
        if error.filename == cwd:
            spawn_failure(command_id, f"tack-agent: cannot use working directory {cwd}: {error.strerror}\n", 126)
        else:
            spawn_failure(command_id, f"tack-agent: {argv[0]}: command not found\n", 127)
        return
    except (PermissionError, NotADirectoryError, OSError) as error:
        spawn_failure(command_id, f"tack-agent: cannot run {argv[0]} in {cwd}: {error.strerror}\n", 126)
        return
    spawned.set()
    stream = Stream(process)
    with streams_lock:
        streams[command_id] = stream
    with running_lock:
        running[command_id] = process
    send({"op": "spawned", "id": command_id, "pid": process.pid})
    try:
        threading.Thread(target=stream.write_loop, daemon=True).start()
        pump(command_id, process, waiter)
    finally:
        with streams_lock:
            streams.pop(command_id, None)
        with running_lock:
            running.pop(command_id, None)
        stream.put(b"", True)
        if process.returncode is None:
            process.returncode = waiter.code if waiter.code is not None else -signal.SIGKILL


def pump(command_id, process, waiter):
    """Sends a spawned process's output until it exited (and its group is gone), then its exit code."""
    selector = selectors.DefaultSelector()
    for fd, pipe in ((1, process.stdout), (2, process.stderr)):
        os.set_blocking(pipe.fileno(), False)
        selector.register(pipe.fileno(), selectors.EVENT_READ, fd)
    finish_by = None
    while selector.get_map():
        now = time.monotonic()
        if finish_by is not None and now >= finish_by:
            break
        events = selector.select(timeout=0.05 if finish_by is not None else 1.0)
        if finish_by is None and waiter.done.is_set():
            finish_by = time.monotonic() + DRAIN_AFTER_EXIT_S
        for key, _ in events:
            try:
                chunk = os.read(key.fd, CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                selector.unregister(key.fd)
                continue
            send({"op": "out", "id": command_id, "fd": key.data}, chunk)
    selector.close()
    for pipe in (process.stdout, process.stderr):
        pipe.close()
    # Whatever it left behind in its group goes with it.
    kill_group(process)
    waiter.done.wait()
    code = process.returncode = waiter.code
    send({"op": "exit", "id": command_id, "code": 128 - code if code < 0 else code, "timed_out": False, "truncated": False})


def stream_input(header, body):
    with streams_lock:
        stream = streams.get(header.get("id"))
    if stream is None:
        return
    if not stream.put(body, header.get("eof") is True):
        sys.stderr.write(f"tack-agent: spawned process {header.get('id')} left over {MAX_PENDING_INPUT} bytes of input unread; killing it\n")
        kill_group(stream.process)


def stream_kill(header):
    with streams_lock:
        stream = streams.get(header.get("id"))
    if stream is not None:
        kill_group(stream.process)


def list_processes():
    """Every live process of the container but this one, read from /proc; zombies are left out."""
    own = os.getpid()
    processes = []
    # Under the lock no command is between fork and exec, where it would still carry this process's command line.
    with children_lock:
        for name in os.listdir("/proc"):
            # Identified by pid only: a command line can claim to be anything, this agent included.
            if not name.isdigit() or int(name) == own:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as stat_file:
                    stat = stat_file.read()
                with open(f"/proc/{name}/cmdline", "rb") as cmdline_file:
                    cmdline = cmdline_file.read(MAX_COMMAND + 1)
            except OSError:
                continue  # it ended meanwhile
            # The name in parentheses may itself hold spaces and parentheses: the fields follow the last ')'.
            close = stat.rfind(b")")
            fields = stat[close + 2:].split()
            if close < 0 or len(fields) < 2:
                continue
            state = fields[0].decode("ascii", "replace")
            if state in ("Z", "X", "x"):
                continue
            args = cmdline.rstrip(b"\0")
            command = args.replace(b"\0", b" ") if args else b"[" + stat[stat.find(b"(") + 1:close] + b"]"
            processes.append({
                "pid": int(name),
                "ppid": int(fields[1]),
                "command": command[:MAX_COMMAND].decode("utf-8", "replace"),
                "state": state,
            })
    processes.sort(key=lambda process: process["pid"])
    return processes[:MAX_PROCESSES], len(processes) > MAX_PROCESSES


def serve():
    while True:
        prefix = read_exactly(PREFIX.size)
        if prefix is None:
            return
        header_length, body_length = PREFIX.unpack(prefix)
        if header_length + body_length > MAX_FRAME:
            sys.stderr.write(f"tack-agent: frame of {header_length + body_length} bytes is over the limit; exiting\n")
            return
        header = read_exactly(header_length)
        body = read_exactly(body_length) if body_length else b""
        if header is None or body is None:
            return
        header = json.loads(header)
        if header["op"] == "hello":
            # A new connection: commands of the previous one have no one to report to.
            with running_lock:
                for process in running.values():
                    kill_group(process)
            send({"op": "hello", "protocol": PROTOCOL, "pid": os.getpid()})
        elif header["op"] == "run":
            try:
                threading.Thread(target=run, args=(header, body), daemon=True).start()
            except RuntimeError as error:
                # Threads count against the pids limit: a fork bomb in another command must not end the agent.
                spawn_failure(header["id"], f"tack-agent: cannot start {header['argv'][0]}: {error} (the sandbox is at its process limit)\n", 126)
        elif header["op"] == "spawn":
            try:
                threading.Thread(target=spawn, args=(header,), daemon=True).start()
            except RuntimeError as error:
                spawn_failure(header["id"], f"tack-agent: cannot start {header['argv'][0]}: {error} (the sandbox is at its process limit)\n", 126)
        elif header["op"] == "in":
            stream_input(header, body)
        elif header["op"] == "kill":
            stream_kill(header)
        elif header["op"] == "ps":
            # Answered here rather than on a thread: it must work when the pids limit leaves no room for one.
            processes, truncated = list_processes()
            send({"op": "ps", "id": header["id"], "processes": processes, "truncated": truncated})
        else:
            sys.stderr.write(f"tack-agent: unknown op {header['op']!r}\n")


def protect_environment():
    """Re-executes the agent with an empty environment, passing the commands' environment in argv.

    gVisor (the 2022 runsc) lets every process of the container read /proc/1/environ, whatever
    dumpable says. The values are the ones every command gets in its own environment anyway,
    so argv (readable by all, as always) is no disclosure; the environment block is left empty.
    """
    if sys.argv[1:2] == [ENV_FLAG]:
        child_env.update(pair.split("=", 1) for pair in sys.argv[2:] if "=" in pair)
        return
    pairs = [f"{name}={value}" for name, value in os.environ.items()]
    os.execve(sys.executable, [sys.executable, "-I", "-S", "-B", os.path.abspath(__file__), ENV_FLAG, *pairs], {})


def protect_channel():
    """Puts the channel out of the reach of commands, which run as this process's own user.

    Not dumpable: the kernel makes this process's /proc/<pid> files root's, so fd, environ and
    mem cannot be opened, and ptrace needs CAP_SYS_PTRACE, which no process here has; exec gives
    every command its dumpable flag back. Mode 0 on the channel's pipes: gVisor's /proc/<pid>/fd
    ignores dumpable and opens the pipe itself, checked against the pipe's own mode (0600, owned
    by the container's user). As PID 1, the kernel drops every signal sent from inside the
    container that the agent has no handler for; Python's SIGINT handler would let one through.
    Any failure ends the agent: it never serves a channel it could not protect.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(errno)}")
    for fd in (0, 1, 2):
        os.fchmod(fd, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# The set-id rule's system calls, per architecture: name -> (number, index of the flags argument
# or None, index of the mode argument). A mode with S_ISUID or S_ISGID is refused; for the open
# family only when the flags create a file (O_CREAT, O_TMPFILE).
SET_ID_CALLS = {
    "x86_64": (0xC000003E, {"chmod": (90, None, 1), "fchmod": (91, None, 1), "fchmodat": (268, None, 2), "fchmodat2": (452, None, 2),
                            "open": (2, 1, 2), "openat": (257, 2, 3), "creat": (85, None, 1), "mknod": (133, None, 1), "mknodat": (259, None, 2)}),
    "aarch64": (0xC00000B7, {"fchmod": (52, None, 1), "fchmodat": (53, None, 2), "fchmodat2": (452, None, 2),
                             "openat": (56, 2, 3), "mknodat": (33, None, 2)}),
}
SYS_OPENAT2, SYS_IO_URING_SETUP = 437, 425  # numbered alike on both
X32_SYSCALL_BIT = 0x40000000
S_ISUID_ISGID = 0o6000
O_CREAT, O_TMPFILE_BIT = 0o100, 0o20000000  # alike on both


def forbid_set_id():
    """Installs a seccomp filter on the agent, inherited by every command, that refuses set-id bits.

    What the sandbox writes in a workspace owned by someone else is stored as that owner's (an ID
    mapping), so a set-uid file made here would be a set-uid file of root's on the host, whatever
    nosuid says inside (decision 0021). So chmod and its kin with S_ISUID or S_ISGID in the mode,
    and files created with them (open, openat, creat, mknod), fail with EPERM; openat2, whose mode
    a filter cannot read, fails with ENOSYS (callers fall back to openat); io_uring, whose requests
    no filter sees, with EPERM; other ABIs (i386, x32) kill the process. Filters stack and cannot
    be removed; no-new-privileges (set by the backend, and here) lets an unprivileged process
    install one. Any failure ends the agent: it never runs commands without the filter.
    """
    machine = os.uname().machine
    if machine not in SET_ID_CALLS:
        raise OSError(0, f"no set-id filter for architecture {machine}; the sandbox runs only on x86_64 and aarch64")
    arch, calls = SET_ID_CALLS[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38
    # Instructions as (code, true target, false target, k); targets are labels resolved below.
    program = [(ld, None, None, 4), (jeq, "nr", "kill", arch), ("nr", None, None, None), (ld, None, None, 0)]
    if machine == "x86_64":
        program.append((jge, "kill", "dispatch", X32_SYSCALL_BIT))
    program.append(("dispatch", None, None, None))
    program += [(jeq, "deny-nosys", "next", SYS_OPENAT2), ("next", None, None, None), (jeq, "deny", "next", SYS_IO_URING_SETUP), ("next", None, None, None)]
    for name, (number, _, _) in calls.items():
        program += [(jeq, name, "next", number), ("next", None, None, None)]
    program.append((ret, None, None, allow))
    low = lambda index: 16 + 8 * index  # the low 32 bits of argument `index` (little-endian)
    for name, (_, flags, mode) in calls.items():
        program.append((name, None, None, None))
        if flags is not None:
            program += [(ld, None, None, low(flags)), (jset, "mode", "allow", O_CREAT | O_TMPFILE_BIT), ("mode", None, None, None)]
        program += [(ld, None, None, low(mode)), (jset, "deny", "allow", S_ISUID_ISGID)]
    program += [("deny", None, None, None), (ret, None, None, eperm), ("deny-nosys", None, None, None), (ret, None, None, enosys),
                ("kill", None, None, None), (ret, None, None, kill), ("allow", None, None, None), (ret, None, None, allow)]
    # Resolve each target to the first instruction after the next occurrence of its label.
    instructions = []
    for position, (code, true, false, k) in enumerate(program):
        if isinstance(code, str):
            continue
        def target(label):
            if label is None:
                return 0
            later = program[position + 1:]
            at = next(i for i, entry in enumerate(later) if entry[0] == label)
            skipped = sum(1 for entry in later[:at] if not isinstance(entry[0], str))
            if skipped > 255:
                raise OSError(0, "set-id filter too long")
            return skipped
        instructions.append((code, target(true), target(false), k))

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(instructions))(*(SockFilter(*instruction) for instruction in instructions))
    fprog = SockFprog(len(instructions), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    for what, result in (("PR_SET_NO_NEW_PRIVS", lambda: libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)),
                         ("PR_SET_SECCOMP", lambda: libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0))):
        if result() != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl({what}) failed: {os.strerror(errno)}")


if __name__ == "__main__":
    protect_environment()
    protect_channel()
    forbid_set_id()
    os.chdir("/")
    threading.Thread(target=reap, name="reaper", daemon=True).start()
    serve()
