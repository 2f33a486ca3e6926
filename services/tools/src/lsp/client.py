"""The lsp tool's per-call client, run in the sandbox as `python3 -I -S -c <this>`.

Python rather than node: it starts in about 10 ms instead of 100, and every call pays it.
stdin: {"hash", "broker", "request", "startTimeoutMs"}. It sends `request` to the broker on
/tmp/tack-lsp/broker-<hash>.sock, starting the broker (source `broker`, written beside it) when
none listens, and prints the broker's one-line JSON answer. Its own failures
are answers too ({"ok": false, "error": {"kind": "broker_failed" | "no_node", ...}}), with the
tail of the broker's log.
"""

import fcntl
import json
import os
import socket
import subprocess
import sys
import time

DIR = "/tmp/tack-lsp"
payload = json.loads(sys.stdin.buffer.read())
key = payload["hash"]
address = f"{DIR}/broker-{key}.sock"
log_file = f"{DIR}/broker-{key}.log"
message = json.dumps(payload["request"]).encode() + b"\n"


def failure(text, kind="broker_failed"):
    try:
        with open(log_file, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(log.tell() - 2000, 0))
            tail = log.read().decode("utf-8", "replace")
    except OSError:
        tail = ""
    return json.dumps({"ok": False, "error": {"kind": kind, "message": text, "stderr": tail}})


def ask():
    """The broker's answer; raises ConnectionRefusedError or FileNotFoundError when none listens."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(address)
        chunks = []
        try:
            connection.sendall(message)
            while chunk := connection.recv(65536):
                chunks.append(chunk)
        except OSError as error:
            return failure(f"the broker closed the connection mid-request ({error})")
    data = b"".join(chunks).decode("utf-8", "replace").strip()
    try:
        json.loads(data)
    except ValueError:
        return failure(f"the broker went away mid-request{' after ' + json.dumps(data[:200]) if data else ''}")
    return data


def start():
    """Writes the broker's source (unless that exact copy is there) and starts it in its own session."""
    path = f"{DIR}/broker-{key}.mjs"
    source = payload["broker"].encode()
    try:
        with open(path, "rb") as current:
            same = current.read() == source
    except OSError:
        same = False
    if not same:
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "wb") as out:
            out.write(source)
        os.replace(temporary, path)
    with open(log_file, "ab") as log:
        return subprocess.Popen(["node", path, key], stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/", start_new_session=True)


def main():
    try:
        return ask()
    except (ConnectionRefusedError, FileNotFoundError):
        pass
    os.makedirs(DIR, mode=0o700, exist_ok=True)
    # One starter at a time (calls can run in parallel): the lock goes with its holder, so it is never stale.
    with open(f"{DIR}/broker-{key}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return ask()
        except (ConnectionRefusedError, FileNotFoundError):
            pass
        # A socket nobody listens on is what a dead broker left.
        try:
            os.unlink(address)
        except FileNotFoundError:
            pass
        try:
            broker = start()
        except FileNotFoundError:
            return failure("node is not installed in this sandbox", "no_node")
        deadline = time.monotonic() + payload["startTimeoutMs"] / 1000
        while True:
            time.sleep(0.02)
            try:
                return ask()
            except (ConnectionRefusedError, FileNotFoundError):
                pass
            code = broker.poll()
            if code is not None:
                return failure(f"the broker exited ({code}) before listening")
            if time.monotonic() > deadline:
                return failure(f"the broker did not listen within {payload['startTimeoutMs'] / 1000:g} s")


sys.stdout.write(main() + "\n")
