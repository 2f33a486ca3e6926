import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import { mkdtempSync, copyFileSync, writeFileSync, rmSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

// No registry is reachable: never let testcontainers pull its reaper image.
process.env.TESTCONTAINERS_RYUK_DISABLED ??= "true";
const { GenericContainer, Wait } = await import("testcontainers");

/** Image of the throwaway NATS, built locally from the machine's nats-server binary on the sandbox base image. */
export const NATS_TEST_IMAGE = "tack-nats-test:local";

/** A NATS server in a container that a test may restart or stop (never the machine's own). */
export interface ThrowawayNats {
  readonly url: string;
  /** Restarts the server process; JetStream data survives (it lives in the container). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

function ensureImage(): void {
  try {
    execFileSync("docker", ["image", "inspect", NATS_TEST_IMAGE], { stdio: "ignore" });
    return;
  } catch {
    // build below
  }
  const nats = execFileSync("sh", ["-c", "command -v nats-server"]).toString().trim();
  const dir = mkdtempSync(join(tmpdir(), "tack-nats-image-"));
  try {
    copyFileSync(nats, join(dir, "nats-server"));
    writeFileSync(join(dir, "Dockerfile"), [
      "FROM tack-sandbox:bookworm",
      "COPY --chown=1000:1000 nats-server /home/tack/nats-server",
      'ENTRYPOINT ["/home/tack/nats-server"]',
      "",
    ].join("\n"));
    execFileSync("docker", ["build", "-q", "-t", NATS_TEST_IMAGE, dir], { stdio: "ignore" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const run = promisify(execFile);

/** Resolves once a NATS server on 127.0.0.1:`port` greets a new connection with its INFO line. */
async function untilNatsAnswers(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const greeted = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: "127.0.0.1", port });
      const done = (ok: boolean) => {
        socket.destroy();
        resolve(ok);
      };
      socket.setTimeout(2_000, () => done(false));
      socket.once("data", (data) => done(data.toString("latin1").startsWith("INFO ")));
      socket.once("error", () => done(false));
    });
    if (greeted) return;
    if (Date.now() > deadline) throw new Error(`the restarted NATS container did not answer on 127.0.0.1:${port} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

/** Starts a NATS server with JetStream in a fresh container, on a fixed host port so restarts keep the URL. */
export async function startThrowawayNats(): Promise<ThrowawayNats> {
  ensureImage();
  const port = await freePort();
  const container = await new GenericContainer(NATS_TEST_IMAGE)
    .withCommand(["-js", "-sd", "/home/tack/js", "-p", "4222"])
    .withExposedPorts({ container: 4222, host: port })
    .withWaitStrategy(Wait.forLogMessage(/Server is ready/))
    .start();
  return {
    url: `nats://127.0.0.1:${port}`,
    // Not testcontainers' restart: it waits for "Server is ready" in the logs since the new start,
    // which a loaded machine once missed for a minute although the server was up. The client port
    // answering with its INFO line is what a client needs.
    // Asynchronous and bounded, so a slow engine never blocks the test's event loop; a restart that
    // takes long says where its time went.
    restart: async () => {
      const started = Date.now();
      try {
        await run("docker", ["restart", "-t", "2", container.getId()], { timeout: 60_000 });
      } catch (error) {
        // A restart that hangs in the engine: kill and start instead of waiting on it.
        process.stderr.write(`throwaway NATS: docker restart failed after ${Date.now() - started} ms (${(error as Error).message.split("\n")[0]}); killing and starting it\n`);
        await run("docker", ["kill", container.getId()], { timeout: 30_000 }).catch(() => undefined);
        await run("docker", ["start", container.getId()], { timeout: 60_000 });
      }
      const restarted = Date.now();
      await untilNatsAnswers(port, 90_000);
      const total = Date.now() - started;
      if (total > 10_000) process.stderr.write(`throwaway NATS: restart took ${total} ms (engine ${restarted - started} ms, until it answered ${Date.now() - restarted} ms)\n`);
    },
    stop: async () => { await container.stop({ timeout: 1_000 }); },
  };
}
