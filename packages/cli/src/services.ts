// The services a Tack runs: a module of its own, so that parsing a command line does not load the launcher.

/** Every service `launch` knows, in start order. */
export const SERVICES = ["llm", "tools", "sandbox", "skills", "mcp", "loop", "gateway"] as const;

/** The name of one service: its code lives in `services/<name>/src/main.ts`. */
export type ServiceName = (typeof SERVICES)[number];

/** Most processes one service may run in one launch. */
export const MAX_REPLICAS = 32;

/**
 * What one service's process may receive from the launcher's environment beyond `BASE_ENV` (issue 18,
 * item 7: least secret per process). `settings` are passed when set; `secrets` reach this service and
 * no other (a variable named here is a secret for every service that does not name it).
 */
export interface ServiceEnv {
  /** Non-secret variables this service reads that are not `TACK_*` (those reach every service anyway). */
  readonly settings: readonly string[];
  /** Variable families by prefix, e.g. `DOCKER_` for the Docker client. */
  readonly prefixes?: readonly string[];
  /** Secrets this service reads (keys, passwords, URLs that may hold a password). */
  readonly secrets: readonly string[];
  /** Also the variables the operator configuration's `keys[].env` name (the API keys the gateway authenticates with). */
  readonly operatorKeys?: boolean;
}

/** The model providers' keys, as the llm service's credential loader reads them (`<PROVIDER>_API_KEY`, @tack/credentials). */
export const PROVIDER_KEY_VARIABLES = ["DEEPSEEK_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"] as const;

/**
 * What every service gets: the process basics (PATH, HOME for `~/.tack`, locale and time zone,
 * TMPDIR, NODE_COMPILE_CACHE: where the launcher keeps compiled bundles' V8 code cache), NATS (the URL; its own credentials file, or the operator's user and TLS files for a
 * given NATS), the OTEL_* telemetry settings, and every `TACK_*` setting that is not a secret.
 * NODE_OPTIONS is not passed: Tack sets none, and it could load code into every service.
 */
export const BASE_ENV = {
  names: [
    "PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "NODE_COMPILE_CACHE", "NATS_URL",
    "TACK_NATS_CREDENTIALS", "TACK_NATS_USER", "TACK_NATS_PASSWORD", "TACK_NATS_TLS_CA", "TACK_NATS_TLS_CERT", "TACK_NATS_TLS_KEY",
  ],
  prefixes: ["LC_", "OTEL_"],
} as const;

/**
 * A `TACK_*` variable whose name looks like a secret is treated as one even when no service
 * declares it: it reaches no service (a new secret must be declared where it is used).
 */
export const SECRET_NAME = /(_KEY|_TOKEN|_SECRET|PASSWORD|PASSWD)$|_(KEY|TOKEN|SECRET|PASSWORD)_/;

/** Each service's own variables: the one place that decides which process gets which secret. */
export const SERVICE_ENV: Readonly<Record<ServiceName, ServiceEnv>> = {
  // The provider keys and where the providers are; nobody else calls a model.
  llm: {
    settings: ["DEEPSEEK_BASE_URL", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "NODE_EXTRA_CA_CERTS"],
    secrets: [...PROVIDER_KEY_VARIABLES],
  },
  // web_search's keys only: Brave's, and DeepSeek's for DeepSeek's search (services/tools/src/web/search.ts).
  tools: { settings: ["NODE_EXTRA_CA_CERTS"], secrets: ["BRAVE_API_KEY", "DEEPSEEK_API_KEY"] },
  // The Docker client's settings (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH).
  sandbox: { settings: [], prefixes: ["DOCKER_"], secrets: [] },
  skills: { settings: [], secrets: [] },
  mcp: { settings: ["NODE_EXTRA_CA_CERTS"], secrets: [] },
  loop: { settings: [], secrets: [] },
  // The API keys it authenticates with, and its database (a postgres:// URL may hold a password).
  gateway: { settings: ["TACK_DB_PASSWORD_FILE"], secrets: ["TACK_API_KEY", "TACK_DB"], operatorKeys: true },
};
