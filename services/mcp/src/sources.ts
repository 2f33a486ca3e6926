// Where a session's MCP servers are configured, merged in order (a later source wins by server
// name): the operator's (TACK_MCP_CONFIG), the user's `~/.tack/mcp.json` and the workspace's
// `.mcp.json`. Files are read on this service's host, re-read when their mtime or size changes,
// size-capped; a broken file is a warning and a broken entry a failed server, the rest still count.
import { lstat, open, realpath, stat } from "node:fs/promises";
import { isAbsolute, join, relative, sep } from "node:path";
import { importMcpJsonLenient, type McpServerConfig } from "@tack/mcp-config";

/** Largest configuration file read (user's or workspace's). */
export const MAX_CONFIG_BYTES = 256 * 1024;

/** Source labels as `mcp.list` shows them. */
export const SOURCE_OPERATOR = "operator";
export const SOURCE_USER = "user:~/.tack/mcp.json";
export const SOURCE_WORKSPACE = "workspace:.mcp.json";

/** One configured server after merging: its configuration, or why its entry was refused. */
export interface ConfiguredServer {
  readonly name: string;
  readonly source: string;
  readonly config?: McpServerConfig;
  /** Why the entry cannot be used (invalid, or `run: host` outside the operator's configuration). */
  readonly broken?: string;
}

/** The merged servers of one workspace, plus warnings about the files themselves. */
export interface MergedConfig {
  readonly servers: ConfiguredServer[];
  readonly warnings: string[];
}

interface Cached {
  readonly stamp: string;
  readonly servers: ConfiguredServer[];
  readonly warnings: string[];
}

/** The three sources of MCP servers; `merged(workspace)` is cheap while no file changed. */
export class ConfigSources {
  readonly #operator: ConfiguredServer[];
  readonly #userFile: string | undefined;
  readonly #cache = new Map<string, Cached>();

  /** `home`: the directory whose `.tack/mcp.json` is the user's file (default: none). */
  constructor(operator: Readonly<Record<string, McpServerConfig>>, home?: string) {
    this.#operator = Object.entries(operator).map(([name, config]) => ({ name, source: SOURCE_OPERATOR, config }));
    this.#userFile = home ? join(home, ".tack", "mcp.json") : undefined;
  }

  /** The operator's, the user's and (when `workspace` is given) the workspace's servers, later winning by name. */
  async merged(workspace: string): Promise<MergedConfig> {
    const parts = [{ servers: this.#operator, warnings: [] as string[] }];
    if (this.#userFile) parts.push(await this.#read(this.#userFile, SOURCE_USER));
    if (workspace) parts.push(await this.#readWorkspace(workspace));
    const byName = new Map<string, ConfiguredServer>();
    for (const part of parts) {
      for (const server of part.servers) {
        // Re-inserted so that the order is where the winning definition came from.
        byName.delete(server.name);
        byName.set(server.name, server);
      }
    }
    return { servers: [...byName.values()], warnings: parts.flatMap((part) => part.warnings) };
  }

  async #readWorkspace(workspace: string): Promise<Omit<Cached, "stamp">> {
    if (!isAbsolute(workspace)) return { servers: [], warnings: [`${SOURCE_WORKSPACE}: workspace ${JSON.stringify(workspace)} is not an absolute path; its .mcp.json was not read`] };
    const path = join(workspace, ".mcp.json");
    try {
      const link = await lstat(path);
      if (link.isSymbolicLink()) {
        const [target, root] = await Promise.all([realpath(path), realpath(workspace)]);
        const inside = relative(root, target);
        if (inside === "" || inside.startsWith(`..${sep}`) || inside === ".." || isAbsolute(inside)) {
          return { servers: [], warnings: [`${SOURCE_WORKSPACE}: .mcp.json is a symlink leading out of the workspace (to ${target}); it was not read — make it a regular file`] };
        }
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return { servers: [], warnings: [] };
      return { servers: [], warnings: [`${SOURCE_WORKSPACE}: cannot read .mcp.json: ${(error as Error).message}`] };
    }
    return this.#read(path, SOURCE_WORKSPACE);
  }

  async #read(path: string, source: string): Promise<Omit<Cached, "stamp">> {
    let stamp: string;
    try {
      const info = await stat(path);
      if (!info.isFile()) return { servers: [], warnings: [`${source}: ${path} is not a regular file; it was not read`] };
      if (info.size > MAX_CONFIG_BYTES) return { servers: [], warnings: [`${source}: ${path} is ${info.size} bytes, over the ${MAX_CONFIG_BYTES}-byte limit; it was not read`] };
      stamp = `${info.mtimeMs} ${info.size} ${info.ino}`;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return { servers: [], warnings: [] };
      return { servers: [], warnings: [`${source}: cannot read ${path}: ${(error as Error).message}`] };
    }
    const cached = this.#cache.get(path);
    if (cached?.stamp === stamp) return cached;
    const fresh = { stamp, ...(await this.#parse(path, source)) };
    this.#cache.set(path, fresh);
    if (this.#cache.size > 10_000) this.#cache.delete(this.#cache.keys().next().value!);
    return fresh;
  }

  async #parse(path: string, source: string): Promise<Omit<Cached, "stamp">> {
    let text: string;
    try {
      // Read through one descriptor, at most the cap, so a file growing meanwhile cannot make it more.
      const handle = await open(path, "r");
      try {
        const buffer = Buffer.alloc(MAX_CONFIG_BYTES + 1);
        const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
        if (bytesRead > MAX_CONFIG_BYTES) return { servers: [], warnings: [`${source}: ${path} is over the ${MAX_CONFIG_BYTES}-byte limit; it was not read`] };
        text = buffer.subarray(0, bytesRead).toString("utf8");
      } finally {
        await handle.close();
      }
    } catch (error) {
      return { servers: [], warnings: [`${source}: cannot read ${path}: ${(error as Error).message}`] };
    }
    let parsed;
    try {
      parsed = importMcpJsonLenient(text, source);
    } catch (error) {
      return { servers: [], warnings: [`${(error as Error).message}; the servers it holds are left out`] };
    }
    const servers: ConfiguredServer[] = [];
    for (const [name, config] of Object.entries(parsed.servers)) {
      if ("command" in config && config.run === "host") {
        servers.push({ name, source, broken: `${source}: mcp server "${name}": run "host" is honoured only in the operator's configuration (TACK_MCP_CONFIG); remove it to run the server in the session's sandbox` });
      } else {
        servers.push({ name, source, config });
      }
    }
    for (const [name, message] of Object.entries(parsed.broken)) servers.push({ name, source, broken: message });
    return { servers, warnings: [] };
  }
}
