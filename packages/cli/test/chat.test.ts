// `tack chat` through a real pseudo-terminal (util-linux `script` gives the CLI a PTY; the test
// types into it) against every service process of a real Tack (the launcher `tack up` uses) on
// the machine's NATS JetStream and Docker, with a scripted model.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stopWaiting, waitFor } from "@tack/testkit";
import { ApiStack } from "../../../test/e2e/support/api-stack.js";

const BIN = fileURLToPath(new URL("../bin/tack.js", import.meta.url));

let stack: ApiStack;

beforeAll(async () => {
  stack = await ApiStack.launch("chat");
}, 180_000);

afterAll(() => stack?.stop(), 60_000);

/** Terminal output without escape sequences and carriage returns: what a person reads. */
function readable(raw: string): string {
  // eslint-disable-next-line no-control-regex -- removing the terminal's control sequences is the point
  return raw.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, "").replace(/\u001b\][^\u0007]*\u0007/g, "").replace(/\r/g, "");
}

/** `tack` in a pseudo-terminal: what it printed, and keys typed into it. */
class Terminal {
  readonly child: ChildProcessWithoutNullStreams;
  raw = "";
  #mark = 0;
  readonly exited: Promise<number | null>;
  #exitCode: number | null | undefined;

  constructor(args: string[], cwd: string) {
    const base = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("TACK_") && key !== "NO_COLOR"));
    const command = [process.execPath, BIN, ...args].map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ");
    this.child = spawn("script", ["-q", "-e", "-c", command, "/dev/null"], {
      cwd, env: { ...base, TERM: "xterm", COLUMNS: "200", TACK_GATEWAY_URL: stack.tack.gatewayUrl, TACK_API_KEY: stack.tack.apiKey },
    });
    this.child.stdout.on("data", (chunk: Buffer) => { this.raw += chunk.toString(); });
    this.child.stderr.on("data", (chunk: Buffer) => { this.raw += chunk.toString(); });
    this.exited = new Promise((resolve) => this.child.on("close", (code) => {
      this.#exitCode = code;
      resolve(code);
    }));
  }

  /** Everything printed, readable. */
  get text(): string {
    return readable(this.raw);
  }

  /** Waits until `what` was printed after the last match; later waits look after it. */
  async expect(what: string | RegExp, timeoutMs = 60_000): Promise<string> {
    return waitFor(`${String(what)} on the terminal`, () => {
      const text = this.text;
      const rest = text.slice(this.#mark);
      const at = typeof what === "string" ? rest.indexOf(what) : rest.search(what);
      if (at < 0) {
        const problem = `the terminal shows since the last match:\n${rest.slice(-2000)}`;
        if (this.#exitCode !== undefined) stopWaiting(new Error(`tack exited (code ${this.#exitCode}); ${problem}`));
        throw new Error(problem);
      }
      const matched = typeof what === "string" ? what : rest.slice(at).match(what)![0];
      this.#mark += at + matched.length;
      return rest.slice(0, at + matched.length);
    }, { timeoutMs, intervalMs: 100 });
  }

  /** Types text (a line ends with Enter: `\r`, as a terminal sends it). */
  type(text: string): void {
    this.child.stdin.write(text);
  }
}

describe("tack chat", () => {
  it("tack chat - in a pseudo-terminal: a streamed reply, an approval answered inline, /cost, /details, Ctrl-C in a slow turn, exit, and --resume shows the history", async () => {
    const ws = stack.workspace("chat");
    const model = stack.script("chat", [
      // Turn 1: asks to leave read-only, then writes and answers.
      {
        content: "I'll create the file x.",
        tool_calls: [{ name: "bash", arguments: { command: "touch x && echo made x", sandbox_permissions: "workspace-write", justification: "the user asked for the file x" } }],
      },
      { content: "Created x in the workspace." },
      // Turn 2: a slow step (cancelled after it, so its next reply is never asked for).
      { content: "Taking my time.", tool_calls: [{ name: "bash", arguments: { command: "sleep 4; echo slept once" } }] },
      // Turn 3: a question with numbered options.
      { tool_calls: [{ name: "ask_user_question", arguments: { questions: [{ header: "Runtime", question: "Which runtime?", options: [{ label: "node" }, { label: "deno" }] }] } }] },
      { content: "Going with the answer." },
      // /compact in the fork: the summary request holds the 5 replies above.
      { content: "The user had x created, cancelled a slow step and chose deno." },
    ]);

    const chat = new Terminal(["chat", "--model", model, "--workspace", ws], ws);
    const header = await chat.expect(/session (\S+) · scripted:\S+ · /, 90_000);
    const id = /session (\S+) · /.exec(header)![1]!;
    await chat.expect("› ");

    chat.type("/compact\r");
    await chat.expect("nothing to compact: the model has not replied in this session yet");
    await chat.expect("› ");

    chat.type("/mode read-only\r");
    await chat.expect("sandbox mode is now read-only");
    await chat.expect("› ");

    chat.type("please make the file x\r");
    // The reply streams in, then the approval card asks inline.
    await chat.expect("I'll create the file x.");
    await chat.expect("⚠ approval: bash asks to run in workspace-write (the session runs in read-only)");
    await chat.expect("operation: touch x && echo made x");
    await chat.expect("why: the user asked for the file x");
    await chat.expect("allow once? [y/n] ");
    chat.type("maybe\r");
    await chat.expect("type y to allow this call once, or n to deny it");
    chat.type("y\r");
    await chat.expect(/✓ approval allow_once by \S+/);
    await chat.expect("made x");
    await chat.expect("Created x in the workspace.");
    await chat.expect(/— turn 1 completed after 2 steps/);
    await chat.expect("› ");
    expect(existsSync(join(ws, "x"))).toBe(true);

    chat.type("/cost\r");
    await chat.expect(/cost \$\d+\.\d+ · scripted:/);
    await chat.expect(/tokens: input [\d,]+ .*· output [\d,]+/);
    await chat.expect(/per turn: 1: \$\d/);
    await chat.expect("› ");

    chat.type("/details 1\r");
    await chat.expect("[1] bash (");
    await chat.expect('"command": "touch x && echo made x"');
    await chat.expect("› ");

    // Ctrl-C in a slow turn: the gateway's cancel route stops it at the next step boundary.
    chat.type("take your time\r");
    await chat.expect("Taking my time.");
    await chat.expect(/▶ \[2\] bash/);
    chat.type("\u0003");
    await chat.expect("⏹ cancelling turn 2…");
    await chat.expect("turn 2 stops at its next step boundary");
    await chat.expect("slept once", 30_000);
    await chat.expect(/— turn 2 cancelled after 1 step\b/, 30_000);
    await chat.expect("› ");

    // A question: numbered options, a wrong number asked again.
    chat.type("which runtime?\r");
    await chat.expect("? Runtime: Which runtime?");
    await chat.expect("  1. node\n  2. deno\n  (a number, or type your own answer)");
    chat.type("3\r");
    await chat.expect("there is no option 3: choose 1 to 2");
    chat.type("2\r");
    await chat.expect(/✓ question answered by \S+/);
    await chat.expect("-> deno");
    await chat.expect("Going with the answer.");
    await chat.expect(/— turn 3 completed after 2 steps/);
    await chat.expect("› ");

    chat.type("/context\r");
    await chat.expect(/context: [\d,]+ tokens/);
    await chat.expect(/S system prompt +[\d,]+/);
    await chat.expect("› ");

    chat.type("/export chat.json\r");
    await chat.expect(`exported session ${id} to ${join(ws, "chat.json")}: `);
    const bundle = JSON.parse(readFileSync(join(ws, "chat.json"), "utf8")) as { format: string; events: Array<{ type: string }> };
    expect(bundle.format).toBe("tack.session-bundle/v1");
    expect(bundle.events.filter((e) => e.type === "turn/end")).toHaveLength(3);
    chat.type("/export chat.json\r");
    await chat.expect(`${join(ws, "chat.json")} exists already; give another file: /export FILE`);

    // Fork: a new session where the gateway has the operation, else said plainly.
    chat.type("/fork\r");
    const forked = await chat.expect(/forking is not available in this Tack yet|you are now in \S+/);
    const current = /you are now in (\S+)/.exec(forked)?.[1] ?? id;
    await chat.expect("› ");

    // /compact with instructions: the summary replaces the conversation for the model; the log keeps it all.
    chat.type("/compact keep the runtime choice\r");
    await chat.expect("compacting: the model summarizes the conversation…");
    await chat.expect(/compacted: the conversation \(seq \d+-\d+\) is now a summary for the model; next request about [\d,]+ → [\d,]+ tokens/);
    await chat.expect("› ");
    chat.type("/compact\r");
    await chat.expect("nothing to compact: the model has not replied since the last summary");
    await chat.expect("› ");

    chat.type("/exit\r");
    await chat.expect(`session ${current} stays in Tack; continue it with: tack chat --resume ${current}`);
    expect(await chat.exited).toBe(0);
    expect(chat.text).not.toMatch(/✗/);

    // The history comes back with --resume; Ctrl-C twice at the prompt leaves.
    const again = new Terminal(["chat", "--resume", id], ws);
    await again.expect(`session ${id} (resumed) · scripted:`, 90_000);
    await again.expect("› please make the file x");
    await again.expect("Created x in the workspace.");
    await again.expect("› take your time");
    await again.expect("› which runtime?");
    await again.expect("Going with the answer.");
    await again.expect("/help for commands");
    await again.expect("› ");
    again.type("\u0003");
    await again.expect("(Ctrl-C again to leave, or /exit)");
    again.type("\u0003");
    await again.expect(`continue it with: tack chat --resume ${id}`);
    expect(await again.exited).toBe(0);
    expect(readFileSync(join(ws, "x"), "utf8")).toBe("");

    // Without a terminal (a pipe), lines are read as they come and the end of input leaves.
    const piped = spawn(process.execPath, [BIN, "chat", "--resume", id], {
      cwd: ws, env: { ...process.env, NO_COLOR: "1", TACK_GATEWAY_URL: stack.tack.gatewayUrl, TACK_API_KEY: stack.tack.apiKey },
    });
    let out = "";
    piped.stdout.on("data", (chunk: Buffer) => { out += chunk.toString(); });
    piped.stderr.on("data", (chunk: Buffer) => { out += chunk.toString(); });
    piped.stdin.end("/cost\n/details 9\n");
    expect(await new Promise((resolve) => piped.on("close", resolve))).toBe(0);
    expect(out).toMatch(/per turn: 1: \$[\d.]+ · 2: \$[\d.]+ · 3: \$[\d.]+/);
    expect(out).toContain("/details takes the number of a call shown as [N]: 1 to 3 (got \"9\")");
    expect(out).toContain(`continue it with: tack chat --resume ${id}`);
  }, 300_000);
});
