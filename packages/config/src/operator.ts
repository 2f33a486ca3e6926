// The operator's configuration: tenants and their policy, API keys, workspace roots, the
// sandbox user, model script directories and retention. One YAML (or JSON) file, read once
// at start by every service that enforces part of it, validated here and trusted afterwards.
import { readFileSync, realpathSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { SANDBOX_MODES, type SandboxMode } from "./sandbox-modes.js";

const TOKEN = /^[a-z0-9][a-z0-9_-]{0,63}$/;
const tenantId = z.string().regex(TOKEN, "must be 1-64 lowercase letters, digits, '_' or '-'");
const count = (what: string) => z.number({ error: `must be a number (${what})` }).int("must be a whole number").positive("must be at least 1");

/** What one tenant may do: where its workspaces may be, how wide its sandboxes, how much it may use at once. */
const TenantPolicySchema = z.strictObject({
  /** Host directories under which a caller may name a workspace (absolute; resolved with realpath). */
  workspace_roots: z.array(z.string()).default([]),
  /** The widest sandbox mode a session of this tenant may create or change to. */
  max_sandbox_mode: z.enum(SANDBOX_MODES).default("workspace-write"),
  /** Sessions that exist at once (not deleted). */
  max_sessions: count("sessions at once").default(100),
  /** Sandbox containers running at once. */
  max_sandboxes: count("sandbox containers at once").default(10),
  /** Event streams (SSE) open at once. */
  max_event_streams: count("open event streams").default(20),
  /** API requests per minute, per tenant. */
  requests_per_minute: count("requests per minute").default(600),
  /** Money the tenant may spend in total, in US dollars; absent = no limit. */
  budget_usd: z.number().positive("must be a positive amount of US dollars").optional(),
  /** Model providers API callers of this tenant may name (`deepseek`, `scripted`, ...); absent = all. */
  model_providers: z.array(z.string().regex(/^[a-z0-9][a-z0-9_-]*$/, "must be a provider name such as deepseek or scripted")).optional(),
  /** Managed workspaces the tenant may hold at once (created over the API, not deleted). */
  max_workspaces: count("managed workspaces").default(100),
  /** Bytes all of the tenant's managed workspaces may hold together on a sandbox host (file contents, as `du -b` counts them). */
  max_workspace_bytes: count("bytes").default(20 * 1024 ** 3),
});

const KeySchema = z.strictObject({
  tenant: tenantId,
  role: z.enum(["admin", "member"]).default("member"),
  /** A label shown by the admin API (never the key). */
  name: z.string().max(100).default(""),
  /** The key itself is never in the file: its hex SHA-256, or the environment variable or file (mode 0600) holding it. */
  sha256: z.string().regex(/^[0-9a-f]{64}$/, "must be the 64 hex digits of the key's SHA-256").optional(),
  env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/, "must be an environment variable name").optional(),
  file: z.string().optional(),
}).refine((k) => [k.sha256, k.env, k.file].filter((v) => v !== undefined).length === 1, "give exactly one of sha256, env or file");

const REPLICAS_CHOICES = "must be 1 (a single NATS server), 3 or 5 (a JetStream cluster of at least that many servers; odd, so that a majority survives a failed server)";

/** The kinds of source `tack skills add` installs from, for `skills.install.sources`. */
export const SKILL_INSTALL_SOURCES = ["git", "npm", "path"] as const;
export type SkillInstallSource = (typeof SKILL_INSTALL_SOURCES)[number];

