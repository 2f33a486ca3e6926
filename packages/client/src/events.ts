// Session log events as the gateway sends them (the protobuf JSON form of `tack.log.v1.Event`).
// Proto3 JSON leaves out default values: a missing number is 0, a missing string "", a missing
// boolean false, a missing list empty — every payload field is optional here for that reason.

/** A tool call as the model wrote it (arguments are JSON text, possibly invalid). */
export interface ToolCallJson { id?: string; name?: string; arguments?: string }

/** Tokens of one model call. */
export interface UsageJson { inputMissTokens?: number; inputHitTokens?: number; outputTokens?: number; reasoningTokens?: number }

/** The payloads a client typically shows, by their JSON key. Others are `unknown` records. */
export interface EventPayloads {
  sessionCreated: { sessionId?: string; tenant?: string; mode?: string; model?: string; workspace?: string; formatVersion?: number; title?: string; budgetUsd?: number };
  sandboxMode: { mode?: string; changedBy?: string };
  approvalPolicy: { policy?: string };
  turnStart: { turn?: number; userMessageSeq?: number };
  turnEnd: { turn?: number; reason?: string; steps?: number };
  stepStart: { turn?: number; step?: number };
  stepEnd: { turn?: number; step?: number; toolCalls?: number };
  requestHeader: { reason?: string; model?: string; systemPrompt?: string; temperature?: number; maxTokens?: number; tools?: unknown[] };
  assistantChunks: { turn?: number; step?: number; deltas?: Array<{ kind?: "KIND_UNSPECIFIED" | "KIND_TEXT" | "KIND_REASONING" | "KIND_TOOL_CALL"; text?: string; toolIndex?: number; toolCallId?: string; toolName?: string }> };
  assistantMessage: { turn?: number; step?: number; content?: string; reasoningContent?: string; toolCalls?: ToolCallJson[]; finishReason?: string };
  userMessage: { text?: string };
  toolCall: { callId?: string; name?: string; arguments?: string; turn?: number; step?: number };
  toolResult: { callId?: string; name?: string; content?: string; isError?: boolean; durationMs?: number; synthesized?: boolean; spillObject?: string; fullBytes?: number };
  usage: { turn?: number; step?: number; model?: string; usage?: UsageJson; costUsd?: number; priceWindow?: string };
  error: { code?: string; message?: string; retryable?: boolean; turn?: number; step?: number };
  recovery: { previousOwner?: string; owner?: string; interruptedCallIds?: string[]; unstartedCallIds?: string[] };
  approvalAsked: { callId?: string; toolName?: string; operation?: string; currentMode?: string; requestedMode?: string; justification?: string; turn?: number; step?: number; kind?: string };
  approvalDecided: { callId?: string; decision?: string; decidedBy?: string };
  llmRetry: { turn?: number; step?: number; attempt?: number; code?: string; message?: string; delayMs?: number };
  toolRetry: { callId?: string; attempt?: number; hop?: string; code?: string; message?: string; delayMs?: number };
  contextSummarized: { fromSeq?: number; toSeq?: number; summarySeq?: number; model?: string; usage?: UsageJson; costUsd?: number };
  todoUpdated: { callId?: string; items?: Array<{ id?: string; content?: string; status?: string }> };
  questionAsked: { callId?: string; questions?: Array<{ header?: string; question?: string; multiSelect?: boolean; options?: Array<{ label?: string; description?: string }> }>; turn?: number; step?: number };
  questionAnswered: { callId?: string; outcome?: string; answers?: Array<{ selected?: string[]; other?: string }>; answeredBy?: string };
  planMode: { on?: boolean; changedBy?: string };
  planSubmitted: { callId?: string; plan?: string; turn?: number; step?: number };
  planDecided: { callId?: string; decision?: string; feedback?: string; decidedBy?: string };
  toolInner: { parentCallId?: string; index?: number; name?: string; arguments?: string; content?: string; isError?: boolean; durationMs?: number };
  sessionMode: { mode?: string; changedBy?: string };
  rulesLoaded: { files?: Array<{ label?: string; content?: string; sha256?: string; truncated?: boolean }> };
  rulesWarning: { label?: string; message?: string };
  skillsCatalog: { skills?: Array<{ name?: string; description?: string; source?: string; modelInvocable?: boolean; userInvocable?: boolean }>; digest?: string };
  skillsWarning: { source?: string; message?: string };
  skillInvoked: { name?: string; source?: string; body?: string; files?: string[]; arguments?: string; location?: string };
  mcpWarning: { server?: string; message?: string };
  hookInvoked: { invocationId?: string; hookEvent?: string; matcher?: string; command?: string; source?: string; callId?: string; timeoutMs?: number };
  hookResult: { invocationId?: string; exitCode?: number; stdout?: string; stderr?: string; timedOut?: boolean; durationMs?: number; decision?: string; reason?: string };
  hookWarning: { source?: string; message?: string };
  hookContext: { hookEvent?: string; source?: string; text?: string };
}

/** One event of a session's log: the envelope and its payload under the payload's JSON key (e.g. `toolResult`). */
export type EventJson = {
  /** Per-session sequence number, 1-based, contiguous. */
  seq: number;
  /** When it was appended (ISO-8601, microseconds). */
  time?: string;
  /** `<noun>/<verb>`, e.g. `tool/result`. */
  type: string;
  source?: string;
  ignorable?: boolean;
  surface?: { kind?: string; replaceFromSeq?: number; replaceToSeq?: number; sourceSeqs?: number[] };
} & Partial<EventPayloads> & { [payload: string]: unknown };

/** The milliseconds since the epoch of an event's `time`, or NaN when it has none. */
export function eventTimeMs(event: Pick<EventJson, "time">): number {
  return event.time ? Date.parse(event.time) : Number.NaN;
}
