// The lsp tool's broker: a daemon inside the sandbox container that keeps language servers
// running between tool calls (the tools service reaches the container only through one-shot
// execs). client.py starts it on first need: `node broker.mjs <hash>`, in its own session,
// output to a log beside it. It listens on /tmp/tack-lsp/broker-<hash>.sock (not an abstract
// socket: node 18's libuv drops the name and binds every one to the same all-NUL address);
// clients start brokers one at a time under a lock and remove a dead one's socket first.
// One request per connection: a JSON line in, a JSON line out:
//   {op:"hover"|"definition"|"references"|"document_symbols", root, file, line, character,
//    server:{id,name,command,initializationOptions}, languageId, timeoutMs, maxLocations}
//   {op:"status"}
//   → {ok:true, result} | {ok:false, error:{kind, message, stderr?}}
// Positions in and out are 0-based lines and 0-based code points (not LSP's UTF-16 units).
// Plain JavaScript for the container's node (Debian's 18), stdlib only. See README.md.
import { spawn } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { fileURLToPath, pathToFileURL } from "node:url";

const hash = process.argv[2];
/** A server unused this long is stopped (it holds the project in memory); the broker exits once none is left. */
const IDLE_MS = 10 * 60_000;
/** How long a server gets to answer `initialize`. */
const START_TIMEOUT_MS = 30_000;
/** How much of a server's stderr is kept for error messages. */
const STDERR_TAIL = 2_000;
/** Longest line text returned with a location. */
const MAX_LINE_TEXT = 200;
/** Symbols returned at most (the tool shows fewer). */
const MAX_SYMBOLS = 2_000;

const log = (message) => process.stderr.write(`${new Date().toISOString()} ${message}\n`);

/** A failure the tool reports as it is: `kind` says which. */
class BrokerError extends Error {
  constructor(kind, message, stderr) {
    super(message);
    this.kind = kind;
    this.stderr = stderr;
  }
}

/** The server's process went away (or never came): the request can be replayed on a new one. */
class TransportError extends Error {}

/** One language server process for one (root, server id), over LSP's Content-Length framing on its stdio. */
class Server {
  constructor(root, spec) {
    this.root = root;
    this.spec = spec;
    this.pending = new Map();
    this.nextId = 1;
    /** Open documents: path → {version, text, mtimeMs, size} as last sent. */
    this.docs = new Map();
    this.stderr = "";
    /** Why the process is gone; undefined while it runs. */
    this.dead = undefined;
    this.lastUsed = Date.now();
    this.input = Buffer.alloc(0);
    this.ready = this.start();
    this.ready.catch(() => undefined);
  }

