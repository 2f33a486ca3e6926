// `tack down`: stops the `tack up` found through `.tack/up.json`.
import { TackError } from "@tack/bus";
import { findUpState, processAlive, removeUpState, upStateDirs } from "../state.js";

const STOP_WAIT_MS = 20_000;

/** Sends SIGTERM to the running `tack up` and waits until it has stopped everything. */
export async function downCommand(cwd: string): Promise<number> {
  const found = await findUpState(upStateDirs(cwd));
  if (!found) {
    process.stdout.write("Tack is not running (no .tack/up.json here or in the Tack checkout)\n");
    return 0;
  }
  const { pid } = found.state;
  if (!found.alive) {
    await removeUpState(found.file);
    process.stdout.write(`Tack is not running (removed ${found.file}, left from pid ${pid})\n`);
    return 0;
  }
  process.stdout.write(`stopping Tack (pid ${pid})…\n`);
  process.kill(pid, "SIGTERM");
  const deadline = Date.now() + STOP_WAIT_MS;
  while (processAlive(pid)) {
    if (Date.now() > deadline) {
      throw new TackError("cli.stop_timeout", `Tack (pid ${pid}) did not stop within ${STOP_WAIT_MS / 1000} s; see .tack/logs/ and end it with \`kill -9 ${pid}\``);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  process.stdout.write("Tack stopped\n");
  return 0;
}
