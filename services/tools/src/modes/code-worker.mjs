// One run_code program per worker thread (see isolate.ts): the compiled program runs in a fresh vm
// context that holds nothing of Node's. Only in-context functions and primitives cross into it: an
// object or function of this realm (even an Error it throws) would hand the program this realm's
// Function constructor, and through it `import()` and everything the tools service can reach.
// Plain JavaScript, so that it runs the same under tsx, vitest and the compiled bundles.
import { parentPort, workerData } from "node:worker_threads";
import vm from "node:vm";

const port = parentPort;
const { program, tools, outputChars } = workerData;

// Defence in depth: were the program to reach this realm after all, these are gone from its globals.
for (const name of ["process", "fetch", "require", "module", "Buffer", "setImmediate", "queueMicrotask"]) {
  try {
    delete globalThis[name];
  } catch {
    // not deletable: leave it
  }
}

const pending = new Map();
let nextId = 0;
let printed = 0;

port.on("message", (message) => {
  const settle = pending.get(message.id);
  if (!settle) return;
  pending.delete(message.id);
  settle(message.isError, message.content);
});

/** Called from the context with primitives only; never throws into it. */
function call(name, args, settle) {
  try {
    const id = ++nextId;
    pending.set(id, (isError, content) => settle(isError, content));
    port.postMessage({ type: "call", id, name, args });
  } catch {
    settle(true, "could not send the call to the tools service");
  }
}

/** console.log's sink: output past the cap is counted, not kept. */
function print(text) {
  try {
    const room = outputChars - printed;
    printed += text.length;
    if (room > 0) port.postMessage({ type: "print", text: text.length > room ? text.slice(0, room) : text, dropped: Math.max(0, text.length - room) });
    else port.postMessage({ type: "print", text: "", dropped: text.length });
  } catch {
    // output is best effort
  }
}

function done(ok, text) {
  try {
    port.postMessage({ type: "done", ok, text });
  } catch {
    // the parent is gone
  }
}

// Evaluated inside the context: builds `tools` and `console` there from closures over the three
// bridge functions, so the program can call them but never hold them.
const SETUP = `(function (call, print, done, names) {
  "use strict";
  const format = (value) => {
    if (typeof value === "string") return value;
    if (value instanceof Error) return String(value.stack || value);
    if (typeof value === "undefined" || typeof value === "function" || typeof value === "symbol" || typeof value === "bigint") return String(value);
    try { return JSON.stringify(value, null, 2); } catch { return String(value); }
  };
  const tools = Object.create(null);
  for (const name of names) {
    tools[name] = function (args) {
      let json;
      try { json = JSON.stringify(args === undefined ? {} : args); } catch (e) { return Promise.reject(new TypeError("tools." + name + ": arguments are not JSON-serializable")); }
      return new Promise((resolve, reject) => {
        const settle = (isError, content) => { if (isError) reject(new Error(content)); else resolve(content); };
        try { call(name, json, settle); } catch { reject(new Error("tools." + name + ": the call could not be sent")); }
      });
    };
  }
  const log = (...args) => { try { print(args.map(format).join(" ") + "\\n"); } catch {} };
  Object.defineProperty(globalThis, "tools", { value: Object.freeze(tools) });
  // The compiler turns import() into require(), so that no import() reaches Node's loader (whose
  // errors are of the worker's realm); this is what the program meets instead.
  Object.defineProperty(globalThis, "require", { value: () => { throw new Error("import and require are not available in run_code; use the tools object"); } });
  Object.defineProperty(globalThis, "console", { value: Object.freeze({ log, info: log, warn: log, error: log, debug: log }) });
  return (main) => {
    let result;
    try { result = Promise.resolve(main()); } catch (e) { result = Promise.reject(e); }
    result.then(
      (value) => { try { done(true, value === undefined ? "" : format(value)); } catch { done(true, ""); } },
      (error) => { let text; try { text = error instanceof Error ? error.name + ": " + error.message : "thrown: " + format(error); } catch { text = "thrown: (unprintable)"; } done(false, text); },
    );
  };
})`;

const context = vm.createContext(Object.create(null), { name: "run_code", codeGeneration: { strings: false, wasm: false } });
const start = vm.runInContext(SETUP, context)(call, print, done, vm.runInContext(JSON.stringify(tools), context));
try {
  start(vm.runInContext(program, context, { filename: "program.js" }));
} catch (error) {
  // A syntax error the compiler let through: built in this realm, so only its text goes on.
  done(false, `${error?.name ?? "Error"}: ${error?.message ?? String(error)}`);
}