  async start() {
    const [command, ...args] = this.spec.command;
    // Own process group: a restart kills the server's children (tsserver) with it.
    const child = spawn(command, args, { cwd: this.root, detached: true, stdio: ["pipe", "pipe", "pipe"] });
    this.child = child;
    log(`${this.spec.name} for ${this.root}: started, pid ${child.pid}`);
    child.on("error", (error) => this.died(`could not be started: ${error.message}`));
    child.on("exit", (code, signal) => {
      const reason = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      if (child.stderr.readableEnded) return this.died(reason);
      // Its last words may still be in the pipe; a child of it holding the pipe open must not delay this for long.
      const timer = setTimeout(() => this.died(reason), 200);
      child.stderr.once("end", () => (clearTimeout(timer), this.died(reason)));
    });
    // Writes to a dead server fail with EPIPE; its exit says what happened.
    child.stdin.on("error", () => undefined);
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk) => {
      this.stderr = (this.stderr + chunk).slice(-STDERR_TAIL);
    });
    child.stdout.on("data", (chunk) => this.receive(chunk));
    try {
      await this.request("initialize", {
        processId: process.pid,
        rootUri: pathToFileURL(this.root).href,
        workspaceFolders: [{ uri: pathToFileURL(this.root).href, name: this.root }],
        capabilities: {
          general: { positionEncodings: ["utf-16"] },
          textDocument: {
            synchronization: { dynamicRegistration: false },
            hover: { contentFormat: ["markdown", "plaintext"] },
            definition: { linkSupport: false },
            references: {},
            documentSymbol: { hierarchicalDocumentSymbolSupport: true },
          },
          workspace: { workspaceFolders: true, configuration: false },
        },
        initializationOptions: this.spec.initializationOptions ?? {},
      }, START_TIMEOUT_MS);
    } catch (error) {
      // Not left half started: the next request starts a new one.
      this.died(`failed to initialize: ${error.message}`);
      throw error;
    }
    this.notify("initialized", {});
  }

  died(reason) {
    if (this.dead) return;
    this.dead = reason;
    log(`${this.spec.name} for ${this.root}: ${reason}`);
    try {
      process.kill(-this.child.pid, "SIGKILL");
    } catch {
      // The group is gone already.
    }
    for (const { reject } of this.pending.values()) reject(new TransportError(`${this.spec.name} ${reason}`));
    this.pending.clear();
  }

  receive(chunk) {
    this.input = this.input.length ? Buffer.concat([this.input, chunk]) : chunk;
    for (;;) {
      const end = this.input.indexOf("\r\n\r\n");
      if (end < 0) return;
      const match = /content-length: *(\d+)/i.exec(this.input.subarray(0, end).toString("latin1"));
      if (!match) {
        this.died(`sent a message without Content-Length: ${JSON.stringify(this.input.subarray(0, 80).toString())}`);
        return;
      }
      const start = end + 4;
      const length = Number(match[1]);
      if (this.input.length < start + length) return;
      const body = this.input.subarray(start, start + length).toString("utf8");
      this.input = this.input.subarray(start + length);
      let message;
      try {
        message = JSON.parse(body);
      } catch {
        this.died(`sent a message that is not JSON: ${JSON.stringify(body.slice(0, 80))}`);
        return;
      }
      this.dispatch(message);
    }
  }

  dispatch(message) {
    if (message.method === undefined) {
      const call = this.pending.get(message.id);
      if (!call) return;
      this.pending.delete(message.id);
      if (message.error) call.reject(new BrokerError("request_failed", `${this.spec.name} refused ${call.method}: ${message.error.message}`));
      else call.resolve(message.result ?? null);
      return;
    }
    if (message.id === undefined) return; // notifications: diagnostics, logs, progress
    // Requests from the server: answer what a minimal client would, so that it never waits on us.
    let result = null;
    if (message.method === "workspace/configuration") result = (message.params?.items ?? []).map(() => null);
    else if (message.method === "workspace/workspaceFolders") result = [{ uri: pathToFileURL(this.root).href, name: this.root }];
    else if (message.method === "workspace/applyEdit") result = { applied: false };
    else if (!["client/registerCapability", "client/unregisterCapability", "window/workDoneProgress/create", "window/showMessageRequest"].includes(message.method)) {
      this.send({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: `${message.method} is not supported by this client` } });
      return;
    }
    this.send({ jsonrpc: "2.0", id: message.id, result });
  }

  send(message) {
    const body = Buffer.from(JSON.stringify(message), "utf8");
    this.child.stdin.write(`Content-Length: ${body.length}\r\n\r\n`);
    this.child.stdin.write(body);
  }

  notify(method, params) {
    if (!this.dead) this.send({ jsonrpc: "2.0", method, params });
  }

  request(method, params, timeoutMs) {
    if (this.dead) return Promise.reject(new TransportError(`${this.spec.name} ${this.dead}`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        this.notify("$/cancelRequest", { id });
        reject(new BrokerError("timeout", `${this.spec.name} did not answer ${method} within ${Math.round(timeoutMs / 1000)} s`));
      }, timeoutMs);
      this.pending.set(id, {
        method,
        resolve: (value) => (clearTimeout(timer), resolve(value)),
        reject: (error) => (clearTimeout(timer), reject(error)),
      });
      this.send({ jsonrpc: "2.0", id, method, params });
    });
  }

  /**
   * Brings the server's view of the files up to date with the disk: `file` is opened (or
   * changed, with its whole text) and every other open document changed since it was sent is
   * sent again, or closed when it is gone. Other files the server reads from disk itself.
   */
  sync(file, text, languageId) {
    for (const [path, doc] of this.docs) {
      if (path === file) continue;
      let stat;
      try {
        stat = statSync(path);
      } catch {
        this.notify("textDocument/didClose", { textDocument: { uri: pathToFileURL(path).href } });
        this.docs.delete(path);
        continue;
      }
      if (stat.mtimeMs === doc.mtimeMs && stat.size === doc.size) continue;
      let current;
      try {
        current = readFileSync(path, "utf8");
      } catch {
        continue;
      }
      this.change(path, doc, current, stat);
    }
    const stat = statSync(file);
    const doc = this.docs.get(file);
    if (!doc) {
      this.docs.set(file, { version: 1, text, mtimeMs: stat.mtimeMs, size: stat.size });
      this.notify("textDocument/didOpen", { textDocument: { uri: pathToFileURL(file).href, languageId, version: 1, text } });
    } else if (doc.text !== text) {
      this.change(file, doc, text, stat);
    }
  }

  change(path, doc, text, stat) {
    doc.version += 1;
    doc.text = text;
    doc.mtimeMs = stat.mtimeMs;
    doc.size = stat.size;
    this.notify("textDocument/didChange", { textDocument: { uri: pathToFileURL(path).href, version: doc.version }, contentChanges: [{ text }] });
  }
}

