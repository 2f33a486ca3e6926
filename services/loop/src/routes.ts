import { TackError } from "@tack/bus";
import {
  CancelTurnRequest, CancelTurnResponse, CompactSessionRequest, CompactSessionResponse, DecideApprovalRequest, DecideApprovalResponse,
  DeleteSessionRequest, DeleteSessionResponse, SetSandboxModeRequest, SetSandboxModeResponse, SubmitMessageRequest, SubmitMessageResponse,
} from "@tack/proto";
import { DECISIONS, type Decision, type DecidingKey } from "./approvals.js";
import type { Ownership } from "./ownership.js";
import { route, type SessionAddressed, type SessionRoute } from "./router.js";
import type { SessionRuntime } from "./session.js";
import { PLAN_DECISIONS } from "./session-tools.js";

const unknownSession = (sessionId: string) => new TackError("loop.unknown_session", `session ${sessionId} does not exist; create it first`);

/** Refuses a call for a session that does not exist here, or not in the caller's tenant. */
function assertSession(runtime: SessionRuntime, req: SessionAddressed): void {
  if (!runtime.meta || (req.tenant || "local") !== runtime.tenant) throw unknownSession(req.sessionId);
}

/** Hands the user's message to the session (`SessionRuntime.submit`); an empty one is refused. */
async function submit(runtime: SessionRuntime, req: SubmitMessageRequest): Promise<SubmitMessageResponse> {
  if (!req.text.trim()) throw new TackError("loop.empty_message", "the message text is empty; send the task as text");
  return SubmitMessageResponse.fromPartial(await runtime.submit(req.text));
}

/**
 * The table of the loop's per-session rpcs (owner subject `<ns>.loop.session.<id>.<op>`, queue
 * subject `<ns>.loop.<op>`): what the owner does with each, and what a replica does with one for a
 * session no process serves (claim it, unless the route says otherwise).
 */
