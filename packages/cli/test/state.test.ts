import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { resolveGateway } from "../src/api.js";
import { ensureApiKey, ensureStateDir, findUpState, readApiKey, writeUpState, type UpState } from "../src/state.js";

const scratch = mkdtempSync(join(tmpdir(), "tack-state-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
let n = 0;
const freshDir = () => {
  const dir = join(scratch, String(++n));
  mkdirSync(dir);
  return dir;
};

/** The pid of a process that has already ended. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", ""]);
  await new Promise((resolve) => child.once("exit", resolve));
  return child.pid!;
}

describe("state", () => {
  it("state - the generated API key file is mode 600 in a mode 700 directory and is reused", async () => {
    const dir = await ensureStateDir(join(freshDir(), ".tack"));
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    const first = await ensureApiKey(dir);
    expect(first.file).toBe(join(dir, "api-key"));
    expect(statSync(first.file).mode & 0o777).toBe(0o600);
    expect(first.key).toMatch(/^tack_[A-Za-z0-9_-]{32}$/);
    expect(readFileSync(first.file, "utf8")).toBe(`${first.key}\n`);
    expect(await ensureApiKey(dir)).toEqual(first);
  });

  it("state - an API key file other users can read is refused with the chmod fix", async () => {
    const file = join(freshDir(), "api-key");
    writeFileSync(file, "secret\n");
    chmodSync(file, 0o644);
    await expect(readApiKey(file)).rejects.toMatchObject({ code: "cli.api_key_insecure", message: `${file} is readable by other users (mode 644); restrict it with \`chmod 600 ${file}\`` });
    chmodSync(file, 0o600);
    expect(await readApiKey(file)).toBe("secret");
  });

  it("state - up.json is found in a parent directory and a stale one is recognized", async () => {
    const root = freshDir();
    const stateDir = await ensureStateDir(join(root, ".tack"));
    const nested = join(root, "a", "b");
    mkdirSync(nested, { recursive: true });
    const state: UpState = { gatewayUrl: "http://127.0.0.1:7700", apiKeyFile: null, pid: process.pid, namespace: "tack", natsUrl: "nats://127.0.0.1:4222" };
    const file = await writeUpState(stateDir, state);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(await findUpState([nested, join(root, "a"), root])).toEqual({ file, state, alive: true });
    await writeUpState(stateDir, { ...state, pid: await deadPid() });
    expect((await findUpState([root]))?.alive).toBe(false);
    expect(await findUpState([nested])).toBeUndefined();
  });

  it("gateway - found from the environment or a running tack up; otherwise `not running`", async () => {
    const root = freshDir();
    const notRunning = "Tack is not running: start it with `make up` (or `tack up`)";
    await expect(resolveGateway({}, [root])).rejects.toMatchObject({ code: "cli.not_running", message: notRunning });
    expect(await resolveGateway({ TACK_GATEWAY_URL: "http://gw:1/", TACK_API_KEY: "k" }, [root])).toEqual({ url: "http://gw:1", apiKey: "k" });

    const stateDir = await ensureStateDir(join(root, ".tack"));
    const { key, file: apiKeyFile } = await ensureApiKey(stateDir);
    const state: UpState = { gatewayUrl: "http://127.0.0.1:7701", apiKeyFile, pid: process.pid, namespace: "tack", natsUrl: "nats://127.0.0.1:4222" };
    await writeUpState(stateDir, state);
    expect(await resolveGateway({}, [root])).toEqual({ url: "http://127.0.0.1:7701", apiKey: key });
    expect(await resolveGateway({ TACK_API_KEY: "from-env" }, [root])).toEqual({ url: "http://127.0.0.1:7701", apiKey: "from-env" });

    await writeUpState(stateDir, { ...state, apiKeyFile: null });
    await expect(resolveGateway({}, [root])).rejects.toMatchObject({ code: "cli.no_api_key" });

    const pid = await deadPid();
    await writeUpState(stateDir, { ...state, pid });
    await expect(resolveGateway({}, [root])).rejects.toMatchObject({
      code: "cli.not_running", message: `${notRunning} (${join(stateDir, "up.json")} is left from pid ${pid}, which has ended)`,
    });
  });
});