/** (root, server id) → its running server. */
const servers = new Map();
let lastRequest = Date.now();

function serverFor(root, spec) {
  const key = `${root}\0${spec.id}`;
  let server = servers.get(key);
  if (!server || server.dead) {
    const restarts = server ? server.restarts + 1 : 0;
    server = new Server(root, spec);
    server.restarts = restarts;
    servers.set(key, server);
  }
  return server;
}

const METHODS = {
  hover: "textDocument/hover",
  definition: "textDocument/definition",
  references: "textDocument/references",
  document_symbols: "textDocument/documentSymbol",
};

async function handle(request) {
  if (request.op === "status") return status();
  const method = METHODS[request.op];
  if (!method) throw new BrokerError("bad_request", `unknown op ${JSON.stringify(request.op)}; use one of ${Object.keys(METHODS).join(", ")}`);
  const text = readSource(request.file);
  const lines = splitLines(text);
  const params = { textDocument: { uri: pathToFileURL(request.file).href } };
  if (request.op !== "document_symbols") params.position = { line: request.line, character: toUtf16(lines, request.line, request.character) };
  if (request.op === "references") params.context = { includeDeclaration: true };
  // One deadline for all of it: starting the server, loading the project, a replay.
  const deadline = Date.now() + request.timeoutMs;
  // A server that dies under the request (or was found dead) is started again and asked once more.
  for (let attempt = 1; ; attempt++) {
    const server = serverFor(request.root, request.server);
    server.lastUsed = Date.now();
    try {
      await within(server.ready, deadline, `${server.spec.name} did not finish starting within ${Math.round(request.timeoutMs / 1000)} s`);
      server.sync(request.file, text, request.languageId);
      const result = await server.request(method, params, Math.max(deadline - Date.now(), 1));
      server.lastUsed = Date.now();
      return shape(request, result, lines);
    } catch (error) {
      if (!(error instanceof TransportError)) throw error;
      if (attempt >= 2) throw new BrokerError("server_failed", `${error.message} twice in a row`, server.stderr);
      log(`${server.spec.name} for ${server.root}: ${error.message}; restarting it and sending ${method} again`);
    }
  }
}

function within(promise, deadline, message) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new BrokerError("timeout", message)), Math.max(deadline - Date.now(), 0));
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function readSource(file) {
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    if (error.code === "ENOENT") throw new BrokerError("file_missing", `file not found: ${file}`);
    if (error.code === "EISDIR") throw new BrokerError("not_a_file", `${file} is a directory, not a file`);
    throw new BrokerError("unreadable", `cannot read ${file}: ${error.message}`);
  }
}

function splitLines(text) {
  return text.split(/\r\n|\r|\n/);
}

/** A 0-based code point column on `line` as LSP's UTF-16 character offset; refuses positions outside the file. */
function toUtf16(lines, line, column) {
  if (line >= lines.length) throw new BrokerError("bad_position", `line ${line + 1} is past the end of the file (${lines.length} lines)`);
  const points = [...lines[line]];
  if (column > points.length) throw new BrokerError("bad_position", `character ${column + 1} is past the end of line ${line + 1} (${points.length} characters)`);
  return points.slice(0, column).join("").length;
}

/** LSP's UTF-16 character offset as a 0-based code point column. */
function fromUtf16(lineText, character) {
  return [...lineText.slice(0, character)].length;
}

function shape(request, result, lines) {
  if (request.op === "hover") return { text: hoverText(result) };
  if (request.op === "document_symbols") return symbols(result ?? []);
  return locations(result, request.maxLocations ?? 100, request.file, lines);
}

function hoverText(hover) {
  if (!hover || hover.contents == null) return "";
  const part = (item) => (typeof item === "string" ? item : item.language ? `\`\`\`${item.language}\n${item.value}\n\`\`\`` : item.value ?? "");
  return (Array.isArray(hover.contents) ? hover.contents.map(part).join("\n\n") : part(hover.contents)).trim();
}

