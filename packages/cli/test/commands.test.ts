// `tack run` and `tack events` against a fake gateway whose events and errors carry terminal
// escape sequences: nothing raw may reach stdout or stderr, and --json must stay exact.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const BIN = fileURLToPath(new URL("../bin/tack.js", import.meta.url));
// eslint-disable-next-line no-control-regex -- the test looks for control characters
const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;
const scratch = mkdtempSync(join(tmpdir(), "tack-cli-commands-"));

// The log the fake gateway streams, in the gateway's JSON form.
const EVENTS = [
  { seq: 1, type: "user/message", source: "gateway", userMessage: { text: "hi \u001b]0;title\u0007" } },
  { seq: 2, type: "assistant/message", source: "loop", assistantMessage: { turn: 1, step: 1, content: "Sure \u009b2J \u202eevil", toolCalls: [{ id: "c1", name: "bash", arguments: "{\"command\":\"ls\"}" }] } },
  { seq: 3, type: "tool/call", source: "loop", toolCall: { callId: "c1", name: "bash", arguments: "{\"command\":\"ls\"}" } },
  { seq: 4, type: "tool/result", source: "tools", toolResult: { callId: "c1", name: "bash", content: "a\u001b]52;c;eA==\u0007\nb\u001b[1A\u001b[2K", isError: false } },
  { seq: 5, type: "turn/end", source: "loop", turnEnd: { turn: 1, reason: "completed", steps: 1 } },
];

let server: Server;
let url: string;

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => { body += chunk.toString(); });
    req.on("end", () => {
      const json = (status: number, value: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value));
      if (req.method === "POST" && req.url === "/v1/sessions") {
        const model = (JSON.parse(body) as { model: string }).model;
        if (model.includes("outside")) {
          return json(400, { error: { code: "llm.bad_script", message: `script ${model.slice("scripted:".length)} is outside the script directories (/srv/tack/examples, /srv/tack/.tack/scripts); put the file in one of them, or add its directory to models.script_dirs of the operator configuration` } });
        }
        if (model.includes("hostile")) return json(502, { error: { code: "loop.failed", message: "the loop failed \u001b]0;pwned\u0007\u009b2J" } });
        return json(201, { id: "s1" });
      }
      if (req.method === "POST" && req.url === "/v1/sessions/s1/messages") return json(202, { seq: 1, turn: 1 });
      if (req.method === "GET" && req.url?.startsWith("/v1/sessions/s1/events")) {
        res.writeHead(200, { "content-type": "text/event-stream" });
        for (const event of EVENTS) res.write(`id: ${event.seq}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
        return res.end();
      }
      json(404, { error: { code: "gateway.not_found", message: "no such route" } });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  for (const name of ["hello.json", "outside.json", "hostile.json"]) writeFileSync(join(scratch, name), "{}");
});
afterAll(() => {
  server?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** Runs the real `tack` executable against the fake gateway (asynchronously: the gateway lives in this process). */
function tack(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("TACK_") && key !== "NATS_URL" && key !== "NO_COLOR"));
  const child = spawn(process.execPath, [BIN, ...args], { cwd: scratch, env: { ...base, TACK_GATEWAY_URL: url, TACK_API_KEY: "k" } });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => { stdout += chunk.toString(); });
  child.stderr.on("data", (chunk: Buffer) => { stderr += chunk.toString(); });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

describe("commands", () => {
  it("commands - tack run shows escapes from the model and tools visibly, on stdout and stderr", async () => {
    const result = await tack(["run", "hi", "--model", "scripted:hello.json", "--workspace", "."]);
    expect(result.code).toBe(0);
    expect(result.stderr).toBe(`session s1 · scripted:${join(scratch, "hello.json")} · ${scratch}\nsession s1: turn 1 completed · every event: tack events s1 --json\n`);
    expect(result.stdout).not.toMatch(RAW_CONTROL);
    expect(result.stdout).toContain("Sure <U+009B>2J <U+202E>evil");
    expect(result.stdout).toContain("    a␛]52;c;eA==␇\n    b␛[1A␛[2K");
  }, 30_000);

  it("commands - tack run --json and tack events --json print exactly the events, with no raw control", async () => {
    for (const args of [["run", "hi", "--model", "scripted:hello.json", "--workspace", ".", "--json"], ["events", "s1", "--json"]]) {
      const result = await tack(args);
      expect(result.code).toBe(0);
      expect(result.stdout).not.toMatch(RAW_CONTROL);
      expect(result.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as unknown)).toEqual(EVENTS);
    }
  }, 30_000);

  it("commands - tack events lines show controls visibly", async () => {
    const result = await tack(["events", "s1"]);
    expect(result.code).toBe(0);
    expect(result.stdout).not.toMatch(RAW_CONTROL);
    expect(result.stdout).toContain("user/message       hi ␛]0;title␇");
  }, 30_000);

  it("commands - a script outside the llm service's directories is refused naming the flag, the file and the directories", async () => {
    const result = await tack(["run", "hi", "--model", "scripted:outside.json", "--workspace", "."]);
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(`tack: Tack refused --model scripted:outside.json: script ${join(scratch, "outside.json")} is outside the script directories (/srv/tack/examples, /srv/tack/.tack/scripts); put the file in one of them, or add its directory to models.script_dirs of the operator configuration\n`);
  }, 30_000);

  it("commands - an error message from the gateway is printed with its controls shown", async () => {
    const result = await tack(["run", "hi", "--model", "scripted:hostile.json", "--workspace", "."]);
    expect(result.code).toBe(1);
    expect(result.stderr).not.toMatch(RAW_CONTROL);
    expect(result.stderr).toBe("tack: the loop failed ␛]0;pwned␇<U+009B>2J\n");
  }, 30_000);
});
