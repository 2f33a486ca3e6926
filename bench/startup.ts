// `start_to_first_request_ms`: how long `tack run` takes from its process start to the first
// model request arriving at the model. The model is a local OpenAI-compatible HTTP server
// (`FakeModel`) that the llm service's `openai:` provider points at (OPENAI_BASE_URL), so the
// arrival of each request is observed where a real provider would see it. `tack run` talks to
// the gateway through a pass-through HTTP proxy that notes when each of its requests arrives,
// which splits the time into the CLI's own start-up and the requests it makes.
import { spawn } from "node:child_process";
import { createServer, request as httpRequest, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { medians, nowMs, percentile, say } from "./lib.js";
import { ROOT, type Stack } from "./stack.js";

const RUNS = Number(process.env.TACK_BENCH_STARTUP_RUNS ?? 5);
const GOAL_MS = 300;
/** The model name `tack run` asks for: `openai:<MODEL>`. */
export const FAKE_MODEL = "bench-fake";

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function drain(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

/**
 * An OpenAI-compatible streaming chat-completions endpoint that answers every request with the
 * text "done" (so a turn ends after one step) and records when each request arrived.
 */
export class FakeModel {
  readonly arrivals: number[] = [];
  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(): Promise<FakeModel> {
    let model: FakeModel | undefined = undefined;
    const server = createServer((req, res) => {
      const arrived = nowMs();
      if (req.method !== "POST" || !req.url?.endsWith("/chat/completions")) {
        res.writeHead(404).end();
        return;
      }
      model?.arrivals.push(arrived);
      void drain(req).then(() => {
        const chunk = (body: unknown) => `data: ${JSON.stringify({ id: "bench", object: "chat.completion.chunk", model: FAKE_MODEL, ...body as object })}\n\n`;
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        res.write(chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "done" }, finish_reason: null }] }));
        res.write(chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: { prompt_tokens: 100, completion_tokens: 1 } }));
        res.end("data: [DONE]\n\n");
      });
    });
    model = new FakeModel(server, `${await listen(server)}/v1`);
    return model;
  }

  close(): void {
    this.server.closeAllConnections();
    this.server.close();
  }
}

