// The log's event messages alone, for code that only reads events (the CLI's `tack run`): the
// package's index also loads the gRPC service definitions, and with them @grpc/grpc-js (~80 ms).
export { Delta_Kind, Event, Surface_Kind } from "./gen/tack/log/v1/events.js";
// The payloads that change a session's state, one by one (the web UI decodes only these, so it bundles only their codecs).
export {
  ApprovalAsked, ApprovalDecided, ApprovalPolicySet, PlanDecided, PlanModeSet, PlanSubmitted, QuestionAnswered, QuestionAsked, SandboxModeSet, SessionCreated,
  SessionModeSet, TodoUpdated, ToolDefined, TurnEnd, TurnStart, UserMessage,
} from "./gen/tack/log/v1/events.js";
