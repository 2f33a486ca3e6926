// `tack chat` (and `tack` alone on a terminal): an interactive session in the current workspace.
// Reads lines with node:readline, streams each turn through @tack/client, asks approvals,
// questions and plan reviews inline, and runs the slash commands of chat/format.ts.
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { styleText } from "node:util";
import { isUnavailable, type Answer, type Waiting } from "@tack/client";
import { DEFAULT_MODEL, type Command } from "../args.js";
import { cliError, connect, protoEvent, receiveEvents, resolveGateway, type Gateway } from "../api.js";
import { CallBook } from "../chat/calls.js";
import {
  approvalAnswer, approvalCard, CHAT_HELP, compactText, contextText, costText, parseSlash, questionAnswer, questionCard, SANDBOX_MODES,
  type QuestionJson, type SlashName,
} from "../chat/format.js";
import { LineInput } from "../chat/input.js";
import { terminalSafe, terminalSafeError } from "../sanitize.js";
import { upStateDirs } from "../state.js";
import { TranscriptRenderer } from "../transcript.js";
import { resolveModel, resolveWorkspace } from "./run.js";

type ChatCommand = Extract<Command, { name: "chat" }>;

/** Turns of history `tack chat --resume` prints before the prompt. */
export const HISTORY_TURNS = 5;
/** Lines of a tool result the chat shows; `/details N` shows all. */
const CHAT_RESULT_LINES = 6;

/** Runs `tack chat`; resolves with 0 when the person leaves (the session stays in Tack). */
export async function chatCommand(command: ChatCommand, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  try {
    let created: { workspace: string; model: string } | undefined;
    if (command.resume === undefined) {
      // Arguments are checked before the gateway is looked for, so a typo is reported as such even when Tack is down.
      created = { model: await resolveModel(command.model ?? DEFAULT_MODEL, cwd, "chat"), workspace: await resolveWorkspace(command.workspace ?? cwd, cwd, "chat") };
    }
    const gateway = connect(await resolveGateway(env, upStateDirs(cwd)));
    const color = process.stdout.isTTY === true && !env.NO_COLOR;
    const chat = new Chat(gateway, cwd, color);
    try {
      if (created) await chat.create({ ...created, mode: command.mode });
      else await chat.resume(command.resume!);
      return await chat.run();
    } finally {
      chat.close();
    }
  } catch (error) {
    // Messages from the gateway carry remote text; main prints them to the terminal.
    throw terminalSafeError(cliError(error));
  }
}

/** A turn being followed. */
interface FollowedTurn {
  readonly turn: number;
  readonly stop: AbortController;
  interrupts: number;
}

/** One inline question to the person (approval, question, plan review), asked one at a time. */
interface Ask {
  readonly key: string;
  readonly abort: AbortController;
  readonly run: (signal: AbortSignal) => Promise<void>;
}

class Chat {
  readonly #gateway: Gateway;
  readonly #cwd: string;
  readonly #color: boolean;
  readonly #book = new CallBook();
  readonly #renderer: TranscriptRenderer;
  readonly #input: LineInput;
  #id = "";
  #turn: FollowedTurn | undefined;
  // The last turn whose turn/end was seen: what /fork copies up to by default.
  #lastEnded = 0;
  #idleInterrupts = 0;
  #leaving = false;
  // Lines typed while a turn ran: sent, in order, once it ended.
  readonly #typedAhead: string[] = [];
  readonly #asks: Ask[] = [];
  #asking: Ask | undefined;