const ConfigSchema = z.strictObject({
  tenants: z.record(tenantId, TenantPolicySchema).default({}),
  keys: z.array(KeySchema).default([]),
  workspaces: z.strictObject({
    /** Where Tack-managed workspaces live on the sandbox hosts (one directory per tenant and workspace). */
    dir: z.string().optional(),
    /** Largest tar archive accepted for a new managed workspace. */
    max_upload_bytes: count("bytes").default(256 * 1024 * 1024),
    /** Most bytes of file contents one archive may unpack to; unpacking stops (and is undone) the moment it would cross this. */
    max_unpacked_bytes: count("bytes").default(2 * 1024 ** 3),
    /** Most entries (files, directories, links) one archive may hold. */
    max_entries: count("archive entries").default(200_000),
    /** Longest one archive may take to unpack. */
    unpack_timeout_seconds: count("seconds").default(300),
  }).default({ max_upload_bytes: 256 * 1024 * 1024, max_unpacked_bytes: 2 * 1024 ** 3, max_entries: 200_000, unpack_timeout_seconds: 300 }),
  sandbox: z.strictObject({
    /** The user every sandbox command runs as; never 0. Files it writes in a workspace belong to the workspace's owner through an ID-mapped mount. */
    uid: z.number().int().min(1, "must not be 0: sandboxes never run as root").max(2 ** 31).default(1000),
    gid: z.number().int().min(1, "must not be 0: sandboxes never run as root").max(2 ** 31).default(1000),
    /** What networked sandboxes (danger-full-access) may reach: the public internet, and only these of the private, link-local, reserved and host's own addresses. */
    egress: z.strictObject({
      /** IPv4 CIDRs reachable although refused by default, e.g. an internal package mirror `10.1.2.3/32`. */
      allow_cidrs: z.array(z.cidrv4("must be an IPv4 CIDR such as 10.1.2.3/32 (networked sandboxes have no IPv6)")).default([]),
      /** DNS (port 53) to the host's resolvers even in a refused range, so that names resolve. */
      allow_dns: z.boolean().default(true),
    }).default({ allow_cidrs: [], allow_dns: true }),
  }).default({ uid: 1000, gid: 1000, egress: { allow_cidrs: [], allow_dns: true } }),
  models: z.strictObject({
    /** Directories `scripted:` and `replay:` files must be inside (after symlinks). */
    script_dirs: z.array(z.string()).optional(),
    /** Largest script or recording accepted. */
    max_script_bytes: count("bytes").default(4 * 1024 * 1024),
  }).default({ max_script_bytes: 4 * 1024 * 1024 }),
  retention: z.strictObject({
    /** Sessions idle for longer than this are deleted (with their log, spill objects, sandboxes); absent = kept. */
    session_max_age_days: z.number().positive().optional(),
    /** How often the gateway looks for such sessions (fractions allowed). */
    sweep_interval_minutes: z.number().positive().optional(),
    /** Limits of the log stream itself (JetStream max_bytes / max_age). */
    log_max_bytes: count("bytes").optional(),
    log_max_age_days: z.number().positive().optional(),
  }).default({}),
  log: z.strictObject({
    /**
     * JetStream replicas of the session log and of the buckets the loop keeps beside it (leases,
     * tenant spend, spilled results): 1 on a single NATS server, 3 (or 5) on a JetStream cluster
     * of at least that many servers. Odd, so that a majority remains when servers fail.
     */
    replicas: z.number({ error: REPLICAS_CHOICES }).refine((n) => LOG_REPLICAS.includes(n as LogReplicas), REPLICAS_CHOICES).default(1),
  }).default({ replicas: 1 }),
  skills: z.strictObject({
    /** What `tack skills add` may install into the user's and workspaces' skill folders. */
    install: z.strictObject({
      /** false: no install at all. */
      allow: z.boolean({ error: "must be true or false" }).default(true),
      /** Which kinds of source: git URLs, npm packages (or their .tgz), local folders. */
      sources: z.array(z.enum(SKILL_INSTALL_SOURCES, { error: `must be one of ${SKILL_INSTALL_SOURCES.join(", ")}` })).default([...SKILL_INSTALL_SOURCES]),
    }).default({ allow: true, sources: [...SKILL_INSTALL_SOURCES] }),
  }).default({ install: { allow: true, sources: [...SKILL_INSTALL_SOURCES] } }),
});

/** The JetStream replica counts the log may have. */
export const LOG_REPLICAS = [1, 3, 5] as const;
export type LogReplicas = (typeof LOG_REPLICAS)[number];

/** A tenant's policy after defaults. */
export type TenantPolicy = Readonly<z.infer<typeof TenantPolicySchema>> & { readonly max_sandbox_mode: SandboxMode };

