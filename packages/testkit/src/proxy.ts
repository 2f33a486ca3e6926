// A loopback TCP proxy that a test can cut: every open connection is reset at once, as a network
// failure would (RST, no orderly end). Used to drop HTTP/SSE and gRPC streams mid-turn.
import { connect, createServer, type Server, type Socket } from "node:net";

export class CuttableProxy {
  readonly server: Server;
  /** The first bytes of each connection up to its blank line (an HTTP/1.1 request's head). */
  readonly requests: string[] = [];
  readonly #open = new Set<Socket>();

  private constructor(server: Server) {
    this.server = server;
  }

  /** Listens on a free loopback port and forwards each connection to `target` (a URL or `host:port`). */
  static async start(target: URL | string): Promise<CuttableProxy> {
    const { hostname, port } = typeof target === "string" ? new URL(`tcp://${target}`) : target;
    const server = createServer();
    const proxy = new CuttableProxy(server);
    server.on("connection", (inbound) => {
      const outbound = connect(Number(port), hostname);
      proxy.#open.add(inbound).add(outbound);
      let first = true;
      inbound.on("data", (chunk: Buffer) => {
        if (first) proxy.requests.push(chunk.toString("latin1").split("\r\n\r\n")[0]!);
        first = false;
      });
      inbound.pipe(outbound).pipe(inbound);
      const close = () => {
        inbound.destroy();
        outbound.destroy();
        proxy.#open.delete(inbound);
        proxy.#open.delete(outbound);
      };
      inbound.on("error", close).on("close", close);
      outbound.on("error", close).on("close", close);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get port(): number {
    return (this.server.address() as { port: number }).port;
  }

  /** `http://127.0.0.1:<port>`. */
  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** `127.0.0.1:<port>` (a gRPC address). */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Resets every open connection; how many there were. */
  cut(): number {
    const n = this.#open.size;
    for (const socket of this.#open) socket.resetAndDestroy();
    this.#open.clear();
    return n;
  }

  close(): Promise<void> {
    this.cut();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