  constructor(gateway: Gateway, cwd: string, color: boolean) {
    this.#gateway = gateway;
    this.#cwd = cwd;
    this.#color = color;
    this.#renderer = new TranscriptRenderer({ color, resultLines: CHAT_RESULT_LINES, calls: this.#book });
    this.#input = new LineInput(process.stdin, process.stdout, {
      onInterrupt: () => this.#interrupt(),
      onStrayLine: (line) => {
        if (line.trim() === "") return;
        this.#typedAhead.push(line);
        // Lines piped in before the session exists are simply next; only a person typing into a turn is told.
        if (this.#turn) this.#print(this.#dim(`(queued: sent when turn ${this.#turn.turn} ends)\n`));
      },
    });
  }

  /** Creates the session and prints what it is. */
  async create(input: { workspace: string; model: string; mode: string | undefined }): Promise<void> {
    const session = await this.#gateway.client.createSession({ workspace: input.workspace, model: input.model, ...(input.mode ? { mode: input.mode } : {}) });
    this.#id = session.id;
    this.#print(terminalSafe(`session ${session.id} · ${session.model} · ${session.workspace} · ${session.mode} · sandbox ${session.sandbox_mode}\n`));
    this.#print(this.#dim("/help for commands · Ctrl-C cancels a turn · Ctrl-D or /exit leaves\n"));
  }

  /** Opens an existing session: prints its recent history, then follows a turn that still runs. */
  async resume(id: string): Promise<void> {
    const { client } = this.#gateway;
    const detail = await client.getSession(id);
    this.#id = detail.id;
    const events = await client.listEvents(detail.id);
    this.#print(terminalSafe(`session ${detail.id} (resumed) · ${detail.model} · ${detail.workspace} · ${detail.mode} · sandbox ${detail.sandbox_mode}\n`));
    const starts = events.filter((e) => e.type === "turn/start");
    const from = starts.length > HISTORY_TURNS ? starts[starts.length - HISTORY_TURNS]!.seq : 1;
    if (from > 1) this.#print(this.#dim(`… ${starts.length - HISTORY_TURNS} earlier turn(s) not shown: tack events ${detail.id}\n`));
    let running: number | undefined;
    for (const json of events) {
      const event = protoEvent(json);
      this.#book.record(event);
      if (event.payload?.$case === "turnStart") running = event.payload.value.turn;
      if (event.payload?.$case === "turnEnd") {
        this.#lastEnded = Math.max(this.#lastEnded, event.payload.value.turn);
        if (event.payload.value.turn === running) running = undefined;
      }
      if (json.seq >= from) this.#print(this.#renderer.render(event));
    }
    this.#print(this.#renderer.finish());
    this.#print(this.#dim("/help for commands · Ctrl-C cancels a turn · Ctrl-D or /exit leaves\n"));
    if (running !== undefined) {
      this.#print(this.#dim(`turn ${running} is still running; following it (Ctrl-C cancels it)\n`));
      const last = events.length > 0 ? events[events.length - 1]!.seq : 0;
      await this.#follow(running, last + 1, detail.waiting);
    }
  }

  /** The prompt loop; resolves when the person leaves. */
  async run(): Promise<number> {
    while (!this.#leaving) {
      let line = this.#typedAhead.shift();
      if (line !== undefined) this.#print(`${this.#prompt()}${terminalSafe(line)}\n`);
      else line = await this.#input.line(this.#prompt());
      if (line === undefined) break;
      this.#idleInterrupts = 0;
      const text = line.trim();
      if (text === "") continue;
      const slash = parseSlash(text);
      if (slash?.name === "exit" || slash?.name === "quit") break;
      if (slash) await this.#slash(slash.name, slash.args);
      else await this.#send(text);
      if (this.#input.closed && this.#typedAhead.length === 0) break;
    }
    this.#print(terminalSafe(`\nsession ${this.#id} stays in Tack; continue it with: tack chat --resume ${this.#id}\n`));
    return 0;
  }

  close(): void {
    this.#input.close();
  }

  // --- turns ------------------------------------------------------------------------------

  async #send(text: string): Promise<void> {
    let posted: { seq: number; turn: number };
    try {
      posted = await this.#gateway.client.postMessage(this.#id, text);
    } catch (error) {
      this.#failure("the message was not sent", error);
      return;
    }
    await this.#follow(posted.turn, posted.seq + 1, []);
  }

  /** Streams turn `turn` from seq `from` until it ends (or the person stops following it). */
  async #follow(turn: number, from: number, waiting: readonly Waiting[]): Promise<void> {
    const followed: FollowedTurn = { turn, stop: new AbortController(), interrupts: 0 };
    this.#turn = followed;
    for (const item of waiting) this.#askWaiting(item);
    let cost = 0;
    try {
      for await (const { event } of receiveEvents(this.#gateway, this.#id, { from, follow: true, signal: followed.stop.signal })) {
        this.#book.record(event);
        const payload = event.payload;
        if (payload?.$case === "turnEnd") this.#lastEnded = Math.max(this.#lastEnded, payload.value.turn);
        if (payload?.$case === "turnEnd" && payload.value.turn === turn) {
          this.#print(this.#renderer.render(event).replace(/\n$/, "") + this.#dim(cost > 0 ? ` · $${cost.toFixed(6)}\n` : "\n"));
          return;
        }
        this.#print(this.#renderer.render(event));
        switch (payload?.$case) {
          case "usage":
            cost += payload.value.costUsd;
            break;
          case "approvalAsked": {
            const asked = payload.value;
            this.#ask(asked.callId, (signal) => this.#approval(asked.callId, approvalCard(asked), signal));
            break;
          }
          case "questionAsked": {
            const asked = payload.value;
            this.#ask(asked.callId, (signal) => this.#question(asked.callId, asked.questions, signal));
            break;
          }
          case "planSubmitted": {
            const asked = payload.value;
            this.#ask(asked.callId, (signal) => this.#plan(asked.callId, asked.plan, signal));
            break;
          }
          case "approvalDecided":
            this.#settled(payload.value.callId, `${decisionMark(payload.value.decision)} approval ${payload.value.decision} by ${payload.value.decidedBy}`);
            break;
          case "questionAnswered":
            this.#settled(payload.value.callId, `${decisionMark(payload.value.outcome)} question ${payload.value.outcome} by ${payload.value.answeredBy}`);
            break;
          case "planDecided":
            this.#settled(payload.value.callId, `${decisionMark(payload.value.decision)} plan ${payload.value.decision} by ${payload.value.decidedBy}`);
            break;
        }
      }
      this.#print(this.#renderer.finish());
      if (followed.stop.signal.aborted) {
        this.#print(this.#dim(`stopped following turn ${turn}; it goes on in Tack: tack events ${this.#id} --follow\n`));
      }
    } catch (error) {
      this.#print(this.#renderer.finish());
      this.#failure(`following turn ${turn} failed`, error);
    } finally {
      this.#turn = undefined;
      for (const ask of [...this.#asks, ...(this.#asking ? [this.#asking] : [])]) ask.abort.abort();
      this.#asks.length = 0;
    }
  }

  /** Ctrl-C: cancels the running turn, then stops following it; at the prompt, clears the line, then leaves. */
  #interrupt(): void {
    const followed = this.#turn;
    if (followed) {
      followed.interrupts += 1;
      if (followed.interrupts === 1) void this.#cancel(followed.turn);
      else followed.stop.abort();
      return;
    }
    if (this.#input.pending !== "") {
      this.#input.clearLine();
      this.#idleInterrupts = 0;
      return;
    }
    this.#idleInterrupts += 1;
    if (this.#idleInterrupts >= 2) {
      this.#leaving = true;
      this.#print("\n");
      this.#input.close();
      return;
    }
    this.#print(this.#dim("\n(Ctrl-C again to leave, or /exit)\n"));
    this.#input.reprompt();
  }

  async #cancel(turn: number): Promise<void> {
    this.#print(this.#renderer.finish() + this.#dim(`⏹ cancelling turn ${turn}…\n`));
    try {
      const cancelled = await this.#gateway.client.cancelTurn(this.#id);
      this.#print(this.#dim(cancelled.cancelled
        ? `turn ${cancelled.turn || turn} stops at its next step boundary (Ctrl-C again stops waiting for it)\n`
        : "Tack has no running turn to cancel (Ctrl-C again stops following)\n"));
    } catch (error) {
      if (isUnavailable(error)) {
        this.#print(this.#style("yellow", `cancelling a turn is not available in this Tack yet (its gateway has no POST /v1/sessions/:id/cancel); turn ${turn} goes on — Ctrl-C again stops following it\n`));
      } else {
        this.#failure(`cancelling turn ${turn} failed; it goes on — Ctrl-C again stops following it`, error);
      }
    }
    this.#input.reprompt();
  }

  // --- inline questions -------------------------------------------------------------------

  #askWaiting(item: Waiting): void {
    if (item.kind === "approval") {
      const card = approvalCard({ toolName: item.tool, operation: item.operation, currentMode: "", requestedMode: item.requested_mode, justification: item.justification, kind: (item as { approval_kind?: string }).approval_kind ?? "" });
      this.#ask(item.call_id, (signal) => this.#approval(item.call_id, card, signal));
    } else if (item.kind === "question") {
      const questions = item.questions.map((q) => ({ header: q.header, question: q.question, multiSelect: q.multi_select, options: q.options }));
      this.#ask(item.call_id, (signal) => this.#question(item.call_id, questions, signal));
    } else {
      this.#ask(item.call_id, (signal) => this.#plan(item.call_id, item.plan, signal));
    }
  }

  #ask(key: string, run: (signal: AbortSignal) => Promise<void>): void {
    if (this.#asking?.key === key || this.#asks.some((a) => a.key === key)) return;
    this.#asks.push({ key, run, abort: new AbortController() });
    void this.#drain();
  }

  async #drain(): Promise<void> {
    if (this.#asking) return;
    while (this.#asks.length > 0) {
      const ask = this.#asks.shift()!;
      if (ask.abort.signal.aborted) continue;
      this.#asking = ask;
      try {
        await ask.run(ask.abort.signal);
      } catch (error) {
        this.#failure("answering failed", error);
      } finally {
        this.#asking = undefined;
      }
    }
  }

  /** A waiting call was decided (here or elsewhere): its question is withdrawn and the outcome shown. */
  #settled(key: string, text: string): void {
    const open = this.#asking?.key === key ? this.#asking : undefined;
    const queued = this.#asks.findIndex((a) => a.key === key);
    if (queued >= 0) this.#asks.splice(queued, 1)[0]!.abort.abort();
    if (open && !open.abort.signal.aborted) {
      // Decided elsewhere while its prompt waits for a line: end the prompt's line first.
      if (this.#input.asking) this.#print("\n");
      open.abort.abort();
    }
    this.#print(this.#dim(`${terminalSafe(text)}\n`));
  }

  async #approval(callId: string, card: string, signal: AbortSignal): Promise<void> {
    this.#print(this.#renderer.finish() + this.#style("yellow", card));
    for (;;) {
      const line = await this.#input.line("allow once? [y/n] ", signal);
      if (line === undefined) return this.#unanswered(signal);
      const decision = approvalAnswer(line);
      if (!decision) {
        this.#print("type y to allow this call once, or n to deny it\n");
        continue;
      }
      try {
        await this.#gateway.client.decideApproval(this.#id, callId, decision);
      } catch (error) {
        this.#failure("the decision was not taken", error);
      }
      return;
    }
  }

  async #question(callId: string, questions: readonly QuestionJson[], signal: AbortSignal): Promise<void> {
    const answers: Answer[] = [];
    this.#print(this.#renderer.finish());
    for (const [index, question] of questions.entries()) {
      this.#print(this.#style("yellow", questionCard(question, index, questions.length)));
      for (;;) {
        const line = await this.#input.line("answer: ", signal);
        if (line === undefined) return this.#unanswered(signal);
        const answer = questionAnswer(question, line);
        if (typeof answer === "string") {
          this.#print(`${answer}\n`);
          continue;
        }
        answers.push(answer);
        break;
      }
    }
    try {
      await this.#gateway.client.answerQuestion(this.#id, callId, answers);
    } catch (error) {
      this.#failure("the answer was not taken", error);
    }
  }

  async #plan(callId: string, plan: string, signal: AbortSignal): Promise<void> {
    this.#print(this.#renderer.finish() + this.#style("yellow", terminalSafe(`◆ plan for review:\n${plan.replace(/\s+$/, "")}\n`)));
    const line = await this.#input.line("approve it? [y, or n and what to change] ", signal);
    if (line === undefined) return this.#unanswered(signal);
    const text = line.trim();
    const approve = /^(y|yes)$/i.test(text);
    const feedback = approve ? undefined : text.replace(/^(n|no)\b[\s,:-]*/i, "") || undefined;
    try {
      await this.#gateway.client.decidePlan(this.#id, { approve, call_id: callId, ...(feedback ? { feedback } : {}) });
    } catch (error) {
      this.#failure("the plan decision was not taken", error);
    }
  }

  #unanswered(signal: AbortSignal): void {
    if (!signal.aborted && this.#input.closed) this.#print(this.#dim(`\ninput ended: decide it elsewhere (the web UI or the API), or continue with tack chat --resume ${this.#id}\n`));
  }

  // --- slash commands ---------------------------------------------------------------------

  async #slash(name: SlashName, args: string): Promise<void> {
    const { client } = this.#gateway;
    try {
      switch (name) {
        case "help":
          this.#print(CHAT_HELP);
          return;
        case "cost": {
          const detail = await client.getSession(this.#id);
          const tenant = await client.usage().catch(() => undefined);
          this.#print(costText(detail, tenant));
          return;
        }
        case "context":
          this.#print(contextText(await client.context(this.#id)));
          return;
        case "mode": {
          if (args === "") {
            const detail = await client.getSession(this.#id);
            this.#print(terminalSafe(`sandbox mode ${detail.sandbox_mode} · session mode ${detail.mode}${detail.plan_mode ? " · plan mode" : ""}\nchange it with /mode ${SANDBOX_MODES.join("|")}\n`));
            return;
          }
          const mode = SANDBOX_MODES.find((m) => m === args);
          if (!mode) {
            this.#print(terminalSafe(`/mode takes a sandbox mode: ${SANDBOX_MODES.join(", ")} (got ${JSON.stringify(args)})\n`));
            return;
          }
          const changed = await client.setSandboxMode(this.#id, mode);
          this.#print(terminalSafe(`sandbox mode is now ${changed.sandbox_mode}\n`));
          return;
        }
        case "compact":
          this.#print(this.#dim("compacting: the model summarizes the conversation…\n"));
          this.#print(compactText(await client.compactSession(this.#id, args || undefined)));
          return;
        case "export":
          await this.#export(args);
          return;
        case "fork":
          await this.#fork(args);
          return;
        case "details": {
          const n = Number(args);
          const text = /^\d+$/.test(args) ? this.#book.details(n) : undefined;
          if (text) this.#print(text);
          else this.#print(this.#book.size === 0 ? "no tool calls yet\n" : terminalSafe(`/details takes the number of a call shown as [N]: 1 to ${this.#book.size} (got ${JSON.stringify(args)})\n`));
          return;
        }
        case "exit":
        case "quit":
          return;
      }
    } catch (error) {
      if (isUnavailable(error)) this.#print(this.#style("yellow", `/${name} is not available in this Tack yet (its gateway lacks the operation)\n`));
      else this.#failure(`/${name} failed`, error);
    }
  }

  async #export(args: string): Promise<void> {
    const file = resolve(this.#cwd, args || `${this.#id}.json`);
    let bundle;
    try {
      bundle = await this.#gateway.client.exportSession(this.#id);
    } catch (error) {
      if (!isUnavailable(error)) throw error;
      this.#print(this.#style("yellow", terminalSafe(`export is not available in this Tack yet (its gateway has no GET /v1/sessions/:id/export); the log alone: tack events ${this.#id} --json > ${file}\n`)));
      return;
    }
    const text = `${JSON.stringify(bundle, null, 2)}\n`;
    try {
      // Not over an existing file; readable by the owner only (tool outputs may hold secrets).
      await writeFile(file, text, { flag: "wx", mode: 0o600 });
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      this.#print(terminalSafe(code === "EEXIST" ? `${file} exists already; give another file: /export FILE\n` : `cannot write ${file} (${code ?? (error as Error).message}); give another file: /export FILE\n`));
      return;
    }
    this.#print(terminalSafe(`exported session ${this.#id} to ${file}: ${bundle.events.length} events, ${bundle.objects.length} spilled object(s), ${Buffer.byteLength(text)} bytes\n`));
  }

  async #fork(args: string): Promise<void> {
    if (args !== "" && !/^[1-9]\d*$/.test(args)) {
      this.#print(terminalSafe(`/fork takes the number of a turn that has ended (got ${JSON.stringify(args)}); without it, the last one\n`));
      return;
    }
    const turn = args === "" ? this.#lastEnded : Number(args);
    if (turn === 0) {
      this.#print("nothing to fork yet: no turn has ended in this session\n");
      return;
    }
    let forked;
    try {
      forked = await this.#gateway.client.forkSession(this.#id, { turn });
    } catch (error) {
      if (!isUnavailable(error)) throw error;
      this.#print(this.#style("yellow", "forking is not available in this Tack yet (its gateway has no POST /v1/sessions/:id/fork)\n"));
      return;
    }
    const from = this.#id;
    this.#id = forked.id;
    this.#print(terminalSafe(`forked session ${from} after turn ${turn} into ${forked.id}; you are now in ${forked.id} (back to the other one: tack chat --resume ${from})\n`));
  }

  // --- output -----------------------------------------------------------------------------

  #prompt(): string {
    return this.#style("bold", "› ");
  }

  #failure(what: string, error: unknown): void {
    const failure = cliError(error) as { code?: string; message?: string };
    this.#print(this.#style("red", terminalSafe(`✗ ${what}: ${failure.code ? `${failure.code}: ` : ""}${failure.message ?? String(error)}\n`)));
  }

  #print(text: string): void {
    if (text) this.#input.print(text);
  }

  #dim(text: string): string {
    return this.#style("dim", text);
  }

  #style(color: "dim" | "bold" | "yellow" | "red", text: string): string {
    return this.#color ? styleText(color, text, { validateStream: false }) : text;
  }
}

function decisionMark(outcome: string): string {
  return outcome === "allow_once" || outcome === "answered" || outcome === "approved" ? "✓" : "✗";
}
