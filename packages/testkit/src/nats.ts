import { execFileSync } from "node:child_process";
import { mkdtempSync, copyFileSync, writeFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
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
    restart: () => container.restart({ timeout: 2_000 }),
    stop: async () => { await container.stop({ timeout: 1_000 }); },
  };
}
