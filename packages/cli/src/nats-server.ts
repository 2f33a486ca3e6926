// A local nats-server with JetStream, for when no NATS_URL is given.
import { mkdir } from "node:fs/promises";
import { createConnection, createServer } from "node:net";
import { join } from "node:path";
import { TackError } from "@tack/bus";
import { describeExit, spawnChild, type Child } from "./child.js";

/** A nats-server the launcher started; `child.stop()` ends it. */
export interface LocalNats {
  readonly url: string;
  readonly child: Child;
}

const HOST = "127.0.0.1";

/**
 * Starts `nats-server -js` from PATH on a free local port with its store under
 * `<dataDir>/nats` and its output in `<logDir>/nats-server.log`; resolves once it accepts
 * connections. Retries with another port when the chosen one was taken in the meantime.
 * With `configFile` (JetStream with its store in `<dataDir>/nats`, users and permissions: see
 * bus-credentials.ts) it runs `-c configFile` instead of `-js -sd`; the address is always given here.
 */
export async function startNatsServer(options: { dataDir: string; logDir: string; timeoutMs: number; configFile?: string }): Promise<LocalNats> {
  const storeDir = join(options.dataDir, "nats");
  await mkdir(storeDir, { recursive: true, mode: 0o700 });
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const child = spawnChild("nats-server", "nats-server", [...(options.configFile ? ["-c", options.configFile] : ["-js", "-sd", storeDir]), "-a", HOST, "-p", String(port)], {
      cwd: options.dataDir,
      env: process.env,
      logFile: join(options.logDir, "nats-server.log"),
      // Out of the terminal's process group: on Ctrl-C the services must still reach NATS while they shut down.
      detached: true,
    });
    const outcome = await Promise.race([child.exited, waitForPort(port, options.timeoutMs, () => child.exit() !== undefined)]);
    if (outcome === "open") return { url: `nats://${HOST}:${port}`, child };
    if (outcome === "timeout") {
      await child.stop(1_000);
      throw new TackError("launch.timeout", `nats-server did not accept connections on ${HOST}:${port} within ${options.timeoutMs} ms; see ${child.logFile}`);
    }
    const exit = outcome === "gone" ? await child.exited : outcome;
    if (exit.error?.code === "ENOENT") {
      throw new TackError("launch.nats_missing", "nats-server is not on PATH: install it (`apt-get install nats-server`) or set NATS_URL to a running NATS server with JetStream");
    }
    const tail = await child.tail(5);
    if (attempt < 3 && /address already in use/i.test(tail)) continue;
    throw new TackError("launch.nats_failed", `nats-server ${describeExit(exit)} during start-up: ${tail || "(no output)"}; see ${child.logFile}`);
  }
}

/** A TCP port that was free a moment ago (the OS picks it; the caller retries if it was taken since). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => server.once("error", reject).listen(0, HOST, resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === "string") throw new Error("the OS returned no port");
  return address.port;
}

/** Polls until the port accepts a TCP connection; gives up at the deadline or once `gone()` says the server ended. */
async function waitForPort(port: number, timeoutMs: number, gone: () => boolean): Promise<"open" | "timeout" | "gone"> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (gone()) return "gone";
    const open = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ host: HOST, port }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (open) return "open";
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return "timeout";
}