export function sessionRoutes(ownership: Ownership): SessionRoute[] {
  return [
    route({
      rpc: "SubmitMessage", any: (bus) => bus.names.loopSubmit, owner: (bus, id) => bus.names.loopSessionSubmit(id),
      request: SubmitMessageRequest, response: SubmitMessageResponse,
      owned: submit,
      unowned: async (req, _tenant, { claim }) => {
        const runtime = await claim();
        try {
          return await submit(runtime, req);
        } catch (error) {
          // A message for a session that does not exist (e.g. one just deleted) must not keep its lease renewed.
          if (!runtime.meta && !runtime.working) ownership.forget(runtime);
          throw error;
        }
      },
    }),
    // A decision for a session no process owns is claimed like a message: recovery parks its
    // pending approvals again, so the decision finds its call waiting.
    route({
      rpc: "DecideApproval", any: (bus) => bus.names.loopDecide, owner: (bus, id) => bus.names.loopSessionDecide(id),
      request: DecideApprovalRequest, response: DecideApprovalResponse,
      owned: async (runtime, req) => {
        const kind = req.kind || "approval";
        if (!["approval", "question", "plan"].includes(kind)) {
          throw new TackError("loop.bad_decision", `kind ${JSON.stringify(kind)} is unknown; answer an approval, a question or a plan`);
        }
        const decisions: readonly string[] = kind === "approval" ? DECISIONS : kind === "plan" ? PLAN_DECISIONS : [""];
        if (!decisions.includes(req.decision)) {
          throw new TackError("loop.bad_decision", kind === "question"
            ? "a question is answered with answers, not a decision"
            : `decision ${JSON.stringify(req.decision)} is unknown; answer ${decisions.join(" or ")}`);
        }
        if (!req.decidedBy) throw new TackError("loop.bad_decision", "decided_by is empty; say who decided (the caller's tenant or user)");
        assertSession(runtime, req);
        // The owner subject opens before recovery has parked the session's waiting calls again: let recovery finish first.
        await ownership.settled(runtime);
        // The key that decided (the person), as the gateway authenticated it; logged beside the tenant.
        const key: DecidingKey = { name: req.decidedByKey ?? "", id: req.decidedByKeyId ?? "" };
        if (kind === "question") return { seq: await runtime.answerQuestion(req.callId, req.answers?.answers ?? [], req.decidedBy, key) };
        if (kind === "plan") return { seq: await runtime.decidePlan(req.callId, req.decision as "approve" | "reject", req.feedback ?? "", req.decidedBy, key) };
        return { seq: await runtime.decide(req.callId, req.decision as Decision, req.decidedBy, key) };
      },
    }),
    // A mode change for a session no process owns is claimed like a message (recovery may start a
    // turn, which then refuses the change as busy).
    route({
      rpc: "SetSandboxMode", any: (bus) => bus.names.loopMode, owner: (bus, id) => bus.names.loopSessionMode(id),
      request: SetSandboxModeRequest, response: SetSandboxModeResponse,
      owned: async (runtime, req) => {
        assertSession(runtime, req);
        if (!req.changedBy) throw new TackError("loop.bad_sandbox_mode", "changed_by is empty; say who changes the mode (the caller's tenant or user)");
        await ownership.settled(runtime);
        switch (req.setting || "sandbox") {
          case "sandbox":
            return { seq: await runtime.setSandboxMode(req.mode, req.changedBy) };
          case "plan":
            if (req.mode !== "on" && req.mode !== "off") throw new TackError("loop.bad_plan_mode", `plan mode ${JSON.stringify(req.mode)} is neither on nor off`);
            return { seq: await runtime.setPlanMode(req.mode === "on", req.changedBy) };
          case "session":
            return { seq: await runtime.setSessionMode(req.mode, req.changedBy) };
          default:
            throw new TackError("loop.bad_sandbox_mode", `setting ${JSON.stringify(req.setting)} is unknown; change the sandbox, plan or session mode`);
        }
      },
    }),
    // A deletion of a session no process owns: its lease is claimed (the session neither loaded nor recovered) and it is deleted.
    route({
      rpc: "DeleteSession", any: (bus) => bus.names.loopDelete, owner: (bus, id) => bus.names.loopSessionDelete(id),
      request: DeleteSessionRequest, response: DeleteSessionResponse,
      owned: async (runtime, req) => {
        if ((req.tenant || "local") !== runtime.tenant) throw unknownSession(req.sessionId);
        return ownership.remove(runtime.tenant, runtime.sessionId, req.deletedBy);
      },
      unowned: (req, tenant) => ownership.remove(tenant, req.sessionId, req.deletedBy),
    }),
    // Stops the running turn (`stopTurn`); a session no process owns runs no turn, so there is nothing to stop.
    route({
      rpc: "CancelTurn", any: (bus) => bus.names.loopCancel, owner: (bus, id) => bus.names.loopSessionCancel(id),
      request: CancelTurnRequest, response: CancelTurnResponse,
      owned: async (runtime, req) => {
        if ((req.tenant || "local") !== runtime.tenant) throw unknownSession(req.sessionId);
        if (!runtime.busy) return { cancelled: false, turn: 0 };
        const turn = runtime.events.filter((e) => e.payload?.$case === "turnStart").length;
        await runtime.stopTurn(req.cancelledBy || "api");
        return { cancelled: true, turn };
      },
      unowned: () => Promise.resolve({ cancelled: false, turn: 0 }),
    }),
    // Refused while a turn runs; a session no process owns is claimed like a message (recovery may
    // start a turn, which then refuses the compaction as busy). Afterwards the session stays warm
    // for `idleReleaseMs` again, as after a turn; one that does not exist is let go at once.
    route({
      rpc: "CompactSession", any: (bus) => bus.names.loopCompact, owner: (bus, id) => bus.names.loopSessionCompact(id),
      request: CompactSessionRequest, response: CompactSessionResponse,
      owned: async (runtime, req) => {
        try {
          assertSession(runtime, req);
          // Recovery may start a turn (which then refuses the compaction as busy): let it get that far first.
          await ownership.settled(runtime);
          return CompactSessionResponse.fromPartial(await runtime.compact(req.compactedBy || "api", req.instructions));
        } finally {
          ownership.forget(runtime);
        }
      },
    }),
  ];
}
