// Generated bus and log contracts (ts-proto, from proto/). Regenerate with `make gen`.
export { BusError, BusError_DetailsEntry } from "./gen/tack/common/v1/error.js";
export { ChatMessage, Role, ToolCall, ToolSpec, Usage, roleFromJSON, roleToJSON, roleToNumber } from "./gen/tack/model/v1/model.js";
export { ApprovalAsked, ApprovalDecided, ApprovalPolicySet, AssistantChunks, AssistantMessage, ContextPruned, ContextSummarized, Delta, Delta_Kind, ErrorRaised, Event, LlmRetry, PermissionPreset, RecoveryPerformed, RequestHeader, SandboxModeSet, SessionCreated, StepEnd, StepStart, Surface, Surface_Kind, ToolCallStarted, ToolResult, TurnEnd, TurnStart, UsageReport, UserMessage, delta_KindFromJSON, delta_KindToJSON, delta_KindToNumber, surface_KindFromJSON, surface_KindToJSON, surface_KindToNumber } from "./gen/tack/log/v1/events.js";
export { CheckModelRequest, CheckModelResponse, CompleteDone, CompleteRequest, CompleteStreamMessage, CountTokensRequest, CountTokensResponse, EstimateCostRequest, EstimateCostResponse, RetryNotice } from "./gen/tack/llm/v1/llm.js";
export { CallToolRequest, CallToolResponse, ListToolsRequest, ListToolsResponse } from "./gen/tack/tools/v1/tools.js";
export { EnsureSandboxRequest, EnsureSandboxResponse, ExecRequest, ExecResponse, ReleaseSandboxRequest, ReleaseSandboxResponse } from "./gen/tack/sandbox/v1/sandbox.js";
export { CreateSessionRequest, CreateSessionResponse, DecideApprovalRequest, DecideApprovalResponse, SetSandboxModeRequest, SetSandboxModeResponse, SubmitMessageRequest, SubmitMessageResponse } from "./gen/tack/loop/v1/loop.js";
export { Timestamp } from "./gen/google/protobuf/timestamp.js";
export { EVENT_CATALOG, type EventPayloadCase, type EventTypeInfo } from "./gen/catalog.js";
export type { MessageFns } from "./gen/tack/common/v1/error.js";
