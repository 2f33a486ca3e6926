// The `ui` part of `make bench`: how fast the web UI (packages/web, served by the gateway at /) paints
// a session's conversation in Debian's Chromium (playwright-core, headless) — ui_first_paint_ms for a
// session of ≥ 200 events. Each run is a fresh browser context (empty HTTP cache, a signed-in tab
// via sessionStorage) opening `/#/s/<id>`; the page marks `tack:conversation-painted` two frames
// after it rendered the session's history (all of its events), and the number is that mark's time
// since the navigation started. First contentful paint is reported beside it.
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { percentile, round, say } from "./lib.js";
import { ROOT, Stack } from "./stack.js";

const RUNS = Number(process.env.TACK_BENCH_UI_RUNS ?? 7);
const MIN_EVENTS = 200;
const CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-gpu", "--disable-component-update", "--disable-sync", "--no-first-run"];

/** One step of the scripted session: a todo_write (carried out by the loop, no sandbox) with some text. */
function step(i: number) {
  return {
    content: `Step ${i}: updating the task list with item ${i} of the plan.`,
    tool_calls: [{ name: "todo_write", arguments: { todos: [{ content: `item ${i}`, status: "in_progress" }, { content: `item ${i + 1}`, status: "pending" }] } }],
  };
}

export async function benchUi(options: { natsUrl: string }): Promise<Record<string, unknown>> {
  execFileSync(process.execPath, [join(ROOT, "packages", "web", "build.mjs")], { stdio: "pipe" });
  const stack = await Stack.launch({ natsUrl: options.natsUrl, label: "ui" });
  const browser = await chromium.launch({ executablePath: process.env.TACK_CHROMIUM ?? "/usr/bin/chromium", headless: true, args: CHROMIUM_ARGS });
  try {
    // About 8 events a step: 30 steps are well over 200 events.
    const model = stack.script("ui-200", [...Array.from({ length: 30 }, (_, i) => step(i + 1)), { content: "All items are in the task list." }]);
    const session = await stack.createSession(model, stack.workspace());
    await stack.submit(session, "put thirty items on the task list, one step at a time");
    await stack.watch.turnEnd(session, 1, 120_000);
    const detail = await stack.api<{ last_seq: number }>("GET", `/v1/sessions/${session}`);
    const events = detail.last_seq;
    if (events < MIN_EVENTS) throw new Error(`the ui bench session has ${events} events, fewer than ${MIN_EVENTS}; add steps to its script`);
    say(`ui: session of ${events} events; ${RUNS} cold loads in Chromium`);

    const paints: number[] = [];
    const fcps: number[] = [];
    const phases: Record<"script_loaded" | "history_sent" | "history_first_byte" | "history_read", number[]> = { script_loaded: [], history_sent: [], history_first_byte: [], history_read: [] };
    let transferred = 0;
    for (let i = 0; i < RUNS; i++) {
      const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      await context.addInitScript(`sessionStorage.setItem("tack.apiKey", ${JSON.stringify(stack.tack.apiKey)})`);
      const page = await context.newPage();
      await page.goto(`${stack.tack.gatewayUrl}/#/s/${session}`);
      await page.waitForFunction(() => performance.getEntriesByName("tack:conversation-painted").length > 0, undefined, { timeout: 30_000 });
      // Functions, not strings: the page's CSP refuses eval.
      const timing = await page.evaluate(() => {
        const mark = performance.getEntriesByName("tack:conversation-painted")[0] as unknown as { startTime: number; detail: { events: number } };
        const fcp = performance.getEntriesByName("first-contentful-paint")[0];
        const loaded = [...performance.getEntriesByType("resource"), ...performance.getEntriesByType("navigation" as "resource")] as unknown as Array<{ transferSize?: number }>;
        const doc = (globalThis as unknown as { document: { querySelectorAll(selector: string): { length: number } } }).document;
        // Where the time went: the page's script arrived, the history request was sent and answered.
        const resources = performance.getEntriesByType("resource") as unknown as Array<{ name: string; startTime: number; responseStart: number; responseEnd: number }>;
        const script = resources.find((r) => r.name.endsWith(".js"));
        const history = resources.find((r) => /\/v1\/sessions\/[^/]+\/events\?/.test(r.name) && r.name.includes("follow=0"));
        return {
          paint: mark.startTime, events: mark.detail.events, fcp: fcp ? fcp.startTime : -1, bytes: loaded.reduce((n, r) => n + (r.transferSize ?? 0), 0), items: doc.querySelectorAll(".conversation > li").length,
          scriptEnd: script ? script.responseEnd : -1, historyStart: history ? history.startTime : -1, historyFirstByte: history ? history.responseStart : -1, historyEnd: history ? history.responseEnd : -1,
        };
      });
      if (timing.events !== events) throw new Error(`the page painted ${timing.events} events, not the session's ${events}`);
      paints.push(timing.paint);
      if (timing.fcp >= 0) fcps.push(timing.fcp);
      if (timing.scriptEnd >= 0) phases.script_loaded.push(timing.scriptEnd);
      if (timing.historyStart >= 0) {
        phases.history_sent.push(timing.historyStart);
        phases.history_first_byte.push(timing.historyFirstByte);
        phases.history_read.push(timing.historyEnd);
      }
      transferred = timing.bytes;
      say(`ui: run ${i + 1}/${RUNS}: conversation painted at ${Math.round(timing.paint)} ms (${timing.items} entries), first contentful paint ${Math.round(timing.fcp)} ms`);
      await context.close();
    }
    return {
      ui_first_paint_ms: {
        p50: round(percentile(paints, 50), 1), max: round(Math.max(...paints), 1), runs: paints.map((p) => round(p, 1)), events,
        first_contentful_paint_p50_ms: round(percentile(fcps, 50), 1), transferred_bytes: transferred, goal: 1000,
        phases_p50_ms: Object.fromEntries(Object.entries(phases).map(([k, v]) => [k, v.length > 0 ? round(percentile(v, 50), 1) : null])),
        definition: `Chromium (headless, ${process.env.TACK_CHROMIUM ?? "/usr/bin/chromium"}), a fresh context per run (cold HTTP cache), signed in: from navigating to /#/s/<id> of a session with ${events} events to the first frame painted after the conversation rendered all of them (performance mark tack:conversation-painted, two animation frames after the render); phases_p50_ms: since navigation, the page's script read, the history request (events?follow=0) sent, its first byte and its end (Resource Timing); ${RUNS} runs, gateway and services as processes on this machine`,
      },
    };
  } finally {
    await browser.close();
    await stack.close();
  }
}
