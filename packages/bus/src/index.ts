// The bus: typed protobuf request/reply over NATS, subjects and trace propagation.
export { ALIVE_HEADER, Bus, DEFAULT_SILENCE_MS, ERROR_HEADER, HEARTBEAT_HEADER, HEARTBEAT_MS, heartbeat, inboxPrefix, MAX_BUS_PAYLOAD, RPC_HEADER, type BusAuth, type BusCredentials, type BusOptions, type BusTls, type Codec, type RequestContext, type RequestOptions, type ServeOptions } from "./bus.js";
export { rpcSubject, rpcSubjectPatterns, type Rpc, type RpcRoute } from "./descriptor.js";
// Named, not `export *`: the build maps each name to its module, so a bundle that needs TackError loads no descriptor (nor the messages they import).
export { BUS_RPCS, LlmRpc, LoopRpc, McpRpc, SandboxRpc, SkillsRpc, ToolsRpc, WorkspacesRpc } from "./gen/descriptors.js";
export { endpoint, startService, type Endpoint, type ServiceHandle, type StartServiceOptions } from "./service.js";
export { TackError } from "./errors.js";
export { assertToken, names, serviceNamespace, type Names } from "./subjects.js";
export { extractTrace, injectTrace, inSpan } from "./trace.js";
export { requestStream, type StreamRequestOptions, type StreamWriter } from "./stream.js";
export { retryAfterMs, retryDelay, retrying, retryPolicy, type RetryNote, type RetryOptions, type RetryPolicy } from "./retry.js";
export { discoverMicro, microName, microSubjects, registerMicro, TACK_VERSION, type DiscoverOptions, type MicroInstance, type MicroOptions, type MicroResponses } from "./micro.js";
export { openSandboxProcess, sandboxStdioSubjects, STDIO_PING_EVERY_MS, type SandboxOutput, type SandboxProcess, type SandboxProcessExit, type SandboxProcessRequest } from "./sandbox-process.js";
