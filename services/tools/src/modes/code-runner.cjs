// run_code's runner (decision 0020): started as `node -e <this file>` in the session's sandbox
// container, as the sandbox user, under the call's mode, so the program has exactly what a bash
// command has there and nothing of any service. It reads one start line from stdin
// ({tag, program, tools, outputChars}), runs the compiled program, and speaks to the tools service
// in lines on stdout that begin with `tag`: {type:"call",id,name,args}, {type:"print",text,dropped},
// {type:"done",ok,text}. Replies to calls come back on stdin as {id,content,isError} lines. The tools
// service trusts none of it: every call is checked and run there under the session's mode.
"use strict";

const writeOut = process.stdout.write.bind(process.stdout);
let tag = "";
let outputChars = 0;
let printed = 0;
let nextId = 0;
const pending = new Map();

/** One protocol line (stdout to a pipe is synchronous on Linux, so nothing is lost at exit). */
function send(message) {
  writeOut(`${tag}${JSON.stringify(message)}\n`);
}

/** Output of the program: counted against the cap here, so that a flood never crosses the bus. */
function print(text) {
  const room = outputChars - printed;
  printed += text.length;
  if (room >= text.length) send({ type: "print", text, dropped: 0 });
  else send({ type: "print", text: room > 0 ? text.slice(0, room) : "", dropped: text.length - Math.max(0, room) });
}

function format(value) {
  if (typeof value === "string") return value;
  if (value instanceof Error) return String(value.stack || value);
  if (value === undefined || typeof value === "function" || typeof value === "symbol" || typeof value === "bigint") return String(value);
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function start(message) {
  tag = String(message.tag);
  outputChars = Number(message.outputChars) || 0;
  const tools = Object.create(null);
  for (const name of message.tools) {
    tools[name] = (args) => {
      let json;
      try {
        json = JSON.stringify(args === undefined ? {} : args);
      } catch {
        return Promise.reject(new TypeError(`tools.${name}: arguments are not JSON-serializable`));
      }
      return new Promise((resolve, reject) => {
        const id = ++nextId;
        pending.set(id, (reply) => (reply.isError ? reject(new Error(reply.content)) : resolve(reply.content)));
        send({ type: "call", id, name, args: json });
      });
    };
  }
  const log = (...args) => print(`${args.map(format).join(" ")}\n`);
  globalThis.tools = Object.freeze(tools);
  globalThis.console = Object.freeze({ log, info: log, warn: log, error: log, debug: log });
  // Direct writes to stdout or stderr are output too (never protocol lines).
  const asOutput = (chunk, encoding, callback) => {
    print(typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8"));
    const done = typeof encoding === "function" ? encoding : callback;
    if (typeof done === "function") process.nextTick(done);
    return true;
  };
  process.stdout.write = asOutput;
  process.stderr.write = asOutput;
  let result;
  try {
    result = Promise.resolve((0, eval)(message.program)());
  } catch (error) {
    result = Promise.reject(error);
  }
  result.then(
    (value) => finish(true, value === undefined ? "" : format(value)),
    (error) => finish(false, error instanceof Error ? `${error.name}: ${error.message}` : `thrown: ${format(error)}`),
  );
}

function finish(ok, text) {
  send({ type: "done", ok, text });
  process.exit(0);
}

let buffered = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buffered += chunk;
  for (let end = buffered.indexOf("\n"); end >= 0; end = buffered.indexOf("\n")) {
    const line = buffered.slice(0, end);
    buffered = buffered.slice(end + 1);
    const message = JSON.parse(line);
    if (!tag) {
      start(message);
      continue;
    }
    const settle = pending.get(message.id);
    pending.delete(message.id);
    if (settle) settle(message);
  }
});
