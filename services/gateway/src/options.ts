import type { FastifyInstance } from "fastify";
import type { Dialect } from "kysely";
import { z } from "zod";
import { assertToken, TackError, type BusAuth } from "@tack/bus";
import { loadOperatorConfig, type OperatorConfig } from "@tack/config";
import { postgresUrlProblem, type IndexLocation } from "./db.js";
import { resolveConfiguredKeys, type ResolvedKey, type Role } from "./keys.js";
import { errorMessage } from "./thrown.js";

/** One accepted API key and the tenant whose sessions it opens. */
export interface ApiKey {
  readonly key: string;
  readonly tenant: string;
  /** Default `admin`: a key handed to the gateway at start (TACK_API_KEY) is the operator's own. */
  readonly role?: Role;
  /** A label shown by the admin API (default `TACK_API_KEY`). */
  readonly name?: string;
}

/** Options of `startGateway`. */
export interface GatewayOptions {
  /** NATS server URL, e.g. `nats://127.0.0.1:4222`. */
  natsUrl: string;
  /** NATS user and TLS files (`commonConfig().natsAuth`); none for an open NATS. */
  natsAuth?: BusAuth;
  /** Bus namespace (default `tack`); tests use a unique one. */
  namespace?: string;
  /** Interface to listen on (default 127.0.0.1). */
  host?: string;
  /** Port to listen on (default 7700); 0 picks a free port. */
  port?: number;
  /** Port of the gRPC server (same host; 0 picks a free port); none: gRPC is off (main.ts: TACK_GATEWAY_GRPC_PORT). */
  grpcPort?: number;
  /**
   * Registers what the gateway serves beside the API, in its own Fastify scope: the web UI's
   * static files (src/ui.ts). Its routes must not be under /v1.
   */
  web?: (app: FastifyInstance) => Promise<void> | void;
  /**
   * Keys given at start (main.ts: TACK_API_KEY), in addition to the operator configuration's
   * `keys`; keys stored from earlier starts and listed in neither stop working (keys created
   * over the admin API stay until revoked).
   */
  apiKeys?: readonly ApiKey[];
  /** Tenants, their policy and configured keys; default `loadOperatorConfig()` (TACK_CONFIG). */
  operator?: OperatorConfig;
  /** SQLite file of the session index (`:memory:` for a throwaway index). Ignored when `postgresUrl` or `dialect` is set. */
  sqlitePath?: string;
  /**
   * PostgreSQL database of the session index, `postgres://USER:PASSWORD@HOST:5432/DATABASE`
   * (`postgresql://` too; `?sslmode=require` and the other libpq parameters pg reads): what gateway
   * replicas share. Ignored when `dialect` is set.
   */
  postgresUrl?: string;
  /** Any other kysely dialect for the index. */
  dialect?: Dialect;
  /** Interval of `: keepalive` comments on idle event streams (default 15,000 ms). */
  keepaliveMs?: number;
  /** How long to wait for the loop service to answer (default 30,000 ms). */
  loopTimeoutMs?: number;
}

/** Options after validation and defaults; trusted from here on. */
export interface CompiledOptions {
  readonly natsUrl: string;
  readonly namespace: string;
  readonly host: string;
  readonly port: number;
  readonly grpcPort: number | undefined;
  /** Every key from the start options and the operator configuration, as hashes. */
  readonly keys: readonly ResolvedKey[];
  readonly operator: OperatorConfig;
  readonly database: IndexLocation;
  readonly keepaliveMs: number;
  readonly loopTimeoutMs: number;
}

const Scalars = z.object({
  natsUrl: z.string().min(1, "natsUrl is required, e.g. nats://127.0.0.1:4222"),
  namespace: z.string().default("tack"),
  host: z.string().min(1).default("127.0.0.1"),
  port: z.number().int().min(0).max(65_535, "port must be 0-65535").default(7700),
  grpcPort: z.number().int().min(0).max(65_535, "grpcPort must be 0-65535").optional(),
  keepaliveMs: z.number().int().positive().default(15_000),
  loopTimeoutMs: z.number().int().positive().default(30_000),
});

/** Validates and defaults gateway options; throws a `gateway.bad_options` error naming the problem. */
export function compileOptions(options: GatewayOptions): CompiledOptions {
  const parsed = Scalars.safeParse(options);
  if (!parsed.success) {
    throw badOptions(parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
  }
  try {
    assertToken("namespace", parsed.data.namespace);
  } catch (error) {
    throw badOptions(errorMessage(error));
  }
  const operator = options.operator ?? loadOperatorConfig();
  const apiKeys = options.apiKeys ?? [];
  if (apiKeys.length === 0 && operator.keys.length === 0) {
    throw badOptions("no API key configured; set TACK_API_KEY or list keys in the operator configuration (TACK_CONFIG) (clients send a key as `Authorization: Bearer <key>`)");
  }
  for (const { key, tenant } of apiKeys) {
    if (key.trim() === "" || /\s/.test(key)) throw badOptions("an API key is empty or contains whitespace; use a single token such as a random hex string");
    try {
      assertToken("tenant", tenant);
    } catch (error) {
      throw badOptions(errorMessage(error));
    }
  }
  let keys: ResolvedKey[];
  try {
    keys = resolveConfiguredKeys(operator, apiKeys);
  } catch (error) {
    throw badOptions(errorMessage(error));
  }
  const database = indexLocation(options);
  if (!database) throw badOptions("no session index configured; pass sqlitePath (a file, or `:memory:`), postgresUrl or a kysely dialect");
  return { ...parsed.data, grpcPort: parsed.data.grpcPort, keys, operator, database };
}

/** The index the options name (a dialect first, then a PostgreSQL URL, then a SQLite file). */
function indexLocation(options: GatewayOptions): IndexLocation | undefined {
  if (options.dialect) return { dialect: options.dialect };
  if (options.postgresUrl !== undefined) {
    const problem = postgresUrlProblem(options.postgresUrl);
    if (problem) throw badOptions(`postgresUrl: ${problem}`);
    return { postgresUrl: options.postgresUrl };
  }
  return options.sqlitePath ? { sqlitePath: options.sqlitePath } : undefined;
}

function badOptions(message: string): TackError {
  return new TackError("gateway.bad_options", `invalid gateway options: ${message}`);
}
