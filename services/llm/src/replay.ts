import { TackError } from "@tack/bus";
import { Event, Role, type AssistantMessage, type Usage } from "@tack/proto";
import { describeJsonError } from "./json-syntax.js";
import { playedUsage, playReply } from "./playback.js";
import { cancelled, type Provider, type ProviderEntry } from "./provider.js";
import { scriptLoader, type ScriptFileOptions } from "./script-file.js";

/** What a replay plays back: the assistant messages of a recorded session, in log order, with their usage where it was reported. */
interface Recording {
  readonly replies: readonly { message: AssistantMessage; usage?: Usage }[];
}

/**
 * The `replay:FILE` provider: runs a recorded session as the script, with no API key. FILE
 * is the output of `tack events <id> --json` (one Event JSON per line). A request holding n
 * assistant messages gets the n-th `assistant/message` of the recording, with its recorded
 * tool call ids, and the usage of the `usage/report` of the same turn and step (counted
 * with the DeepSeek tokenizer when the recording has none). FILE must be inside one of
 * `scriptDirs`, like a script (see `scriptLoader`).
 */
export function replayProvider(options: ScriptFileOptions): ProviderEntry {
  const load = scriptLoader(options, { noun: "recording", prefix: "replay:" }, parseRecording);
  return {
    form: "replay:FILE",
    create: (model) => ({
      complete: async (request, onDelta, signal) => {
        if (signal.aborted) throw cancelled();
        const { file, value: recording } = await load(model);
        const n = request.messages.filter((message) => message.role === Role.ROLE_ASSISTANT).length;
        const reply = recording.replies[n];
        if (!reply) {
          throw new TackError(
            "llm.script_exhausted",
            `recording ${file} has ${recording.replies.length} assistant messages but the request already holds ${n}; the session went further than the recording`,
            { details: { file, replies: String(recording.replies.length), assistant_messages: String(n) } },
          );
        }
        const message = reply.message;
        playReply(message, onDelta);
        return {
          content: message.content,
          reasoningContent: message.reasoningContent,
          toolCalls: message.toolCalls,
          finishReason: message.finishReason || (message.toolCalls.length > 0 ? "tool_calls" : "stop"),
          usage: reply.usage ?? playedUsage(request, message),
          model: `replay:${model}`,
        };
      },
      check: async () => { await load(model); },
    } satisfies Provider),
  };
}

function parseRecording(file: string, text: string): Recording {
  const messages: AssistantMessage[] = [];
  const usage = new Map<string, Usage>();
  const step = (turn: number, stepNumber: number) => `${turn}/${stepNumber}`;
  for (const [i, line] of text.split(/\r?\n/).entries()) {
    if (line.trim() === "") continue;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      // Not the SyntaxError: its message quotes the line.
      throw badRecording(file, `line ${i + 1} is not JSON (${describeJsonError(line).replace(/^at line 1 /, "at ")})`);
    }
    if (!json || typeof json !== "object" || Array.isArray(json) || typeof (json as { type?: unknown }).type !== "string") {
      throw badRecording(file, `line ${i + 1} is not an event (a JSON object with a "type")`);
    }
    // The gateway's SSE form nests the payload under `payload`; `tack events --json` prints it flat.
    const object = json as Record<string, unknown>;
    const payload = object.payload;
    let event: Event;
    try {
      event = Event.fromJSON(payload && typeof payload === "object" && !Array.isArray(payload) ? { ...object, ...payload } : object);
    } catch {
      // The decoder's message can name the offending value.
      throw badRecording(file, `line ${i + 1} is not a valid event (a field holds a value of the wrong type)`);
    }
    if (event.payload?.$case === "assistantMessage") messages.push(event.payload.value);
    else if (event.payload?.$case === "usage" && event.payload.value.usage) usage.set(step(event.payload.value.turn, event.payload.value.step), event.payload.value.usage);
  }
  if (messages.length === 0) throw badRecording(file, "it holds no assistant/message event");
  return { replies: messages.map((message) => ({ message, usage: usage.get(step(message.turn, message.step)) })) };
}

function badRecording(file: string, problem: string): TackError {
  return new TackError("llm.bad_script", `recording ${file} is unusable: ${problem}; record one with \`tack events <session> --json > FILE\``, {
    details: { file, reason: "invalid_recording" },
  });
}
