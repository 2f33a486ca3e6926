import { LoopRpc, TackError } from "@tack/bus";
import { CompactSessionResponse, SubmitMessageRequest, SubmitMessageResponse } from "@tack/proto";
import { DECISIONS, type Decision, type DecidingKey } from "./approvals.js";
import type { Ownership } from "./ownership.js";
import { route, type SessionAddressed, type SessionRoute } from "./router.js";
import type { SessionRuntime } from "./session.js";

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

/** The rpcs that replaced the retired `kind`s of DecideApproval and `setting`s of SetSandboxMode, with their queue subjects' last token. */
const RETIRED_KINDS = new Map([["question", "AnswerQuestion (loop.answer)"], ["plan", "DecidePlan (loop.decide_plan)"]]);
const RETIRED_SETTINGS = new Map([["plan", "SetPlanMode (loop.plan_mode)"], ["session", "SetSessionMode (loop.session_mode)"]]);

/**
 * Refuses a request in a shape this loop retired (one rpc carried several operations behind a
 * string): names the rpc, what was sent, the rpc that replaced it, and what to upgrade.
 */
function outdated(rpc: string, sent: string, replacement: string): TackError {
  return new TackError("loop.outdated_request", `${rpc} with ${sent} is a request shape this loop no longer serves; it serves that as the rpc ${replacement}. Upgrade the gateway (or the client calling the loop) to this loop's version`);
}

/** Checks who decides and that the session exists, then lets a claim in flight park the session's waiting calls again. */
async function decider(runtime: SessionRuntime, req: SessionAddressed & { decidedBy: string }, ownership: Ownership): Promise<void> {
  if (!req.decidedBy) throw new TackError("loop.bad_decision", "decided_by is empty; say who decided (the caller's tenant or user)");
  assertSession(runtime, req);
  // The owner subject opens before recovery has parked the session's waiting calls again: let recovery finish first.
  await ownership.settled(runtime);
}

/** The key that decided (the person), as the gateway authenticated it; logged beside the tenant. */
function deciding(req: { decidedByKey?: string; decidedByKeyId?: string }): DecidingKey {
  return { name: req.decidedByKey ?? "", id: req.decidedByKeyId ?? "" };
}

/** Checks that the session exists and who changes its mode, then lets a claim in flight (which may start a turn) finish. */
async function changer(runtime: SessionRuntime, req: SessionAddressed & { changedBy: string }, ownership: Ownership): Promise<void> {
  assertSession(runtime, req);
  if (!req.changedBy) throw new TackError("loop.bad_sandbox_mode", "changed_by is empty; say who changes the mode (the caller's tenant or user)");
  await ownership.settled(runtime);
}

/**
 * The table of the loop's per-session rpcs (their descriptors' owner route
 * `<ns>.loop.session.<id>.<op>` and queue-group route `<ns>.loop.<op>`): what the owner does with each, and what a replica does with one for a
 * session no process serves (claim it, unless the route says otherwise).
 */
export function sessionRoutes(ownership: Ownership): SessionRoute[] {
  return [
    route({
      rpc: LoopRpc.SubmitMessage,
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
    // A decision, an answer or a mode change for a session no process owns is claimed like a
    // message: recovery parks its waiting calls again, so the decision finds its call waiting (or
    // starts a turn, which then refuses a mode change as busy).
    route({
      rpc: LoopRpc.DecideApproval,
      owned: async (runtime, req) => {
        const kind = req.retiredKind || "approval";
        const replacement = RETIRED_KINDS.get(kind);
        if (replacement) throw outdated("DecideApproval", `kind ${JSON.stringify(kind)}`, replacement);
        if (kind !== "approval") throw new TackError("loop.bad_decision", `kind ${JSON.stringify(kind)} is unknown; DecideApproval answers approvals (questions: AnswerQuestion, plans: DecidePlan)`);
        if (!(DECISIONS as readonly string[]).includes(req.decision)) {
          throw new TackError("loop.bad_decision", `decision ${JSON.stringify(req.decision)} is unknown; answer ${DECISIONS.join(" or ")}`);
        }
        await decider(runtime, req, ownership);
        return { seq: await runtime.decide(req.callId, req.decision as Decision, req.decidedBy, deciding(req)) };
      },
    }),
    route({
      rpc: LoopRpc.AnswerQuestion,
      owned: async (runtime, req) => {
        await decider(runtime, req, ownership);
        return { seq: await runtime.answerQuestion(req.callId, req.answers, req.decidedBy, deciding(req)) };
      },
    }),
    route({
      rpc: LoopRpc.DecidePlan,
      owned: async (runtime, req) => {
        await decider(runtime, req, ownership);
        return { seq: await runtime.decidePlan(req.callId, req.approve ? "approve" : "reject", req.feedback, req.decidedBy, deciding(req)) };
      },
    }),
    route({
      rpc: LoopRpc.SetSandboxMode,
      owned: async (runtime, req) => {
        const setting = req.retiredSetting || "sandbox";
        const replacement = RETIRED_SETTINGS.get(setting);
        if (replacement) throw outdated("SetSandboxMode", `setting ${JSON.stringify(setting)}`, replacement);
        if (setting !== "sandbox") throw new TackError("loop.bad_sandbox_mode", `setting ${JSON.stringify(setting)} is unknown; SetSandboxMode changes the sandbox mode (plan mode: SetPlanMode, session mode: SetSessionMode)`);
        await changer(runtime, req, ownership);
        return { seq: await runtime.setSandboxMode(req.mode, req.changedBy) };
      },
    }),
    route({
      rpc: LoopRpc.SetPlanMode,
      owned: async (runtime, req) => {
        await changer(runtime, req, ownership);
        return { seq: await runtime.setPlanMode(req.on, req.changedBy) };
      },
    }),
    route({
      rpc: LoopRpc.SetSessionMode,
      owned: async (runtime, req) => {
        await changer(runtime, req, ownership);
        return { seq: await runtime.setSessionMode(req.mode, req.changedBy) };
      },
    }),
    // A deletion of a session no process owns: its lease is claimed (the session neither loaded nor recovered) and it is deleted.
    route({
      rpc: LoopRpc.DeleteSession,
      owned: async (runtime, req) => {
        if ((req.tenant || "local") !== runtime.tenant) throw unknownSession(req.sessionId);
        return ownership.remove(runtime.tenant, runtime.sessionId, req.deletedBy);
      },
      unowned: (req, tenant) => ownership.remove(tenant, req.sessionId, req.deletedBy),
    }),
    // Stops the running turn (`stopTurn`); a session no process owns runs no turn, so there is nothing to stop.
    route({
      rpc: LoopRpc.CancelTurn,
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
      rpc: LoopRpc.CompactSession,
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
