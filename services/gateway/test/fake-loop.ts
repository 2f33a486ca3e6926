// Test-only stand-in for the loop service: answers the loop's bus contracts and writes the
// events a real loop writes for them, so the gateway can be tested without models or sandboxes.
// The real loop is covered end to end by the repository's integration tests.
import { randomBytes } from "node:crypto";
import { Bus, TackError } from "@tack/bus";
import { draft, FORMAT_VERSION, readAll, SessionLogWriter } from "@tack/log";
import {
  CreateSessionRequest, CreateSessionResponse, DecideApprovalRequest, DecideApprovalResponse, SetSandboxModeRequest, SetSandboxModeResponse,
  SubmitMessageRequest, SubmitMessageResponse,
} from "@tack/proto";

/** A loop that owns sessions in memory; `subjects` records which subject served each call. */
export class FakeLoop {
  readonly subjects: string[] = [];
  /** When set, sandbox mode changes are refused with `loop.mode_change_refused` and this message. */
  refuseModeChange: string | undefined;
  readonly #bus: Bus;
  readonly #writers = new Map<string, SessionLogWriter>();
  readonly #turns = new Map<string, number>();

  private constructor(bus: Bus) {
    this.#bus = bus;
  }

  /** Connects and serves `loop.create`, `loop.submit`, `loop.decide` and `loop.mode`. */
  static async start(url: string, namespace: string): Promise<FakeLoop> {
    const loop = new FakeLoop(await Bus.connect({ url, namespace, name: "fake-loop" }));
    const { names } = loop.#bus;
    loop.#bus.serve(names.loopCreate, "loop", CreateSessionRequest, CreateSessionResponse, async (request, context) => {
      loop.subjects.push(context.subject);
      if (request.model.startsWith("fail:")) throw new TackError("loop.invalid_model", `model ${request.model} is unknown; use deepseek:<model> or scripted:<file>`);
      const sessionId = request.sessionId || `s${randomBytes(6).toString("hex")}`;
      const writer = await loop.#claim(request.tenant, sessionId);
      await writer.append(draft("sessionCreated", {
        sessionId, tenant: request.tenant, mode: request.mode, model: request.model, workspace: request.workspace, formatVersion: FORMAT_VERSION, title: request.title,
      }, "loop"));
      return { sessionId, subject: writer.subject };
    });
    loop.#bus.serve(names.loopSubmit, "loop", SubmitMessageRequest, SubmitMessageResponse, async (request, context) => {
      loop.subjects.push(context.subject);
      await loop.#claim(request.tenant, request.sessionId);
      return loop.#submit(request);
    });
    loop.#bus.serve(names.loopDecide, "loop", DecideApprovalRequest, DecideApprovalResponse, async (request, context) => {
      loop.subjects.push(context.subject);
      await loop.#claim(request.tenant, request.sessionId);
      return loop.#decide(request);
    });
    loop.#bus.serve(names.loopMode, "loop", SetSandboxModeRequest, SetSandboxModeResponse, async (request, context) => {
      loop.subjects.push(context.subject);
      await loop.#claim(request.tenant, request.sessionId);
      return loop.#setMode(request);
    });
    await loop.#bus.nc.flush();
    return loop;
  }

  /** Logs `approval/asked` for a tool call of a session this loop owns, as a real loop does when it parks the call. */
  async ask(sessionId: string, callId: string): Promise<void> {
    const writer = this.#writers.get(sessionId);
    if (!writer) throw new Error(`session ${sessionId} is not owned by this fake loop`);
    await writer.append(draft("approvalAsked", {
      callId, toolName: "bash", operation: "touch x", currentMode: "read-only", requestedMode: "workspace-write", justification: "test", turn: 1, step: 1,
    }, "loop"));
  }

  async #claim(tenant: string, sessionId: string): Promise<SessionLogWriter> {
    const writer = await SessionLogWriter.open(this.#bus.nc, this.#bus.names, { tenant, sessionId });
    this.#writers.set(sessionId, writer);
    this.#bus.serve(this.#bus.names.loopSessionSubmit(sessionId), "owner", SubmitMessageRequest, SubmitMessageResponse, async (request, context) => {
      this.subjects.push(context.subject);
      return this.#submit(request);
    });
    this.#bus.serve(this.#bus.names.loopSessionDecide(sessionId), "owner", DecideApprovalRequest, DecideApprovalResponse, async (request, context) => {
      this.subjects.push(context.subject);
      return this.#decide(request);
    });
    this.#bus.serve(this.#bus.names.loopSessionMode(sessionId), "owner", SetSandboxModeRequest, SetSandboxModeResponse, async (request, context) => {
      this.subjects.push(context.subject);
      return this.#setMode(request);
    });
    await this.#bus.nc.flush();
    return writer;
  }

  /** Like the real loop, finds what is pending in the log, so a decision works on whichever fake loop owns the session now. */
  async #decide(request: DecideApprovalRequest): Promise<DecideApprovalResponse> {
    const events = await readAll(this.#bus.nc, this.#bus.names, { tenant: request.tenant, sessionId: request.sessionId });
    const logged = (type: string) => events.some((e) => e.type === type && (e.payload?.value as { callId?: string }).callId === request.callId);
    if (!logged("approval/asked") || logged("approval/decided")) {
      throw new TackError("loop.no_pending_approval", `no approval is pending for call ${JSON.stringify(request.callId)}`);
    }
    const [event] = await this.#writers.get(request.sessionId)!.append(draft("approvalDecided", {
      callId: request.callId, decision: request.decision, decidedBy: request.decidedBy,
    }, "loop"));
    return { seq: event!.seq };
  }

  async #setMode(request: SetSandboxModeRequest): Promise<SetSandboxModeResponse> {
    if (this.refuseModeChange) throw new TackError("loop.mode_change_refused", this.refuseModeChange);
    const [event] = await this.#writers.get(request.sessionId)!.append(draft("sandboxMode", { mode: request.mode, changedBy: request.changedBy }, "loop"));
    return { seq: event!.seq };
  }

  async #submit(request: SubmitMessageRequest): Promise<SubmitMessageResponse> {
    const writer = this.#writers.get(request.sessionId);
    if (!writer) throw new TackError("loop.session_not_found", `session ${request.sessionId} is not owned here`);
    const [event] = await writer.append(draft("userMessage", { text: request.text }, "loop"));
    const turn = (this.#turns.get(request.sessionId) ?? 0) + 1;
    this.#turns.set(request.sessionId, turn);
    return { seq: event!.seq, turn };
  }

  /** Stops answering; sessions it owned have no owner afterwards. */
  async stop(): Promise<void> {
    await this.#bus.close();
  }
}
