// A session as one bundle: its whole log and the spilled objects its events name (whole tool
// results and images), for ExportSession (`GET /v1/sessions/:id/export`).
import { Objm } from "@nats-io/obj";
import { readAll } from "@tack/log";
import type { Event, gatewayV1 } from "@tack/proto";
import type { Operation } from "./call.js";
import { requireSession, type GatewayContext } from "./gateway-context.js";
import { sessionMessage } from "./sessions.js";
import type { SessionRow } from "./store.js";

/** The format name a bundle carries. */
export const BUNDLE_FORMAT = "tack.session-bundle/v1";

/**
 * The spilled objects a session's `tool/result` events name (whole results and images), read from
 * the spill bucket; only the session's own (`<tenant>.<session>.…`), and those already gone left out.
 */
export async function spilledObjects(context: GatewayContext, row: SessionRow, events: readonly Event[]): Promise<{ name: string; data: Uint8Array }[]> {
  const names = new Set<string>();
  const own = `${row.tenant}.${row.id}.`;
  for (const event of events) {
    if (event.payload?.$case !== "toolResult") continue;
    const result = event.payload.value;
    if (result.spillObject) names.add(result.spillObject);
    for (const image of result.images) if (image.object) names.add(image.object);
  }
  const wanted = [...names].filter((n) => n.startsWith(own)).sort();
  if (wanted.length === 0) return [];
  const { bus } = context;
  const store = await new Objm(bus.nc).open(bus.names.spillBucket).catch(() => undefined);
  const objects: { name: string; data: Uint8Array }[] = [];
  for (const name of wanted) {
    const data = store ? await store.getBlob(name).catch(() => null) : null;
    if (data) objects.push({ name, data });
  }
  return objects;
}

/**
 * `ExportSession`: `{format, session, events, objects}` — every event of the log in seq order (each
 * in its JSON form, as the event stream sends it) and every spilled object a `tool/result` names
 * (its bytes in base64). Objects already gone (deleted with an older session) are left out.
 */
export function exportSession(context: GatewayContext): Operation<gatewayV1.ExportSessionRequest, gatewayV1.SessionBundle> {
  return async (call, request) => {
    const row = await requireSession(context, call, request.id);
    const { bus } = context;
    const events = await readAll(bus.nc, bus.names, { tenant: row.tenant, sessionId: row.id });
    const objects = (await spilledObjects(context, row, events)).map((o) => ({ name: o.name, data: Buffer.from(o.data) }));
    return {
      message: { format: BUNDLE_FORMAT, session: sessionMessage(context, row), events, objects },
      headers: { "content-disposition": `attachment; filename="${row.id}.json"` },
    };
  };
}
