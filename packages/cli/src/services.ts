// The services a Tack runs: a module of its own, so that parsing a command line does not load the launcher.

/** Every service `launch` knows, in start order. */
export const SERVICES = ["llm", "tools", "sandbox", "skills", "mcp", "loop", "gateway"] as const;

/** The name of one service: its code lives in `services/<name>/src/main.ts`. */
export type ServiceName = (typeof SERVICES)[number];

/** Most processes one service may run in one launch. */
export const MAX_REPLICAS = 32;
