// Issue 19 item 1: every rpc on the bus is served and asked through a descriptor generated from
// its proto service (packages/bus/src/gen/descriptors.ts), never a hand-written subject or a
// hand-picked codec pair; and the descriptors keep the wire subjects of `Names`, so replicas
// from before and after the descriptors interoperate.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { BUS_RPCS, LlmRpc, LoopRpc, McpRpc, names, rpcSubject, rpcSubjectPatterns, SandboxRpc, SkillsRpc, ToolsRpc, WorkspacesRpc, type Names, type Rpc } from "@tack/bus";
import { replicaSubject } from "@tack/sandbox-service";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "..", "..");
const SCANNED = ["services", "packages", "bench", "test"];

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    if (name === "node_modules" || name === "gen" || name === "dist") continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...sources(path));
    else if (/\.(ts|tsx|mts)$/.test(name)) out.push(path);
  }
  return out;
}

/** The top-level arguments of the call whose `(` is at `open`. */
function callArguments(text: string, open: number): string[] {
  const args: string[] = [];
  let depth = 0;
  let start = open + 1;
  let quote: string | undefined;
  for (let i = open; i < text.length; i++) {
    const c = text[i]!;
    if (quote) {
      if (c === "\\") i++;
      else if (c === quote) quote = undefined;
      continue;
    }
    if (c === '"' || c === "'" || c === "`") quote = c;
    else if ("([{".includes(c)) depth++;
    else if (")]}".includes(c)) {
      depth--;
      if (depth === 0) {
        args.push(text.slice(start, i).trim());
        return args.filter((a) => a !== "");
      }
    } else if (c === "," && depth === 1) {
      args.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  return args;
}

const CODEC = /^[A-Z]\w*(\.(requestType|responseType))?$|Codec$/;
const HAND_SUBJECT = /^["'`]|\.names\.|Subject\(/;

/** Hand-built bus calls in `text`: the old subject-and-codecs forms, or a subject string where a descriptor goes. */
export function handBuiltCalls(text: string): string[] {
  const found: string[] = [];
  for (const m of text.matchAll(/([\w#.]+)\.(serve|request)\(|\b(requestStream|serveStream)\(/g)) {
    const receiver = m[1] ?? "";
    // Raw NATS (pings, JetStream API, discovery) is not an rpc.
    if (/(^|\.)nc$/.test(receiver)) continue;
    const args = callArguments(text, m.index! + m[0].length - 1);
    const line = text.slice(0, m.index).split("\n").length;
    const at = `line ${line}: ${m[0]}${args.slice(0, 2).join(", ")}…`;
    if (m[2] === "serve" && args.length >= 5 && CODEC.test(args[2]!) && CODEC.test(args[3]!)) found.push(at);
    else if (m[2] === "request" && args.length >= 4 && CODEC.test(args[1]!) && CODEC.test(args[3]!)) found.push(at);
    else if (m[2] && args.length >= 1 && HAND_SUBJECT.test(args[0]!) && /bus|client|server|responder|\.#bus/i.test(receiver)) found.push(at);
    else if (m[3] === "requestStream" && args.length >= 7) found.push(at);
    else if (m[3] === "serveStream" && args.length >= 6) found.push(at);
  }
  return found;
}

describe("bus descriptors", () => {
  it("bus descriptors - no hand-written subject or codec pair reaches bus.serve / bus.request anywhere outside generated code", () => {
    const offenders: string[] = [];
    for (const top of SCANNED) {
      for (const file of sources(join(ROOT, top))) {
        const rel = relative(ROOT, file);
        if (rel === "test/contract/bus-descriptors.test.ts") continue;
        for (const call of handBuiltCalls(readFileSync(file, "utf8"))) offenders.push(`${rel} ${call}`);
      }
    }
    expect(offenders, "pass a generated descriptor (LoopRpc.SubmitMessage, SandboxRpc.Exec.at({ replica }), …) instead of a subject and codecs; see docs/decisions/0022-bus-descriptors.md").toEqual([]);
  });

  it("bus descriptors - the check catches the old forms and lets descriptor calls and raw NATS through", () => {
    expect(handBuiltCalls("bus.serve(bus.names.llmCheck, \"llm\", CheckModelRequest, CheckModelResponse, async () => x)")).toHaveLength(1);
    expect(handBuiltCalls("await this.#bus.request(subject, ExecRequest, request, ExecResponse, { timeoutMs })")).toHaveLength(1);
    expect(handBuiltCalls("client.request(`${ns}.llm.check`, req)")).toHaveLength(1);
    expect(handBuiltCalls("requestStream(bus, bus.names.llmComplete, CompleteRequest, r, CompleteStreamMessage, on, last)")).toHaveLength(1);
    expect(handBuiltCalls("bus.serve(LlmRpc.CheckModel, async (r) => ({ provider: r.model }))")).toEqual([]);
    expect(handBuiltCalls("bus.request(LoopRpc.SubmitMessage.at({ session: id }), req, { timeoutMs: 5 })")).toEqual([]);
    expect(handBuiltCalls("bus.nc.request(`$SRV.PING.tack-llm`, \"\", { timeout: 250 })")).toEqual([]);
  });

  it("bus descriptors - every rpc keeps the wire subject replicas before the descriptors used (old and new replicas interoperate), and Names holds none", () => {
    const wire: Array<[string, Rpc]> = [
      ["llm.complete", LlmRpc.Complete], ["llm.check", LlmRpc.CheckModel], ["llm.estimate", LlmRpc.EstimateCost], ["llm.count", LlmRpc.CountTokens],
      ["tools.call", ToolsRpc.CallTool], ["tools.list", ToolsRpc.ListTools], ["tools.web_health", ToolsRpc.WebSearchHealth], ["tools.rules", ToolsRpc.ReadRules],
      ["tools.hook_config", ToolsRpc.ReadHooksConfig], ["tools.hook_run", ToolsRpc.RunHook],
      ["skills.catalog", SkillsRpc.Catalog], ["skills.load", SkillsRpc.LoadSkill], ["skills.invalidate", SkillsRpc.Invalidate],
      ["mcp.list", McpRpc.ListTools], ["mcp.call", McpRpc.CallTool],
      ["sandbox.ensure", SandboxRpc.EnsureSandbox], ["sandbox.exec", SandboxRpc.Exec], ["sandbox.release", SandboxRpc.ReleaseSandbox], ["sandbox.processes", SandboxRpc.ListProcesses],
      ["sandbox.workspace.create", WorkspacesRpc.CreateWorkspace], ["sandbox.workspace.export", WorkspacesRpc.ExportWorkspace], ["sandbox.workspace.delete", WorkspacesRpc.DeleteWorkspace],
      ["loop.create", LoopRpc.CreateSession], ["loop.submit", LoopRpc.SubmitMessage], ["loop.decide", LoopRpc.DecideApproval], ["loop.mode", LoopRpc.SetSandboxMode],
      ["loop.delete", LoopRpc.DeleteSession], ["loop.copy", LoopRpc.CopySession], ["loop.cancel", LoopRpc.CancelTurn], ["loop.compact", LoopRpc.CompactSession],
    ];
    for (const [subject, rpc] of wire) expect(rpcSubject("ns1", rpc), rpc.fullName).toBe(`ns1.${subject}`);
    const owner: Array<[string, Rpc]> = [
      ["submit", LoopRpc.SubmitMessage], ["decide", LoopRpc.DecideApproval], ["mode", LoopRpc.SetSandboxMode],
      ["delete", LoopRpc.DeleteSession], ["cancel", LoopRpc.CancelTurn], ["compact", LoopRpc.CompactSession],
    ];
    for (const [op, rpc] of owner) {
      expect(rpcSubject("ns1", rpc.at({ session: "s1" }))).toBe(`ns1.loop.session.s1.${op}`);
      expect(rpc.at({ session: "s1" }).queue).toBe("loop-owner");
    }
    // Names keeps streams, buckets, log and other non-rpc subjects only: an rpc subject there would be a second source.
    const n: Names = names("ns1");
    const served = new Set(BUS_RPCS.flatMap((rpc) => rpcSubjectPatterns("ns1", rpc)));
    const values = Object.values(n).filter((v): v is string => typeof v === "string");
    expect(values.filter((v) => served.has(v))).toEqual([]);
    expect(n.logSubject("t1", "s1").startsWith("ns1.log.")).toBe(true);
    const replica: Array<["ensure" | "exec" | "release" | "processes" | "stdio_open", Rpc]> = [
      ["ensure", SandboxRpc.EnsureSandbox], ["exec", SandboxRpc.Exec], ["release", SandboxRpc.ReleaseSandbox], ["processes", SandboxRpc.ListProcesses], ["stdio_open", SandboxRpc.OpenStdio],
    ];
    for (const [verb, rpc] of replica) expect(rpcSubject("ns1", rpc.at({ replica: "r1" }))).toBe(replicaSubject("ns1", "r1", verb));
    expect(rpcSubject("ns1", SandboxRpc.OpenStdio)).toBe("ns1.sandbox.stdio.open");
    // Every descriptor is generated from a proto rpc and names it with its version.
    for (const rpc of BUS_RPCS) expect(rpc.fullName).toMatch(/^tack\.[a-z]+\.v\d+\.[A-Z]\w*\/[A-Z]\w*$/);
  });
});
