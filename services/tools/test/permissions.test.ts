import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { TackError } from "@tack/bus";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { makeWorkspace, type Workspace } from "./support/call.js";

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.remove();
});

/** The last two lines of a result. */
const tail = (content: string) => content.split("\n").slice(-2);
const retryWith = (mode: string) =>
  `To run it anyway, retry this exact call once with "sandbox_permissions": "${mode}" and a "justification" saying why; the user will be asked to approve it.`;

describe("denials", () => {
  it("permissions - write in read-only mode is denied before running, with the two lines", async () => {
    const result = await ws.call("write", { path: "notes.txt", content: "x" }, "read-only");
    expect(result).toMatchObject({
      isError: true,
      content: `Denied: sandbox mode read-only does not allow writing notes.txt.\n${retryWith("workspace-write")}`,
      durationMs: expect.any(Number),
      retries: [],
      replayed: false,
      innerCalls: [],
    });
    expect(result.defined).toBeUndefined();
    expect(ws.sandbox.executed).toHaveLength(0);
  });

  it("permissions - edit in read-only mode is denied before reading or writing", async () => {
    await writeFile(join(ws.root, "e.ts"), "a\n");
    const result = await ws.call("edit", { path: "e.ts", old_string: "a", new_string: "b" }, "read-only");
    expect(result.isError).toBe(true);
    expect(tail(result.content)).toEqual(["Denied: sandbox mode read-only does not allow editing e.ts.", retryWith("workspace-write")]);
    expect(ws.sandbox.executed).toHaveLength(0);
    expect(await readFile(join(ws.root, "e.ts"), "utf8")).toBe("a\n");
  });

  it("permissions - bash that hits a read-only file system in read-only mode ends with the two lines", async () => {
    const result = await ws.call("bash", { command: "echo \"touch: cannot touch 'x': Read-only file system\" >&2; exit 1" }, "read-only");
    expect(result.isError).toBe(true);
    expect(result.content).toBe([
      "stderr:", "touch: cannot touch 'x': Read-only file system", "exit code: 1",
      "Denied: sandbox mode read-only does not allow writing files.", retryWith("workspace-write"),
    ].join("\n"));
  });

  it("permissions - bash network failures in a no-network mode name danger-full-access", async () => {
    for (const error of ["curl: (6) Could not resolve host: example.com", "connect: Network is unreachable", "socket.gaierror: [Errno -3] Temporary failure in name resolution"]) {
      const result = await ws.call("bash", { command: `echo '${error}' >&2; exit 6` }, "workspace-write");
      expect(tail(result.content)).toEqual(["Denied: sandbox mode workspace-write does not allow network access.", retryWith("danger-full-access")]);
    }
    const both = await ws.call("bash", { command: "echo 'Read-only file system' >&2; echo 'Could not resolve host: x' >&2; exit 1" }, "read-only");
    expect(tail(both.content)).toEqual(["Denied: sandbox mode read-only does not allow writing files or network access.", retryWith("danger-full-access")]);
  });

  it("permissions - a denial is flagged even when the command exits 0", async () => {
    const result = await ws.call("bash", { command: "echo 'Read-only file system' >&2; echo carried on" }, "read-only");
    expect(result.isError).toBe(true);
    expect(tail(result.content)[0]).toBe("Denied: sandbox mode read-only does not allow writing files.");
  });

  it("permissions - no denial lines for what the mode allows or for output that only mentions an error", async () => {
    // In workspace-write a read-only file system is the container's root, which no mode makes writable.
    const root = await ws.call("bash", { command: "echo 'touch: /etc/x: Read-only file system' >&2; exit 1" }, "workspace-write");
    expect(root.content).toBe("stderr:\ntouch: /etc/x: Read-only file system\nexit code: 1");
    const online = await ws.call("bash", { command: "echo 'Could not resolve host: nosuch.invalid' >&2; exit 6" }, "danger-full-access");
    expect(online.content).not.toContain("Denied:");
    const printed = await ws.call("bash", { command: "echo 'log: Read-only file system'" }, "read-only");
    expect(printed).toMatchObject({ isError: false, content: "log: Read-only file system\nexit code: 0" });
  });
});

describe("escalated calls", () => {
  it("permissions - a call asking for a mode it was not given never runs", async () => {
    const result = await ws.call("bash", { command: "touch ran", sandbox_permissions: "workspace-write", justification: "needs it" }, "read-only");
    expect(result).toMatchObject({
      isError: true,
      content: "Not run: this call asks for sandbox_permissions workspace-write but was given sandbox mode read-only; only an approved escalation runs under a wider mode.",
    });
    expect(ws.sandbox.ensured).toHaveLength(0);
    expect(ws.sandbox.executed).toHaveLength(0);
    const narrower = await ws.call("write", { path: "f", content: "x", sandbox_permissions: "read-only", justification: "j" }, "workspace-write");
    expect(narrower.content).toMatch(/^Not run: /);
  });

  it("permissions - a call given the mode it asks for runs in that mode's container", async () => {
    const result = await ws.call("write", { path: "f.txt", content: "x", sandbox_permissions: "workspace-write", justification: "write the fix" }, "workspace-write");
    expect(result).toMatchObject({ isError: false, content: "Wrote 1 bytes to f.txt" });
    expect(ws.sandbox.ensured.map((e) => e.mode)).toEqual(["workspace-write"]);
    expect(ws.sandbox.executed.map((e) => e.mode)).toEqual(["workspace-write"]);
    await ws.call("bash", { command: "true" }, "danger-full-access");
    expect(ws.sandbox.executed.map((e) => e.mode)).toEqual(["workspace-write", "danger-full-access"]);
  });

  it("permissions - an unknown sandbox mode is a protocol error", async () => {
    const error = await ws.call("bash", { command: "true" }, "yolo").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TackError);
    expect(error).toMatchObject({ code: "tools.bad_sandbox_mode", message: 'sandbox_mode "yolo" is not a sandbox mode; the caller must send one of read-only, workspace-write, danger-full-access' });
  });

  it("permissions - sandbox_permissions must be a mode", async () => {
    const result = await ws.call("bash", { command: "true", sandbox_permissions: "root" });
    expect(result.content).toBe('Invalid arguments for bash: sandbox_permissions: Invalid option: expected one of "read-only"|"workspace-write"|"danger-full-access"');
  });
});
