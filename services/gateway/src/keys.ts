// API keys: the ones the operator configures (resolved to hashes at start) and the ones an
// admin creates over the API. A key is only ever stored as its hex SHA-256.
import { createHash, randomBytes } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import type { OperatorConfig } from "@tack/config";
import { errorCode, errorMessage } from "./thrown.js";

/** What a key may do: `admin` also manages its tenant's keys; `member` works with sessions only. */
export type Role = "admin" | "member";

/** Where a key came from: the operator configuration file, the gateway's start options (TACK_API_KEY), or the admin API. */
export type KeySource = "config" | "env" | "api";

/** A key as the gateway knows it: never the key itself. */
export interface ResolvedKey {
  readonly hash: string;
  readonly tenant: string;
  readonly role: Role;
  readonly name: string;
  readonly source: KeySource;
}

/** The hex SHA-256 of an API key: the only form in which keys are stored. */
export function hashApiKey(key: string): string {
  return createHash("sha256").update(key, "utf8").digest("hex");
}

/** The public id of a key: the first 12 hex digits of its hash (enough to name it, useless to guess it). */
export function keyId(hash: string): string {
  return hash.slice(0, 12);
}

/** A new random key (32 bytes); the caller shows it once and stores only `hashApiKey` of it. */
export function generateApiKey(): string {
  return `tack_${randomBytes(32).toString("base64url")}`;
}

/**
 * Resolves the operator configuration's keys (a `sha256` as given, an `env` variable's value
 * or a `file`'s trimmed content, hashed) plus the keys given at start (`startKeys`). A key
 * file readable by anyone but its owner is refused with the `chmod` that fixes it; one key
 * configured for two tenants or roles is refused.
 */
export function resolveConfiguredKeys(operator: OperatorConfig, startKeys: readonly { key: string; tenant: string; role?: Role; name?: string }[], env: NodeJS.ProcessEnv = process.env): ResolvedKey[] {
  const origin = operator.source ?? "the operator configuration";
  const resolved = new Map<string, ResolvedKey>();
  const add = (key: ResolvedKey, where: string) => {
    const previous = resolved.get(key.hash);
    if (previous && (previous.tenant !== key.tenant || previous.role !== key.role)) {
      throw new Error(`${where} is the same key as one configured for tenant ${previous.tenant} (${previous.role}); give each tenant and role its own key`);
    }
    // The configuration's entry wins over the same key given at start: its name and source are the operator's.
    if (!previous) resolved.set(key.hash, key);
  };
  for (const [i, configured] of operator.keys.entries()) {
    const where = `${origin}: keys[${i}]`;
    let hash: string;
    if (configured.sha256 !== undefined) hash = configured.sha256;
    else if (configured.env !== undefined) {
      const value = env[configured.env]?.trim();
      if (!value) throw new Error(`${where} reads the key from the environment variable ${configured.env}, which is not set; set it or remove the key`);
      if (/\s/.test(value)) throw new Error(`${where}: the environment variable ${configured.env} contains whitespace; a key is a single token`);
      hash = hashApiKey(value);
    } else hash = hashApiKey(readKeyFile(configured.file!, where));
    add({ hash, tenant: configured.tenant, role: configured.role, name: configured.name, source: "config" }, where);
  }
  for (const [i, start] of startKeys.entries()) {
    add({ hash: hashApiKey(start.key), tenant: start.tenant, role: start.role ?? "admin", name: start.name ?? "TACK_API_KEY", source: "env" }, `start key ${i + 1} (TACK_API_KEY)`);
  }
  return [...resolved.values()];
}

/** Reads a key file, which only its owner may read or write: a key others can read is no secret. */
function readKeyFile(file: string, where: string): string {
  let mode: number;
  try {
    mode = statSync(file).mode;
  } catch (error) {
    throw new Error(`${where}: cannot read the key file ${file} (${errorCode(error) ?? errorMessage(error)}); fix the path`);
  }
  if ((mode & 0o077) !== 0) {
    throw new Error(`${where}: the key file ${file} has mode ${(mode & 0o777).toString(8).padStart(4, "0")}, so others can read it; run \`chmod 600 ${file}\``);
  }
  const key = readFileSync(file, "utf8").trim();
  if (key === "" || /\s/.test(key)) throw new Error(`${where}: the key file ${file} must hold one key (a single token without spaces)`);
  return key;
}
