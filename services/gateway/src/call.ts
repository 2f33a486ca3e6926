// What every operation of the gateway receives, whichever transport (REST or gRPC) carried it.

/** The authenticated caller: its key (by hash, never the key), the key's name and role. */
export interface Caller {
  readonly keyHash: string;
  /** The key's name (the person or tool it was issued to): who decided, in the log and the audit trail. */
  readonly keyName: string;
  readonly role: "admin" | "member";
}

/** One call of an operation by an authenticated caller. */
export interface Call {
  /** The caller's tenant: the only tenant whose sessions, workspaces and keys it sees. */
  readonly tenant: string;
  readonly caller: Caller;
  /** How refusals name the operation: `GET /v1/admin/keys` over REST, `gRPC ListKeys` over gRPC. */
  readonly label: string;
}

/** What a unary operation answers: the JSON body (the proto response message in its REST form) and extra REST headers. */
export interface Reply {
  readonly body: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /** `JSON.stringify(body)`, when the operation already has it (REST sends it as is). */
  readonly json?: string;
}

/** A unary operation: the request is the proto request message in its REST form (snake_case fields, validated, defaults applied). */
export type Operation = (call: Call, request: Record<string, unknown>) => Promise<Reply>;
