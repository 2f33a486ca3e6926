"""Tack exec agent: the main process of every sandbox container.

It runs commands for the sandbox service over its own stdin/stdout, which the service holds
open through a Docker attach, so a command costs a fork/exec instead of a `docker exec`.

Framing, both directions: an 8-byte prefix (big-endian u32 header length, u32 body length),
a JSON header, then the raw body bytes.
  service -> agent  {"op":"hello"}                               kill what an earlier connection left running
                    {"op":"run","id":N,"argv":[..],"cwd":"/workspace","timeout_ms":T,"cap":C}  body = stdin
  agent -> service  {"op":"hello","protocol":P,"pid":PID}
                    {"op":"out","id":N,"fd":1|2}                  body = an output chunk (only the first C bytes per stream)
                    {"op":"exit","id":N,"code":E,"timed_out":B,"truncated":B}

Each command runs in a new session (its own process group). At its timeout the whole group
gets SIGKILL and the exit code is 137. Stdlib only: the image has python3 and nothing else.
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

PROTOCOL = 1
PREFIX = struct.Struct(">II")
# Longest a request may be: the bus limits stdin to well under this.
MAX_FRAME = 4 * 1024 * 1024
CHUNK = 64 * 1024
# A command whose own process has exited but whose children still hold its output open
# is finished this long afterwards, so a stray `sleep 300 &` cannot hold the result.
DRAIN_AFTER_EXIT_S = 0.2

# Where the container's memory cgroup counts OOM kills (cgroup v1, then v2).
OOM_COUNTERS = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")

write_lock = threading.Lock()
running_lock = threading.Lock()
running = {}  # id -> Popen


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
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except FileNotFoundError as error:
        if error.filename == cwd:
            spawn_failure(command_id, f"tack-agent: cannot use working directory {cwd}: {error.strerror}\n", 126)
        else:
            spawn_failure(command_id, f"tack-agent: {argv[0]}: command not found\n", 127)
        return
    except (PermissionError, NotADirectoryError, OSError) as error:
        spawn_failure(command_id, f"tack-agent: cannot run {argv[0]} in {cwd}: {error.strerror}\n", 126)
        return
    with running_lock:
        running[command_id] = process

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
        if finish_by is None and process.poll() is not None:
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
    try:
        process.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        kill_group(process)
        timed_out = True
        process.wait()
    with running_lock:
        running.pop(command_id, None)
    code = process.returncode
    if code == -signal.SIGKILL and not timed_out and oom_before is not None and (oom_kills() or 0) > oom_before:
        send({"op": "out", "id": command_id, "fd": 2}, b"tack-agent: killed by the kernel's out-of-memory killer: the sandbox reached its memory limit\n")
    send({"op": "exit", "id": command_id, "code": 128 - code if code < 0 else code, "timed_out": timed_out, "truncated": truncated})


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
        else:
            sys.stderr.write(f"tack-agent: unknown op {header['op']!r}\n")


if __name__ == "__main__":
    # Not dumpable: commands run as the same user, and must not reach this process's
    # channel through /proc/<pid>/fd or its memory through ptrace or /proc/<pid>/mem.
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    os.chdir("/")
    serve()
