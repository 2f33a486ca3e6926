// One Node everywhere (decision 0023): the pinned version of .node-version runs the tests, the services the
// CLI starts and the sandbox image's tools; `tack` under another major refuses with the command to use.
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
const pinned = readFileSync(join(root, ".node-version"), "utf8").trim();

describe("node version", () => {
  it("node version - .node-version pins one exact LTS version, and it runs these tests", () => {
    expect(pinned).toMatch(/^\d+\.\d+\.\d+$/);
    expect(process.versions.node).toBe(pinned);
    expect(process.release.lts, "an LTS release").toBeTruthy();
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { engines: { node: string }; devDependencies: Record<string, string> };
    expect(pkg.engines.node).toBe(`>=${pinned.split(".")[0]}`);
    expect(pkg.devDependencies["@types/node"]).toMatch(new RegExp(`^\\^${pinned.split(".")[0]}\\.`));
    // What the model is told about run_code's runtime (the sandbox image's node).
    expect(readFileSync(join(root, "services/tools/src/modes/code.txt"), "utf8")).toContain(`It runs with Node ${pinned.split(".")[0]} in the sandbox`);
  });

  it("node version - scripts/ensure-node.sh is a no-op once the pinned Node is in .tack/node, and prints its bin directory", () => {
    for (let run = 0; run < 2; run++) {
      const result = spawnSync(join(root, "scripts/ensure-node.sh"), { encoding: "utf8" });
      expect(result.status, result.stderr).toBe(0);
      expect(result.stdout.trim()).toBe(join(root, ".tack/node/bin"));
      expect(result.stderr).toBe("");
    }
    expect(execFileSync(join(root, ".tack/node/bin/node"), ["-p", "process.versions.node"], { encoding: "utf8" }).trim()).toBe(pinned);
  });

  it("node version - tack under another major than the brought one refuses and names the node to run it with", () => {
    // A copy of the launcher script in a checkout whose pin is another major, with a brought node.
    const dir = mkdtempSync(join(tmpdir(), "tack-node-version-"));
    try {
      mkdirSync(join(dir, "packages/cli/bin"), { recursive: true });
      mkdirSync(join(dir, "packages/cli/src"), { recursive: true });
      mkdirSync(join(dir, ".tack/node/bin"), { recursive: true });
      copyFileSync(join(root, "packages/cli/bin/tack.js"), join(dir, "packages/cli/bin/tack.js"));
      copyFileSync(join(root, "packages/cli/src/build-manifest.js"), join(dir, "packages/cli/src/build-manifest.js"));
      writeFileSync(join(dir, "package.json"), '{ "type": "module" }\n');
      writeFileSync(join(dir, ".tack/node/bin/node"), "");
      const other = `${Number(process.versions.node.split(".")[0]) + 2}.0.0`;
      writeFileSync(join(dir, ".node-version"), `${other}\n`);
      const refused = spawnSync(process.execPath, [join(dir, "packages/cli/bin/tack.js"), "--help"], { encoding: "utf8" });
      expect(refused.status).toBe(1);
      expect(refused.stderr).toBe(`tack: this is Node ${process.versions.node}; Tack runs on Node ${other} (.node-version), the one its npm packages were built for: run ${dir}/.tack/node/bin/node ${dir}/packages/cli/bin/tack.js, or put ${dir}/.tack/node/bin first on PATH\n`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("node version - the sandbox image's node (language servers, run_code) is the pinned one, not Debian's", () => {
    const image = process.env.TACK_SANDBOX_IMAGE || "tack-sandbox:bookworm"; // as make sandbox-image names it
    expect(execFileSync("docker", ["image", "inspect", "-f", '{{ index .Config.Labels "tack.node" }}', image], { encoding: "utf8" }).trim()).toBe(pinned);
    const inside = execFileSync("docker", ["run", "--rm", "--network=none", image, "sh", "-c", "command -v node; node -p process.versions.node; dpkg -s nodejs >/dev/null 2>&1 && echo debian-nodejs || true"], { encoding: "utf8" });
    expect(inside.trim().split("\n")).toEqual(["/usr/local/bin/node", pinned]);
  });
});
