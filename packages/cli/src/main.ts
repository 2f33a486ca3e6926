// The `tack` command: parses the command line, runs one command, exits 0 (ok), 1 (failed) or 2 (bad command line).
import { TackError } from "@tack/bus";
import { parseCommand } from "./args.js";

async function main(argv: string[]): Promise<number> {
  try {
    // `tack` alone on a terminal is `tack chat`; elsewhere (a pipe, a script) it prints the usage.
    const command = parseCommand(argv, { interactive: process.stdin.isTTY === true && process.stdout.isTTY === true });
    // A command's code is loaded when it runs: `tack run` starts without the launcher, NATS client or telemetry.
    switch (command.name) {
      case "help":
        process.stdout.write(`${command.text}\n`);
        return 0;
      case "up":
        return await (await import("./commands/up.js")).upCommand(command, process.cwd(), process.env);
      case "down":
        return await (await import("./commands/down.js")).downCommand(process.cwd());
      case "status":
        return await (await import("./commands/status.js")).statusCommand(command, process.cwd(), process.env);
      case "run":
        return await (await import("./commands/run.js")).runCommand(command, process.cwd(), process.env);
      case "chat":
        return await (await import("./commands/chat.js")).chatCommand(command, process.cwd(), process.env);
      case "events":
        return await (await import("./commands/events.js")).eventsCommand(command, process.cwd(), process.env);
      case "mcp":
        return await (await import("./commands/mcp.js")).mcpCommand(command, process.cwd(), process.env);
      case "skills":
        return await (await import("./commands/skills.js")).skillsCommand(command, process.cwd(), process.env);
    }
  } catch (error) {
    const failure = TackError.from(error);
    if (failure.code === "cli.usage") {
      process.stderr.write(`tack: ${failure.message}\n\n${failure.details.usage}\n`);
      return 2;
    }
    process.stderr.write(`tack: ${failure.message}\n`);
    if (process.env.TACK_DEBUG && failure.stack) process.stderr.write(`${failure.stack}\n`);
    return 1;
  }
}

// A reader that went away (`tack events … | head`) is not an error: stop quietly.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(0);
  throw error;
});

// Exit explicitly: pooled HTTP connections and timers must not keep a finished command alive.
process.exit(await main(process.argv.slice(2)));
