import { TackError } from "@tack/bus";
import type { Draft } from "@tack/log";
import type { CopySessionRequest, Event } from "@tack/proto";

/** What a CopySession request writes: the new log's events and spilled objects, renamed for the new session. */
export interface SessionCopy {
  readonly drafts: Draft[];
  readonly objects: { name: string; data: Uint8Array }[];
  /** The source session's id. */
  readonly from: string;
}

/**
 * Checks a copy of another session's log (a fork at a turn boundary, an imported bundle) and
 * renames it for `tenant`/`sessionId`: the events must run seq 1..n from session/created and end
 * at a turn boundary; spilled objects keep their call ids under the new session's prefix, and only
 * the source's own are taken. Nothing in it runs again.
 */
export function sessionCopy(req: CopySessionRequest, tenant: string, sessionId: string): SessionCopy {
  const bad = (why: string) => new TackError("loop.bad_copy", `cannot copy the session: ${why}`);
  const events = req.events;
  const first = events[0]?.payload;
  if (first?.$case !== "sessionCreated") throw bad("the events must start with session/created");
  let openTurn = 0;
  for (const [i, event] of events.entries()) {
    if (event.seq !== i + 1) throw bad(`event ${i + 1} has seq ${event.seq}; the events must run seq 1..${events.length} without gaps`);
    if (!event.payload) throw bad(`event ${event.seq} (${JSON.stringify(event.type)}) has no payload this loop knows`);
    if (event.payload.$case === "turnStart") openTurn = event.payload.value.turn;
    if (event.payload.$case === "turnEnd") openTurn = 0;
  }
  if (openTurn !== 0) throw bad(`turn ${openTurn} has no turn/end; copy up to a turn boundary (an ended turn)`);
  if (req.workspace && !req.workspace.startsWith("/")) throw bad(`workspace ${JSON.stringify(req.workspace)} must be an absolute path`);
  const from = `${first.value.tenant}.${first.value.sessionId}.`;
  const rename = (name: string) => {
    if (!name.startsWith(from)) throw bad(`object ${JSON.stringify(name)} is not one of the source session's (${from}…)`);
    return `${tenant}.${sessionId}.${name.slice(from.length)}`;
  };
  const drafts = events.map((event: Event) => {
    let payload = event.payload!;
    if (payload.$case === "sessionCreated") {
      payload = { $case: "sessionCreated", value: { ...payload.value, sessionId, tenant, ...(req.workspace ? { workspace: req.workspace } : {}) } };
    } else if (payload.$case === "toolResult") {
      const value = payload.value;
      payload = { $case: "toolResult", value: { ...value, spillObject: value.spillObject ? rename(value.spillObject) : "", images: value.images.map((image) => ({ ...image, object: image.object ? rename(image.object) : "" })) } };
    }
    return { payload, source: event.source, surface: event.surface };
  });
  const objects = req.objects.map((object) => ({ name: rename(object.name), data: object.data }));
  return { drafts, objects, from: first.value.sessionId };
}
