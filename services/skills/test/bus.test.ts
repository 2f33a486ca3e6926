// The skills service over real NATS: catalog, load (and its refusals as BusErrors), invalidate
// and micro-service discovery.
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Bus, discoverMicro, SkillsRpc, TackError } from "@tack/bus";
import { afterEach, beforeEach, expect, it } from "vitest";
import { startSkillsService, type SkillsService } from "../src/index.js";

const NATS_URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

let dir: string;
let ws: string;
let service: SkillsService;
let client: Bus;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "tack-skills-bus-"));
  ws = join(dir, "ws");
  await mkdir(join(ws, ".tack", "skills", "review"), { recursive: true });
  await mkdir(join(dir, "operator"));
  await writeFile(join(ws, ".tack", "skills", "review", "SKILL.md"), "---\ndescription: review a change\n---\nRead the diff.\n");
  await writeFile(join(ws, ".tack", "skills", "review", "checklist.md"), "- tests\n");
  await writeFile(join(dir, "operator", "release.md"), "---\ndescription: cut a release\ndisable-model-invocation: true\n---\nTag it.\n");
  const namespace = `t${randomBytes(6).toString("hex")}`;
  // Long debounce: the invalidate request, not the watcher, must make the change visible.
  service = await startSkillsService({ natsUrl: NATS_URL, namespace, home: join(dir, "home"), operatorRoots: [join(dir, "operator")], bundledRoot: join(dir, "bundled"), debounceMs: 60_000 });
  client = await Bus.connect({ url: NATS_URL, namespace, name: "test-client" });
});

afterEach(async () => {
  await client.close();
  await service.stop();
  await rm(dir, { recursive: true, force: true });
});

const catalog = () => client.request(SkillsRpc.Catalog, { workspace: ws });
const load = (name: string, by: string) => client.request(SkillsRpc.LoadSkill, { workspace: ws, name, by });

it("bus - serves the catalog, bodies, refusals as errors and invalidate, and answers discovery as tack-skills", async () => {
  const first = await catalog();
  expect(first.warnings).toEqual([]);
  expect(first.entries).toEqual([
    { name: "release", description: "cut a release", source: { root: "operator", path: join(dir, "operator", "release.md") }, modelInvocable: false, userInvocable: true },
    { name: "review", description: "review a change", source: { root: "workspace:.tack/skills", path: join(ws, ".tack", "skills", "review", "SKILL.md") }, modelInvocable: true, userInvocable: true },
  ]);
  expect((await catalog()).digest).toBe(first.digest);

  expect(await load("review", "model")).toEqual({
    name: "review", body: "Read the diff.\n", path: join(ws, ".tack", "skills", "review", "SKILL.md"), files: ["checklist.md"], filesTruncated: false,
    source: { root: "workspace:.tack/skills", path: join(ws, ".tack", "skills", "review", "SKILL.md") },
  });
  expect((await load("release", "user")).body).toBe("Tag it.\n");
  const refused = await load("release", "model").then(() => undefined, (e: unknown) => e);
  expect(refused).toBeInstanceOf(TackError);
  expect(refused).toMatchObject({ code: "skills.model_not_allowed", message: expect.stringContaining("only the user can run it, by typing /release") });
  await expect(load("reveiw", "model")).rejects.toMatchObject({ code: "skills.unknown", message: 'no skill named "reveiw"; did you mean "review"?' });
  await expect(client.request(SkillsRpc.Catalog, { workspace: "relative" }))
    .rejects.toMatchObject({ code: "skills.invalid_request" });

  // A write under a skills root, then invalidate: the next catalog has the new skill and digest.
  const added = join(ws, ".tack", "skills", "fix.md");
  await writeFile(added, "---\ndescription: fix a bug\n---\nReproduce first.\n");
  expect(await client.request(SkillsRpc.Invalidate, { workspace: ws, path: added })).toEqual({ recomputed: true });
  const second = await catalog();
  expect(second.entries.map((e) => e.name)).toEqual(["fix", "release", "review"]);
  expect(second.digest).not.toBe(first.digest);
  expect(await client.request(SkillsRpc.Invalidate, { workspace: ws, path: join(ws, "README.md") })).toEqual({ recomputed: false });

  const found = await discoverMicro(client, { service: "skills" });
  expect(found.map((f) => f.instance.service)).toEqual(["skills"]);
});