/** Locations (or location links) sorted by file and position, deduplicated, the first `max` with their line's text. */
function locations(result, max, requestFile, requestLines) {
  const list = result == null ? [] : Array.isArray(result) ? result : [result];
  const seen = new Set();
  const all = [];
  for (const item of list) {
    const uri = item.uri ?? item.targetUri;
    const range = item.range ?? item.targetSelectionRange ?? item.targetRange;
    if (!uri?.startsWith("file:") || !range) continue;
    const file = fileURLToPath(uri);
    const key = `${file}:${range.start.line}:${range.start.character}`;
    if (seen.has(key)) continue;
    seen.add(key);
    all.push({ file, line: range.start.line, character: range.start.character });
  }
  all.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.line - b.line || a.character - b.character));
  const texts = new Map([[requestFile, requestLines]]);
  const linesOf = (file) => {
    if (!texts.has(file)) {
      try {
        texts.set(file, splitLines(readFileSync(file, "utf8")));
      } catch {
        texts.set(file, undefined);
      }
    }
    return texts.get(file);
  };
  const shown = all.slice(0, max).map(({ file, line, character }) => {
    const text = linesOf(file)?.[line];
    if (text === undefined) return { file, line: line + 1, column: character + 1, text: "" };
    const trimmed = text.trim();
    return { file, line: line + 1, column: fromUtf16(text, character) + 1, text: trimmed.length > MAX_LINE_TEXT ? `${trimmed.slice(0, MAX_LINE_TEXT)}…` : trimmed };
  });
  return { locations: shown, total: all.length };
}

// LSP's SymbolKind, numbered from 1.
const KINDS = ["symbol", "file", "module", "namespace", "package", "class", "method", "property", "field", "constructor", "enum", "interface", "function", "variable", "constant", "string", "number", "boolean", "array", "object", "key", "null", "enum member", "struct", "event", "operator", "type parameter"];

/** Document symbols as a depth-first list with depths (hierarchical answers) or flat (SymbolInformation answers). */
function symbols(result) {
  const out = [];
  let total = 0;
  const walk = (items, depth) => {
    for (const item of items) {
      total++;
      const start = (item.selectionRange ?? item.range ?? item.location?.range)?.start ?? { line: 0 };
      if (out.length < MAX_SYMBOLS) out.push({ depth, name: item.name, kind: KINDS[item.kind] ?? "symbol", line: start.line + 1 });
      if (item.children) walk(item.children, depth + 1);
    }
  };
  walk(result, 0);
  return { symbols: out, total };
}

function status() {
  return {
    servers: [...servers.values()].map((server) => ({
      root: server.root, id: server.spec.id, pid: server.child?.pid, dead: server.dead ?? null,
      pending: server.pending.size, restarts: server.restarts, open: server.docs.size,
    })),
  };
}

function answer(socket, line) {
  lastRequest = Date.now();
  let request;
  try {
    request = JSON.parse(line);
  } catch {
    socket.end(`${JSON.stringify({ ok: false, error: { kind: "bad_request", message: "the request is not JSON" } })}\n`);
    return;
  }
  handle(request).then(
    (result) => ({ ok: true, result }),
    (error) => {
      if (error instanceof BrokerError) return { ok: false, error: { kind: error.kind, message: error.message, stderr: error.stderr } };
      log(`request failed: ${error.stack ?? error}`);
      return { ok: false, error: { kind: "broker_failed", message: String(error.message ?? error) } };
    },
  ).then((reply) => {
    lastRequest = Date.now();
    socket.end(`${JSON.stringify(reply)}\n`);
  });
}

const listener = createServer((socket) => {
  let data = "";
  socket.setEncoding("utf8");
  socket.on("error", () => undefined);
  socket.on("data", function read(chunk) {
    data += chunk;
    const end = data.indexOf("\n");
    if (end < 0) return;
    socket.off("data", read);
    answer(socket, data.slice(0, end));
  });
});
listener.on("error", (error) => {
  log(`cannot listen: ${error.message}`);
  process.exit(1);
});
listener.listen(`/tmp/tack-lsp/broker-${hash}.sock`, () => log(`broker ${hash} listening, pid ${process.pid}`));

// Idle servers are stopped to give the container's memory back; with none left, the broker goes too.
setInterval(() => {
  const now = Date.now();
  for (const [key, server] of servers) {
    if (server.pending.size === 0 && now - server.lastUsed > IDLE_MS) {
      server.died(`stopped after ${Math.round(IDLE_MS / 60_000)} idle minutes`);
      servers.delete(key);
    }
  }
  if (servers.size === 0 && now - lastRequest > IDLE_MS) {
    log("no server left and idle: exiting");
    listener.close();
    process.exit(0);
  }
}, Math.min(60_000, IDLE_MS)).unref();