/** One configured API key (the key is resolved from `sha256`, `env` or `file` by the gateway). */
export type ConfiguredKey = Readonly<z.infer<typeof KeySchema>>;

/** The validated operator configuration, with paths resolved against `baseDir`. */
export interface OperatorConfig {
  /** The file it came from, or undefined for the built-in defaults. */
  readonly source: string | undefined;
  readonly tenants: Readonly<Record<string, TenantPolicy>>;
  readonly keys: readonly ConfiguredKey[];
  readonly workspaces: {
    readonly dir: string;
    readonly maxUploadBytes: number;
    /** Bounds of unpacking one archive (`max_unpacked_bytes`, `max_entries`, `unpack_timeout_seconds`). */
    readonly maxUnpackedBytes: number;
    readonly maxEntries: number;
    readonly unpackTimeoutMs: number;
  };
  readonly sandbox: { readonly uid: number; readonly gid: number; readonly egress: { readonly allowCidrs: readonly string[]; readonly allowDns: boolean } };
  readonly models: { readonly scriptDirs: readonly string[]; readonly maxScriptBytes: number };
  readonly retention: { readonly sessionMaxAgeDays?: number; readonly sweepIntervalMinutes: number; readonly logMaxBytes?: number; readonly logMaxAgeDays?: number };
  /** JetStream replicas of the session log, the lease and spend buckets and the spill store. */
  readonly log: { readonly replicas: LogReplicas };
  /** Whether `tack skills add` may install, and from which kinds of source. */
  readonly skills: { readonly install: { readonly allow: boolean; readonly sources: readonly SkillInstallSource[] } };
  /** Directories no workspace may be inside of or contain: Tack's install and its state directory. */
  readonly protectedPaths: readonly string[];
}

/** Raised for an invalid operator configuration; the message names the file, the field and the fix. */
export class OperatorConfigError extends Error {
  readonly code = "config.invalid";
  constructor(message: string) {
    super(message);
    this.name = "OperatorConfigError";
  }
}

/** Where Tack is installed (the repository root): never a workspace. */
export const INSTALL_DIR = resolve(new URL("../../..", import.meta.url).pathname);

/**
 * The defaults when no file is configured: one tenant `local` whose workspaces may be under
 * the home directory (never containing Tack's install or state), scripts from the bundled
 * `examples/` and `<state>/scripts`.
 */
function defaults(): z.input<typeof ConfigSchema> {
  return { tenants: { local: { workspace_roots: [homedir()] } } };
}

/**
 * Reads the operator configuration: the file named by `TACK_CONFIG`, else `<state>/config.yaml`
 * when it exists, else the defaults. `TACK_STATE_DIR` (default `.tack` in the working
 * directory) is Tack's own state; relative paths in the file resolve against the file's folder.
 */
export function loadOperatorConfig(env: NodeJS.ProcessEnv = process.env): OperatorConfig {
  const stateDir = resolve(env.TACK_STATE_DIR || ".tack");
  const explicit = env.TACK_CONFIG || undefined;
  const candidate = explicit ? resolve(explicit) : resolve(stateDir, "config.yaml");
  let text: string | undefined;
  try {
    text = readFileSync(candidate, "utf8");
  } catch (error) {
    if (explicit) throw new OperatorConfigError(`cannot read TACK_CONFIG file ${candidate} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); fix the path or unset TACK_CONFIG to use the defaults`);
  }
  if (text === undefined) return compileOperatorConfig(defaults(), { stateDir, baseDir: stateDir, source: undefined });
  let raw: unknown;
  try {
    raw = parseYaml(text) ?? {};
  } catch (error) {
    throw new OperatorConfigError(`${candidate} is not valid YAML: ${(error as Error).message.split("\n")[0]}`);
  }
  return compileOperatorConfig(raw, { stateDir, baseDir: resolve(candidate, ".."), source: candidate });
}

