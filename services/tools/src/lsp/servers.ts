import { posix } from "node:path";

/** Where scripts/build-sandbox-image.sh puts the language servers in the sandbox image. */
export const LSP_DIR = "/usr/local/lib/tack-lsp";

/**
 * One language server as the broker starts it. The broker knows nothing about languages: each
 * request carries its server's entry, so a new language is a new entry here (and its server in
 * the image), not a broker change.
 */
export interface LanguageServer {
  /** Key of the server in the broker, with the workspace root: one process per (root, id). */
  readonly id: string;
  /** What error messages call it. */
  readonly name: string;
  /** argv, run in the workspace root with the container's environment. */
  readonly command: readonly string[];
  /** File extension (with the dot) → LSP language id of the documents it opens. */
  readonly languages: Readonly<Record<string, string>>;
  /** Sent as `initializationOptions`. */
  readonly initializationOptions?: unknown;
}

export const LANGUAGE_SERVERS: readonly LanguageServer[] = [
  {
    id: "typescript",
    name: "typescript-language-server",
    command: ["node", `${LSP_DIR}/node_modules/typescript-language-server/lib/cli.mjs`, "--stdio"],
    languages: {
      ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "typescriptreact",
      ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascriptreact",
    },
    // No network in the sandbox: fetching @types would only fail, slowly. No syntax server: while
    // the project loads it answers definitions from the open file alone (the import, not the
    // declaration); a tool call would rather wait. The workspace's own typescript is used when
    // it has one, else the image's.
    initializationOptions: { disableAutomaticTypingAcquisition: true, tsserver: { useSyntaxServer: "never" } },
  },
];

/** The server for `path` and the language id of the document, by extension; undefined when none handles it. */
export function serverFor(path: string): { server: LanguageServer; languageId: string } | undefined {
  const extension = posix.extname(path).toLowerCase();
  for (const server of LANGUAGE_SERVERS) {
    const languageId = server.languages[extension];
    if (languageId) return { server, languageId };
  }
  return undefined;
}

/** Every extension some server handles, for error messages. */
export function supportedExtensions(): string[] {
  return LANGUAGE_SERVERS.flatMap((server) => Object.keys(server.languages));
}
