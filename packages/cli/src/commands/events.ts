// `tack events`: a session's events, one line or one JSON object each.
import type { Command } from "../args.js";
import { connect, receiveEvents, resolveGateway } from "../api.js";
import { terminalSafeError, terminalSafeJson } from "../sanitize.js";
import { upStateDirs } from "../state.js";
import { eventLine } from "../transcript.js";

type EventsCommand = Extract<Command, { name: "events" }>;

/** Runs `tack events`; with --follow it runs until Ctrl-C. */
export async function eventsCommand(command: EventsCommand, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const gateway = connect(await resolveGateway(env, upStateDirs(cwd)));
  const abort = new AbortController();
  const onInterrupt = () => abort.abort();
  process.once("SIGINT", onInterrupt);
  try {
    for await (const { event, json } of receiveEvents(gateway, command.session, { follow: command.follow, signal: abort.signal })) {
      // Both forms are terminal-safe: lines make controls visible, JSON escapes what JSON.stringify leaves raw.
      process.stdout.write(`${command.json ? terminalSafeJson(json) : eventLine(event)}\n`);
    }
  } catch (error) {
    // Ctrl-C is how --follow ends. A gateway's error message is remote text too.
    if (!abort.signal.aborted) throw terminalSafeError(error);
  } finally {
    process.off("SIGINT", onInterrupt);
  }
  return 0;
}
