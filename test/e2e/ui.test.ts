// End to end: the web UI (packages/web) as the gateway serves it, driven in Debian's Chromium with
// playwright-core against every service process (the launcher `tack up` uses), the machine's NATS
// JetStream and real Docker sandboxes, with a scripted model. Screenshots go to test-results/ui/.
import { execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiStack } from "./support/api-stack.js";

const ROOT = join(import.meta.dirname, "..", "..");
const SHOTS = join(ROOT, "test-results", "ui");
/** Debian's Chromium and the flags the brief's environment needs (no sandbox as root, nothing phoning home). */
export const CHROMIUM = {
  executablePath: process.env.TACK_CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-background-networking", "--disable-gpu", "--disable-component-update", "--disable-sync", "--no-first-run"],
};

let stack: ApiStack;
let browser: Browser;

beforeAll(async () => {
  // `make test` builds the UI first; this keeps the file runnable alone (a no-op when it is up to date).
  execFileSync(process.execPath, [join(ROOT, "packages", "web", "build.mjs")], { stdio: "pipe" });
  mkdirSync(SHOTS, { recursive: true });
  [stack, browser] = await Promise.all([ApiStack.launch("ui"), chromium.launch(CHROMIUM)]);
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await stack?.stop();
});

/** A page that fails the test on any script error or console error (a CSP violation is one). */
async function openPage(): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const problems: string[] = [];
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`console: ${message.text()}`);
  });
  // Nothing but the gateway on loopback.
  await page.route("**/*", (route) => (route.request().url().startsWith(stack.tack.gatewayUrl) ? route.continue() : route.abort()));
  return { page, problems };
}

async function signIn(page: Page): Promise<void> {
  await page.goto(stack.tack.gatewayUrl);
  await page.getByLabel("API key").fill(stack.tack.apiKey);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("button", { name: "New session" }).waitFor();
}