/** Forwards every request to `target` unchanged (bodies and streamed responses piped) and records what arrived when. */
class GatewayProxy {
  readonly arrivals: Array<{ at: number; method: string; path: string; answeredAt?: number }> = [];
  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(target: string): Promise<GatewayProxy> {
    const upstream = new URL(target);
    let proxy: GatewayProxy | undefined = undefined;
    const server = createServer((req, res) => {
      const record: { at: number; method: string; path: string; answeredAt?: number } = { at: nowMs(), method: req.method ?? "", path: req.url ?? "" };
      proxy?.arrivals.push(record);
      const forward = httpRequest({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        record.answeredAt = nowMs();
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      forward.on("error", () => res.writeHead(502).end());
      req.pipe(forward);
    });
    proxy = new GatewayProxy(server, await listen(server));
    return proxy;
  }

  close(): void {
    this.server.closeAllConnections();
    this.server.close();
  }
}

/** What `packages/cli/bin/tack.js` runs here: `compiled` (dist/cli from `make build`, when fresh) or `tsx` with the reason. */
async function cliRunner(env: NodeJS.ProcessEnv): Promise<string> {
  try {
    // Not a static import: the build manifest is optional (a checkout without `make build` support has none).
    const manifest = "../packages/cli/src/build-manifest.js";
    const { compiledEntry } = (await import(manifest)) as { compiledEntry(name: string, options?: { env?: NodeJS.ProcessEnv }): { file?: string; why?: string } };
    const entry = compiledEntry("cli", { env });
    return entry.file ? "compiled" : `tsx (${entry.why ?? "no build"})`;
  } catch {
    return "tsx";
  }
}

/** Runs `node packages/cli/bin/tack.js run ...` to the end; resolves with its exit code and output. */
function tackRun(args: string[], env: NodeJS.ProcessEnv): { spawnedAt: number; done: Promise<{ code: number | null; output: string }> } {
  const spawnedAt = nowMs();
  const child = spawn(process.execPath, [join(ROOT, "packages/cli/bin/tack.js"), "run", ...args], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => { output += chunk.toString(); });
  child.stderr.on("data", (chunk: Buffer) => { output += chunk.toString(); });
  const done = new Promise<{ code: number | null; output: string }>((resolve) => child.on("exit", (code) => resolve({ code, output })));
  return { spawnedAt, done };
}

/**
 * Runs `tack run --model openai:bench-fake` `RUNS` times against the running stack (whose llm
 * service's OPENAI_BASE_URL is `model.url`) and reports the p50 of process spawn → first model
 * request at the model, with where the time goes.
 */
export async function benchStartup(stack: Stack, model: FakeModel): Promise<Record<string, unknown>> {
  const proxy = await GatewayProxy.start(stack.tack.gatewayUrl);
  const totals: number[] = [];
  const exits: number[] = [];
  const nodeStarts: number[] = [];
  const phases: Record<string, number[]> = { cli_start_to_first_http_request: [], create_session: [], created_to_message_request: [], message_to_model_request: [] };
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, TACK_GATEWAY_URL: proxy.url, TACK_API_KEY: stack.tack.apiKey, NO_COLOR: "1" };
    for (let i = 0; i < RUNS; i++) {
      const workspace = stack.workspace({ "hello.txt": "hi\n" });
      const arrivalsBefore = model.arrivals.length;
      const proxied = proxy.arrivals.length;
      const run = tackRun(["--model", `openai:${FAKE_MODEL}`, "--workspace", workspace, "say done"], env);
      const { code, output } = await run.done;
      const exited = nowMs();
      if (code !== 0) throw new Error(`tack run exited with ${code}:\n${output}`);
      const first = model.arrivals[arrivalsBefore];
      if (first === undefined) throw new Error(`tack run finished but no model request arrived:\n${output}`);
      totals.push(first - run.spawnedAt);
      exits.push(exited - run.spawnedAt);
      const requests = proxy.arrivals.slice(proxied);
      const create = requests.find((r) => r.method === "POST" && r.path === "/v1/sessions");
      const message = requests.find((r) => r.method === "POST" && r.path.endsWith("/messages"));
      if (create) phases.cli_start_to_first_http_request!.push(create.at - run.spawnedAt);
      if (create?.answeredAt !== undefined) phases.create_session!.push(create.answeredAt - create.at);
      if (create?.answeredAt !== undefined && message) phases.created_to_message_request!.push(message.at - create.answeredAt);
      if (message) phases.message_to_model_request!.push(first - message.at);
      // The floor under the CLI's start-up on this machine right now: a bare node process, spawn → exit.
      const bare = nowMs();
      await new Promise((resolve) => spawn(process.execPath, ["-e", "0"], { stdio: "ignore" }).on("exit", resolve));
      nodeStarts.push(nowMs() - bare);
      say(`tack run ${i + 1}/${RUNS}: first model request after ${Math.round(totals.at(-1)!)} ms, exited after ${Math.round(exits.at(-1)!)} ms`);
    }
  } finally {
    proxy.close();
  }
  const p50 = percentile(totals, 50);
  return {
    start_to_first_request_ms: {
      p50, runs: totals.length, goal: GOAL_MS, met: p50 <= GOAL_MS, cli: await cliRunner(process.env),
      breakdown_p50_ms: medians(phases),
      run_to_exit_ms: { p50: percentile(exits, 50) },
      bare_node_ms: { p50: percentile(nodeStarts, 50) },
      definition: "spawn of `node packages/cli/bin/tack.js run --model openai:bench-fake --workspace DIR TASK` (gateway from TACK_GATEWAY_URL, services already running) → the first chat-completions request arriving at a local OpenAI-compatible server the llm service's OPENAI_BASE_URL points at. Breakdown: cli_start_to_first_http_request = node + the CLI's module loading until POST /v1/sessions reaches the gateway; create_session = its round trip (model check, session created and indexed); created_to_message_request = until POST messages arrives; message_to_model_request = user message logged, turn and step started, request built, llm service → HTTP. `tack run` reaches the gateway through a pass-through proxy that times its requests. bare_node_ms = spawn → exit of `node -e 0` right after each run (the floor on this machine at that moment)",
    },
  };
}