/** Validates and defaults a configuration object (`raw`, as parsed from YAML); throws `OperatorConfigError` naming the field. */
export function compileOperatorConfig(raw: unknown, where: { stateDir: string; baseDir: string; source: string | undefined }): OperatorConfig {
  const origin = where.source ?? "the built-in operator configuration";
  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join(".") || "(top level)"}: ${i.message}`).join("; ");
    throw new OperatorConfigError(`${origin} is invalid: ${problems}`);
  }
  const data = parsed.data;
  const absolute = (path: string) => resolve(where.baseDir, path);
  const tenants: Record<string, TenantPolicy> = {};
  for (const [id, policy] of Object.entries(data.tenants)) {
    tenants[id] = { ...policy, workspace_roots: policy.workspace_roots.map((root, i) => canonicalRoot(root, `${origin}: tenants.${id}.workspace_roots[${i}]`)) };
  }
  for (const [i, key] of data.keys.entries()) {
    if (!(key.tenant in tenants)) throw new OperatorConfigError(`${origin} is invalid: keys[${i}].tenant ${JSON.stringify(key.tenant)} is not a configured tenant; add it under tenants:`);
  }
  const scriptDirs = data.models.script_dirs?.map(absolute) ?? [resolve(INSTALL_DIR, "examples"), resolve(where.stateDir, "scripts")];
  return {
    source: where.source,
    tenants,
    keys: data.keys.map((k) => (k.file === undefined ? k : { ...k, file: absolute(k.file) })),
    workspaces: { dir: absolute(data.workspaces.dir ?? resolve(where.stateDir, "workspaces")), maxUploadBytes: data.workspaces.max_upload_bytes,
      maxUnpackedBytes: data.workspaces.max_unpacked_bytes, maxEntries: data.workspaces.max_entries, unpackTimeoutMs: data.workspaces.unpack_timeout_seconds * 1000,
    },
    sandbox: { uid: data.sandbox.uid, gid: data.sandbox.gid, egress: { allowCidrs: data.sandbox.egress.allow_cidrs, allowDns: data.sandbox.egress.allow_dns } },
    models: { scriptDirs: scriptDirs.map(realpathOrSelf), maxScriptBytes: data.models.max_script_bytes },
    retention: {
      ...(data.retention.session_max_age_days !== undefined ? { sessionMaxAgeDays: data.retention.session_max_age_days } : {}),
      sweepIntervalMinutes: data.retention.sweep_interval_minutes ?? 60,
      ...(data.retention.log_max_bytes !== undefined ? { logMaxBytes: data.retention.log_max_bytes } : {}),
      ...(data.retention.log_max_age_days !== undefined ? { logMaxAgeDays: data.retention.log_max_age_days } : {}),
    },
    log: { replicas: data.log.replicas as LogReplicas },
    skills: { install: { allow: data.skills.install.allow, sources: [...new Set(data.skills.install.sources)] } },
    protectedPaths: [...new Set([INSTALL_DIR, where.stateDir].map(realpathOrSelf))],
  };
}

/** A workspace root as an absolute path with symlinks resolved (a root that does not exist yet is kept as written). */
function canonicalRoot(root: string, field: string): string {
  if (!isAbsolute(root)) throw new OperatorConfigError(`${field} is ${JSON.stringify(root)}: workspace roots must be absolute paths`);
  const canonical = realpathOrSelf(root);
  if (canonical === "/") throw new OperatorConfigError(`${field} is /: a root of / would let a caller mount any host directory; name the directories that hold projects`);
  try {
    if (!statSync(canonical).isDirectory()) throw new OperatorConfigError(`${field} ${root} is not a directory`);
  } catch (error) {
    if (error instanceof OperatorConfigError) throw error;
  }
  return canonical;
}

function realpathOrSelf(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return resolve(path);
  }
}

const UNLISTED_TENANT: TenantPolicy = TenantPolicySchema.parse({});

/** The policy of `tenant`: its own, or the defaults for a tenant the configuration does not list. */
export function tenantPolicy(config: OperatorConfig, tenant: string): TenantPolicy {
  return config.tenants[tenant] ?? UNLISTED_TENANT;
}

/** True when `path` is `dir` or inside it (both canonical). */
export function isInside(path: string, dir: string): boolean {
  return path === dir || path.startsWith(dir.endsWith("/") ? dir : `${dir}/`);
}