async function createSession(page: Page, fields: { workspace: string; model: string; sandbox: string; title: string }): Promise<string> {
  await page.getByRole("button", { name: "New session" }).click();
  const form = page.getByRole("form", { name: "new session" });
  await form.getByLabel("Workspace", { exact: true }).fill(fields.workspace);
  await form.getByLabel("Model", { exact: true }).fill(fields.model);
  await form.getByLabel("Sandbox", { exact: true }).selectOption(fields.sandbox);
  await form.getByLabel("Title", { exact: true }).fill(fields.title);
  await form.getByRole("button", { name: "Create" }).click();
  await page.waitForURL(/#\/s\//);
  await page.getByRole("heading", { name: fields.title }).waitFor();
  return decodeURIComponent(new URL(page.url()).hash.slice("#/s/".length));
}

describe("web UI end to end", () => {
  it("e2e - the gateway serves the UI at / without a key: index revalidated, hashed assets immutable, gzip, ETag, CSP; /v1 stays the API", async () => {
    const index = await fetch(stack.tack.gatewayUrl, { headers: { "accept-encoding": "gzip" } });
    expect(index.status).toBe(200);
    expect(index.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(index.headers.get("cache-control")).toBe("no-cache");
    expect(index.headers.get("content-security-policy")).toContain("script-src 'self'");
    const html = await index.text();
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    expect(asset).toBeDefined();
    const etag = index.headers.get("etag")!;
    expect((await fetch(stack.tack.gatewayUrl, { headers: { "if-none-match": etag } })).status).toBe(304);

    const js = await fetch(`${stack.tack.gatewayUrl}${asset}`, { headers: { "accept-encoding": "gzip" } });
    expect(js.status).toBe(200);
    expect(js.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(js.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(js.headers.get("content-encoding")).toBe("gzip");
    const sent = Number(js.headers.get("content-length"));
    expect(sent).toBeLessThan((await js.text()).length * 0.7);

    for (const path of ["/assets/..%2F..%2Fpackage.json", "/assets/.hidden", "/assets/nope.js"]) {
      const res = await fetch(`${stack.tack.gatewayUrl}${path}`);
      expect(res.status, path).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("gateway.route_not_found");
    }
    expect((await fetch(`${stack.tack.gatewayUrl}/v1/sessions`)).status).toBe(401);
  });

  it("e2e - sign in, create a session, watch a scripted turn stream in, approve an escalation, see the result", async () => {
    const { page, problems } = await openPage();
    // A wrong key is refused with the gateway's reason and nothing is stored.
    await page.goto(stack.tack.gatewayUrl);
    await page.getByLabel("API key").fill("not-a-key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByRole("alert").textContent()).toContain("That key does not work");
    expect(await page.evaluate("sessionStorage.getItem('tack.apiKey')")).toBeNull();
    problems.length = 0; // the refused sign-in's 401 is logged by Chromium as a failed request
    await signIn(page);
    expect(await page.evaluate("sessionStorage.getItem('tack.apiKey')")).toBe(stack.tack.apiKey);

    const ws = stack.workspace("approve");
    writeFileSync(join(ws, "AGENTS.md"), "Keep answers short.\n");
    if (process.getuid?.() === 0) chownSync(join(ws, "AGENTS.md"), 1000, 1000);
    const model = stack.script("ui-approve", [
      { reasoning: "The user wants x.", content: "I'll create x.", tool_calls: [{ name: "bash", arguments: { command: "touch x" } }] },
      { tool_calls: [{ name: "bash", arguments: { command: "touch x", sandbox_permissions: "workspace-write", justification: "the user asked for the file x" } }] },
      { content: "Finished: x exists now." },
    ]);
    const id = await createSession(page, { workspace: ws, model, sandbox: "read-only", title: "approve in the UI" });
    // Sessions are grouped by workspace in the sidebar.
    await page.getByRole("region", { name: `workspace ${ws}` }).getByRole("link", { name: /approve in the UI/ }).waitFor();
    await expect.poll(() => page.getByTestId("live").textContent()).toBe("live");

    await page.getByLabel("message").fill("create the file x");
    await page.getByRole("button", { name: "Send" }).click();
    const conversation = page.getByRole("list", { name: "conversation" });
    await conversation.getByText("create the file x").waitFor();
    await conversation.getByText("I'll create x.").waitFor();

    const card = page.getByRole("region", { name: "approval" });
    await card.waitFor({ timeout: 60_000 });
    expect(await card.locator(".operation").textContent()).toBe("touch x");
    expect(await card.textContent()).toContain("the user asked for the file x");
    expect(await card.textContent()).toContain("sandbox escalation read-only → workspace-write");
    expect(await card.evaluate((el) => (globalThis as unknown as { getComputedStyle(e: unknown): { position: string } }).getComputedStyle(el.parentElement).position)).toBe("sticky");
    // The injected rules show where they came from.
    await conversation.locator(".context .source", { hasText: "AGENTS.md" }).waitFor();
    // The denied first call is there, expandable, with its result.
    const denied = conversation.locator('details.tool[data-call="call_0_0"]');
    await denied.locator("summary").click();
    expect(await denied.locator(".result").textContent()).toContain("Read-only file system");
    await page.screenshot({ path: join(SHOTS, "1-approval.png"), fullPage: true });
    expect(existsSync(join(ws, "x"))).toBe(false);

    await card.getByRole("button", { name: "Allow once" }).click();
    await card.waitFor({ state: "detached" });
    await conversation.getByText("Finished: x exists now.").waitFor({ timeout: 60_000 });
    expect(existsSync(join(ws, "x"))).toBe(true);
    const allowed = conversation.locator('details.tool[data-call="call_1_0"]');
    expect(await allowed.locator(".status").textContent()).toMatch(/^ok · /);
    await allowed.locator("summary").click();
    expect(await allowed.locator(".result").textContent()).toContain("exit code: 0");
    await conversation.getByText(/approval of call_1_0: allow_once/).waitFor();
    await expect.poll(() => page.getByRole("group", { name: "context meter" }).or(page.getByLabel("context meter")).textContent()).toMatch(/system \d[\d,]* ?tools \d[\d,]* ?conversation \d/);
    await page.screenshot({ path: join(SHOTS, "2-result.png"), fullPage: true });

    // No turn runs: nothing to cancel. Fork copies the log up to the ended turn; export downloads the bundle.
    expect(await page.getByRole("button", { name: "Cancel", exact: true }).isDisabled()).toBe(true);
    const fork = page.getByRole("button", { name: "Fork", exact: true });
    expect(await fork.isDisabled()).toBe(false);
    expect(await fork.getAttribute("title")).toContain("up to the end of turn 1");
    const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: "Export", exact: true }).click()]);
    expect(download.suggestedFilename()).toBe(`${id}.json`);
    const bundle = JSON.parse(readFileSync((await download.path())!, "utf8")) as { session: { id: string }; events: Array<{ type: string }> };
    expect(bundle.session.id).toBe(id);
    expect(bundle.events.map((e) => e.type)).toContain("approval/decided");

    await page.getByRole("tab", { name: "Timeline" }).click();
    const timeline = page.getByLabel("timeline");
    await timeline.waitFor();
    expect(await timeline.locator("tr.step").count()).toBe(3);
    expect(await timeline.locator(".seg.tool").count()).toBe(2);
    expect(await timeline.textContent()).toContain("completed");
    await page.screenshot({ path: join(SHOTS, "3-timeline.png"), fullPage: true });

    // A reload keeps the tab signed in and shows the same session from its history.
    await page.reload();
    await page.getByRole("list", { name: "conversation" }).getByText("Finished: x exists now.").waitFor();
    expect(id).toMatch(/\S/);

    // Fork: a new session with this one's history opens.
    await page.getByRole("button", { name: "Fork", exact: true }).click();
    await page.waitForURL((url) => url.hash.startsWith("#/s/") && url.hash !== `#/s/${encodeURIComponent(id)}`);
    const forked = decodeURIComponent(new URL(page.url()).hash.slice(4));
    expect(forked).not.toBe(id);
    await page.getByRole("list", { name: "conversation" }).getByText("Finished: x exists now.").waitFor();
    await page.screenshot({ path: join(SHOTS, "3b-forked.png"), fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
  }, 180_000);

  it("e2e - the question card: options chosen in the page reach the model; Cancel stops the next turn", async () => {
    const { page, problems } = await openPage();
    await signIn(page);
    const model = stack.script("ui-question", [
      { tool_calls: [{ name: "ask_user_question", arguments: { questions: [{ header: "Runtime", question: "Which runtime?", options: [{ label: "node", description: "Node.js 20" }, { label: "deno" }] }] } }] },
      { content: "Using your answer." },
      { tool_calls: [{ name: "bash", arguments: { command: "sleep 3; echo slept" } }] },
      { content: "never reached" },
    ]);
    await createSession(page, { workspace: stack.workspace("question"), model, sandbox: "workspace-write", title: "question in the UI" });
    await page.getByLabel("message").fill("start a project");
    await page.getByRole("button", { name: "Send" }).click();
    const card = page.getByRole("form", { name: "question" });
    await card.waitFor({ timeout: 60_000 });
    expect(await card.textContent()).toContain("Which runtime?");
    await card.getByLabel("node").check();
    await page.screenshot({ path: join(SHOTS, "4-question.png"), fullPage: true });
    await card.getByRole("button", { name: "Answer" }).click();
    const conversation = page.getByRole("list", { name: "conversation" });
    await conversation.getByText("Using your answer.").waitFor({ timeout: 60_000 });
    const result = conversation.locator('details.tool[data-call="call_0_0"]');
    await result.locator("summary").click();
    expect(await result.locator(".result").textContent()).toContain("node");

    await page.getByLabel("message").fill("now sleep");
    await page.getByRole("button", { name: "Send" }).click();
    await conversation.locator('details.tool[data-call="call_2_0"] .status.running').waitFor({ timeout: 60_000 });
    const cancel = page.getByRole("button", { name: "Cancel", exact: true });
    expect(await cancel.isEnabled()).toBe(true);
    await cancel.click();
    await conversation.getByText("turn 2 ended: cancelled").waitFor({ timeout: 60_000 });
    expect(await cancel.isDisabled()).toBe(true);
    await page.screenshot({ path: join(SHOTS, "5-cancelled.png"), fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
  }, 120_000);
});
