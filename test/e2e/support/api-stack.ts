// Every service process (the launcher `tack up` uses) on the machine's NATS JetStream and real
// Docker sandboxes, driven over the HTTP API: what the end-to-end tests share.
import { chownSync, mkdtempSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Bus } from "@tack/bus";
import { removeNamespace, waitFor } from "@tack/testkit";
import { launch, type Launched } from "@tack/cli";
import { sseJson } from "./sse.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

/** An event as the gateway sends it: the payload sits under its case name (e.g. `toolResult`). */
export type EventJson = { seq: number; type: string } & Record<string, Record<string, unknown> | undefined>;

export class ApiStack {
  readonly tack: Launched;
  readonly #namespace: string;
  readonly #work: string;
  /** The services' state directory; the llm service reads scripts only from its `scripts/` (and the bundled examples/). */
  readonly #stateDir: string;

  private constructor(tack: Launched, namespace: string, work: string, stateDir: string) {
    this.tack = tack;
    this.#namespace = namespace;
    this.#work = work;
    this.#stateDir = stateDir;
  }

  /** Launches every service in a fresh namespace and state directory (`label` names the temporary directory). */
  static async launch(label: string): Promise<ApiStack> {
    const namespace = `e2e${randomBytes(4).toString("hex")}`;
    const work = mkdtempSync(join(tmpdir(), `tack-e2e-${label}-`));
    const stateDir = join(work, "data");
    const tack = await launch({ dataDir: stateDir, natsUrl: NATS_URL, namespace, env: { TACK_LEASE_TTL_MS: "2000", TACK_STATE_DIR: stateDir } });
    return new ApiStack(tack, namespace, work, stateDir);
  }

  /** A fresh workspace directory, owned by the sandbox user when the test runs as root. */
  workspace(name: string): string {
    const dir = join(this.#work, name);
    mkdirSync(dir, { recursive: true });
    if (process.getuid?.() === 0) chownSync(dir, 1000, 1000);
    return dir;
  }

  /** A fresh workspace holding `files` (relative path → content; `.sh` files executable), all owned by the sandbox user when the test runs as root. */
  workspaceWith(name: string, files: Record<string, string>): string {
    const dir = this.workspace(name);
    for (const [path, content] of Object.entries(files)) {
      const full = join(dir, path);
      mkdirSync(join(full, ".."), { recursive: true });
      writeFileSync(full, content, { mode: path.endsWith(".sh") ? 0o755 : 0o644 });
    }
    if (process.getuid?.() === 0) chownTree(dir);
    return dir;
  }

  /** Writes a scripted model's replies where the llm service reads them; returns the model reference. */
  script(name: string, replies: unknown[]): string {
    mkdirSync(join(this.#stateDir, "scripts"), { recursive: true });
    const file = join(this.#stateDir, "scripts", `${name}.json`);
    writeFileSync(file, JSON.stringify({ replies }));
    return `scripted:${file}`;
  }

  api(path: string, init: RequestInit & { json?: unknown } = {}): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.tack.apiKey}` };
    if (init.json !== undefined) headers["content-type"] = "application/json";
    return fetch(`${this.tack.gatewayUrl}${path}`, { ...init, headers, body: init.json === undefined ? init.body : JSON.stringify(init.json) });
  }

  /** A request with a JSON body (when given); the answer's status and parsed JSON body. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies of many shapes, each checked by the assertions that read them
  async json(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
    const res = await this.api(path, { method, json: body });
    return { status: res.status, body: await res.json() };
  }

  /** Creates a session on `workspace` with `model`; returns its id (throws with the answer when it is not 201). */
  async session(workspace: string, model: string): Promise<string> {
    const created = await this.json("POST", "/v1/sessions", { workspace, model });
    if (created.status !== 201) throw new Error(`POST /v1/sessions answered ${created.status}: ${JSON.stringify(created.body)}`);
    return created.body.id as string;
  }

  /** The session's whole log as the gateway streams it. */
  async events(id: string): Promise<EventJson[]> {
    const text = await (await this.api(`/v1/sessions/${id}/events?follow=0`)).text();
    return sseJson<EventJson>(text);
  }

  /** The session's log once `done` holds for it; a timeout names `what` and the event types read last. */
  logWhen(id: string, what: string, done: (e: EventJson[]) => boolean, timeoutMs = 60_000): Promise<EventJson[]> {
    return waitFor(`${what} in session ${id}`, async () => {
      const e = await this.events(id);
      if (done(e)) return e;
      throw new Error(`log so far: ${e.map((x) => x.type).join(", ")}`);
    }, { timeoutMs });
  }

  async stop(): Promise<void> {
    await this.tack.stop();
    const bus = await Bus.connect({ url: NATS_URL, namespace: this.#namespace, name: "e2e-cleanup" });
    await removeNamespace(bus.nc, this.#namespace);
    await bus.close();
    rmSync(this.#work, { recursive: true, force: true });
  }
}

/** Gives `dir` and everything below it to the sandbox user (uid/gid 1000). */
function chownTree(dir: string): void {
  chownSync(dir, 1000, 1000);
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) chownTree(path);
    else chownSync(path, 1000, 1000);
  }
}
