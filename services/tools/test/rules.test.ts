import { ToolsRpc } from "@tack/bus";
import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ReadRulesRequest } from "@tack/proto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RULES_READ_BYTES } from "../src/rules.js";
import { ToolsOverBus } from "./support/over-bus.js";

// tools.rules against the real tools and sandbox services: the files are read inside the session's container.
describe("tools.rules in the sandbox", () => {
  let s: ToolsOverBus;
  beforeAll(async () => {
    s = await ToolsOverBus.start({ mode: "standard", sessionId: "r1" });
  });
  afterAll(() => s?.stop());

  const rules = (dirs: string[]) => s.bus.request(ToolsRpc.ReadRules, ReadRulesRequest.fromPartial({
    sessionId: "r1", tenant: "t1", workspace: s.workspace, sandboxMode: "read-only", dirs,
  }), { timeoutMs: 60_000 });
  const sha = (data: string | Buffer) => createHash("sha256").update(data).digest("hex");

  it("tools.rules - reads each folder's AGENTS.md and CLAUDE.md whole-file hashed and framed, reports what it cannot read", async () => {
    const big = "x".repeat(RULES_READ_BYTES + 100);
    const odd = "we ird\ndir";
    mkdirSync(join(s.workspace, "src/api"), { recursive: true });
    mkdirSync(join(s.workspace, "docs/AGENTS.md"), { recursive: true });
    mkdirSync(join(s.workspace, odd));
    writeFileSync(join(s.workspace, "AGENTS.md"), "root rules\nF 1 2 3\n");
    writeFileSync(join(s.workspace, "CLAUDE.md"), big);
    writeFileSync(join(s.workspace, "src/api/CLAUDE.md"), "api rules ünïcode");
    writeFileSync(join(s.workspace, odd, "AGENTS.md"), Buffer.from([0, 1, 2, 0xff]));

    const { files } = await rules([".", "/workspace/src", "src/api", "docs", odd, "missing"]);
    expect(files.map((f) => ({ ...f, content: Buffer.from(f.content).toString("utf8") }))).toEqual([
      { path: "AGENTS.md", content: "root rules\nF 1 2 3\n", bytes: 19, sha256: sha("root rules\nF 1 2 3\n"), error: "" },
      { path: "CLAUDE.md", content: big.slice(0, RULES_READ_BYTES), bytes: big.length, sha256: sha(big), error: "" },
      { path: "src/api/CLAUDE.md", content: "api rules ünïcode", bytes: Buffer.byteLength("api rules ünïcode"), sha256: sha("api rules ünïcode"), error: "" },
      { path: "docs/AGENTS.md", content: "", bytes: 0, sha256: "", error: "is not a regular file" },
      { path: `${odd}/AGENTS.md`, content: "\u0000\u0001\u0002\ufffd", bytes: 4, sha256: sha(Buffer.from([0, 1, 2, 0xff])), error: "" },
    ]);
    expect(Buffer.from(files[4]!.content)).toEqual(Buffer.from([0, 1, 2, 0xff]));
  });

  it("tools.rules - a folder outside /workspace is refused with what to send instead", async () => {
    await expect(rules(["../etc"])).rejects.toMatchObject({ code: "tools.invalid_request", message: expect.stringContaining('send folders relative to it, e.g. "src/api"') });
    await expect(rules(["/etc"])).rejects.toMatchObject({ code: "tools.invalid_request" });
  });
});
