// The tool calls `tack chat` has shown, numbered 1, 2, … in the order they appeared, so that
// `/details N` can print one call's whole arguments and result after the transcript cut them.
import type { Event } from "@tack/proto";
import { terminalSafe } from "../sanitize.js";

interface CallRecord {
  readonly n: number;
  readonly callId: string;
  name: string;
  arguments: string;
  result?: { content: string; isError: boolean; durationMs: number; fullBytes: number; spillObject: string; synthesized: boolean };
  inner: string[];
}

/** Tool calls by number; feed it every event before the transcript renders it. */
export class CallBook {
  readonly #byId = new Map<string, CallRecord>();
  readonly #byNumber: CallRecord[] = [];

  /** Records a `tool/call`, `tool/result` or `tool/inner` event; other events are ignored. */
  record(event: Event): void {
    const payload = event.payload;
    if (!payload) return;
    if (payload.$case === "toolCall") {
      this.#entry(payload.value.callId, payload.value.name).arguments = payload.value.arguments;
    } else if (payload.$case === "toolResult") {
      const r = payload.value;
      this.#entry(r.callId, r.name).result = {
        content: r.content, isError: r.isError, durationMs: r.durationMs, fullBytes: r.fullBytes, spillObject: r.spillObject, synthesized: r.synthesized,
      };
    } else if (payload.$case === "toolInner") {
      const c = payload.value;
      this.#entry(c.parentCallId, "").inner.push(`${c.index}. ${c.name} ${c.isError ? "error" : "ok"} ${c.arguments}\n${c.content}`);
    }
  }

  /** The number of a call, or undefined when it was never recorded. */
  number(callId: string): number | undefined {
    return this.#byId.get(callId)?.n;
  }

  /** How many calls were recorded. */
  get size(): number {
    return this.#byNumber.length;
  }

  /**
   * The whole call `n` (1-based) as terminal-safe text: name, call id, arguments (pretty JSON),
   * every inner call of a `run_code` program, and the result; undefined when there is no such call.
   */
  details(n: number): string | undefined {
    const call = this.#byNumber[n - 1];
    if (!call) return undefined;
    const lines = [`[${call.n}] ${call.name} (${call.callId})`, "arguments:", indent(prettyJson(call.arguments))];
    for (const inner of call.inner) lines.push(`inner call ${inner.split("\n")[0]}`, indent(inner.split("\n").slice(1).join("\n")));
    const r = call.result;
    if (!r) {
      lines.push("result: (none yet: the call is still running, waiting, or was never answered)");
    } else {
      const head = `result${r.isError ? " (error)" : ""} after ${Math.round(r.durationMs)} ms${r.synthesized ? ", written by crash recovery" : ""}:`;
      lines.push(head, indent(r.content === "" ? "(no output)" : r.content.replace(/\s+$/, "")));
      if (r.fullBytes > Buffer.byteLength(r.content)) {
        lines.push(`(the model saw the first ${Buffer.byteLength(r.content)} of ${r.fullBytes} bytes; the whole output is the spill object ${r.spillObject || "(none)"}, in /export)`);
      }
    }
    return terminalSafe(`${lines.join("\n")}\n`);
  }

  #entry(callId: string, name: string): CallRecord {
    let call = this.#byId.get(callId);
    if (!call) {
      call = { n: this.#byNumber.length + 1, callId, name, arguments: "", inner: [] };
      this.#byId.set(callId, call);
      this.#byNumber.push(call);
    } else if (name && !call.name) {
      call.name = name;
    }
    return call;
  }
}

function prettyJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function indent(text: string): string {
  return text.split("\n").map((line) => `    ${line}`).join("\n");
}
