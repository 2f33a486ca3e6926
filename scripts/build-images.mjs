#!/usr/bin/env node
// `make images`: builds Tack's container images locally, without any registry (only Debian's package
// mirror is reached, by debootstrap), and tags them all with one version, `<package version>-<git short hash>`:
//
//   tack-services:<v>   the compiled services (dist/ from `make build` of the committed HEAD, via git archive), the sources beside them (prompts, tool
//                       descriptions, the sandbox agent: see decision 0011), the production node_modules the
//                       bundles import (with better-sqlite3's native module), the pinned Node of .node-version, user
//                       `tack` (uid 10001), entrypoint scripts/images/entrypoint.ts (first argument = the service)
//   tack-nats:<v>       Debian's nats-server, user `nats` (uid 10002), JetStream store in /data
//   tack-postgres:<v>   Debian's PostgreSQL 15, user `postgres` (uid 10003), data in /var/lib/postgresql/data
//   tack-sandbox:<v>    the sandbox image of scripts/build-sandbox-image.sh (tack-sandbox:bookworm), tagged
//
//   node scripts/build-images.mjs [--only services,nats,postgres,sandbox] [--print-version] [--force]
//   (TACK_VERSION=<version>-<hash> pins the tag instead of reading the checkout's HEAD)
//
// Reproducible and cached: each Debian root filesystem is built once per recipe (suite, package list, the setup
// commands, this script's RECIPE) into /var/cache/tack/images/rootfs-<name>-<key>.tar (TACK_IMAGE_CACHE for
// another directory) and imported as the local base image `tack-base:<name>-<key>`; packages downloaded by
// debootstrap are kept in <cache>/debs. An image whose label `tack.recipe` (a hash of everything it is made
// from) matches is not rebuilt, so a second run with nothing changed takes a second or two.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, writeFileSync, copyFileSync, lstatSync, readlinkSync, symlinkSync, chmodSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const RECIPE = "tack-images/1";
const SUITE = "bookworm";
const MIRROR = process.env.DEBIAN_MIRROR || "http://deb.debian.org/debian";
const CACHE = resolve(process.env.TACK_IMAGE_CACHE || "/var/cache/tack/images");
/** The services every image entrypoint knows; kept in step with scripts/images/entrypoint.ts. */
export const SERVICES = ["gateway", "loop", "llm", "tools", "sandbox", "skills", "mcp"];
const IMAGES = ["services", "nats", "postgres", "sandbox"];
const UID = { tack: 10001, nats: 10002, postgres: 10003 };

const say = (message) => process.stdout.write(`images: ${message}\n`);
/** Prints what was wrong and how to fix it on one line, then exits 1. */
function fail(message) {
  process.stderr.write(`images: ${message}\n`);
  process.exit(1);
}

function run(command, args, options = {}) {
  const result = spawnSync(command, args, { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, ...options });
  if (result.error) fail(`${command} could not be started (${result.error.code ?? result.error.message})${options.hint ? `; ${options.hint}` : ""}`);
  if (result.status !== 0 && !options.allowFailure) {
    fail(`${command} ${args.slice(0, 3).join(" ")} exited with ${result.status}: ${(result.stderr || result.stdout || "").trim().split("\n").slice(-3).join(" | ")}`);
  }
  return result;
}

/** The version every image is tagged with: the CLI package's version and the checkout's short git hash; never `latest`. */
export function imageVersion() {
  const version = JSON.parse(readFileSync(join(root, "packages/cli/package.json"), "utf8")).version;
  // TACK_VERSION pins it (a caller that reads the version once while commits land, such as the compose test).
  const pinned = process.env.TACK_VERSION;
  if (pinned) {
    if (!new RegExp(`^${version.replace(/\./g, "\\.")}-[0-9a-f]{7,40}$`).test(pinned)) fail(`TACK_VERSION is ${JSON.stringify(pinned)}; it must be ${version}-<git short hash> (never latest), or unset to take this checkout's`);
    return pinned;
  }
  const git = spawnSync("git", ["-C", root, "rev-parse", "--short=7", "HEAD"], { encoding: "utf8" });
  if (git.status !== 0 || !/^[0-9a-f]{7,}$/.test(git.stdout.trim())) fail(`cannot read the git hash of ${root} (${(git.stderr || "").trim() || "not a git checkout"}); images are tagged <version>-<git hash>, so build them from a git clone`);
  return `${version}-${git.stdout.trim()}`;
}

function parseArgs(argv) {
  const options = { only: IMAGES, printVersion: false, force: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--print-version") options.printVersion = true;
    else if (arg === "--force") options.force = true;
    else if (arg === "--only" || arg.startsWith("--only=")) {
      const value = arg === "--only" ? argv[++i] : arg.slice("--only=".length);
      const names = (value ?? "").split(",").filter(Boolean);
      const unknown = names.filter((name) => !IMAGES.includes(name));
      if (names.length === 0 || unknown.length > 0) fail(`--only takes a comma-separated list of ${IMAGES.join(", ")}; got ${JSON.stringify(value ?? "")}`);
      options.only = names;
    } else if (arg === "--help" || arg === "-h") {
      process.stdout.write(`usage: node scripts/build-images.mjs [--only ${IMAGES.join(",")}] [--print-version] [--force]\n`);
      process.exit(0);
    } else fail(`unknown argument ${JSON.stringify(arg)}; usage: node scripts/build-images.mjs [--only ${IMAGES.join(",")}] [--print-version] [--force]`);
  }
  return options;
}

const sha = (...parts) => {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(typeof part === "string" ? part : JSON.stringify(part)).update("\0");
  return hash.digest("hex");
};

function imageLabel(image, label) {
  const result = spawnSync("docker", ["image", "inspect", "-f", `{{ index .Config.Labels "${label}" }}`, image], { encoding: "utf8" });
  return result.status === 0 ? result.stdout.trim() : undefined;
}

/**
 * Tags an image already built from `recipe` (under an earlier version's tag: a commit that changed nothing the
 * image is made of) as `tag`; false when there is none.
 */
function retag(recipe, tag) {
  const id = run("docker", ["images", "-q", "--filter", `label=tack.recipe=${recipe}`]).stdout.trim().split("\n")[0];
  if (!id) return false;
  run("docker", ["tag", id, tag]);
  say(`${tag} is the image built earlier from the same recipe ${recipe} (${imageMb(tag)} MB); tagged`);
  return true;
}

function imageMb(image) {
  const size = Number(run("docker", ["image", "inspect", "-f", "{{ .Size }}", image]).stdout.trim());
  return (size / 1e6).toFixed(0);
}

/** Runs debootstrap with its stages shown as one running progress line. */
function debootstrap(packages, target) {
  return new Promise((resolveRun, reject) => {
    mkdirSync(join(CACHE, "debs"), { recursive: true });
    const child = spawn("debootstrap", ["--variant=minbase", `--cache-dir=${join(CACHE, "debs")}`, `--include=${packages.join(",")}`, SUITE, target, MIRROR], { stdio: ["ignore", "pipe", "pipe"] });
    let n = 0;
    let tail = [];
    const tty = process.stdout.isTTY;
    const onData = (chunk) => {
      for (const line of chunk.toString().split("\n")) {
        if (!line.trim()) continue;
        tail = [...tail.slice(-5), line];
        if (/^I: (Retrieving|Validating|Extracting|Unpacking|Configuring|Installing|Base system)/.test(line)) {
          n++;
          if (tty) process.stdout.write(`\r\x1b[K  [${String(n).padStart(4)}] ${line.slice(0, 70)}`);
          else if (n % 50 === 0 || /^I: Base system/.test(line)) process.stdout.write(`  [${String(n).padStart(4)}] ${line.slice(0, 70)}\n`);
        }
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("error", reject);
    child.on("close", (code) => {
      if (tty) process.stdout.write("\n");
      if (code === 0) resolveRun();
      else reject(new Error(`debootstrap exited with ${code}: ${tail.join(" | ")}`));
    });
  });
}

/**
 * Shell for the chroot: user `name` with the fixed id `uid` (group alike) and home `home`, whether or not a
 * Debian package created it already (then its files follow it to the new id), so the deploy can own files for it.
 */
const fixedUser = (name, uid, home) => [
  `if getent group ${name} >/dev/null; then oldg=$(getent group ${name} | cut -d: -f3); groupmod -g ${uid} ${name}; else oldg=; groupadd -g ${uid} ${name}; fi`,
  `if id -u ${name} >/dev/null 2>&1; then old=$(id -u ${name}); usermod -u ${uid} -g ${uid} -d ${home} ${name}; else old=; useradd -u ${uid} -g ${uid} -M -d ${home} -s /usr/sbin/nologin ${name}; fi`,
  `if [ -n "$old" ] && [ "$old" != ${uid} ]; then find / -xdev -uid "$old" -exec chown -h ${uid} {} +; fi`,
  `if [ -n "$oldg" ] && [ "$oldg" != ${uid} ]; then find / -xdev -gid "$oldg" -exec chgrp -h ${uid} {} +; fi`,
].join("\n");

/** Shell commands run in the fresh root filesystem (chroot), after debootstrap. Part of each rootfs's key. */
const SETUP = {
  services: [
    fixedUser("tack", UID.tack, "/var/lib/tack"),
    `mkdir -p /var/lib/tack /opt/tack && chown ${UID.tack}:${UID.tack} /var/lib/tack`,
  ],
  nats: [
    fixedUser("nats", UID.nats, "/data"),
    `mkdir -p /data /etc/nats && chown ${UID.nats}:${UID.nats} /data && chmod 700 /data`,
  ],
  postgres: [
    fixedUser("postgres", UID.postgres, "/var/lib/postgresql"),
    // The cluster Debian's postinst created is not used: the entrypoint initialises /var/lib/postgresql/data.
    `pg_dropcluster 15 main || true`,
    `mkdir -p /var/lib/postgresql/data /var/run/postgresql && chown ${UID.postgres}:${UID.postgres} /var/lib/postgresql/data /var/run/postgresql && chmod 700 /var/lib/postgresql/data`,
  ],
};
const PACKAGES = {
  // libstdc++6 and ca-certificates for node; tar and coreutils (du) for managed workspaces are in minbase.
  // python3 (with ctypes) for the sandbox service's mount helper (decision 0021).
  services: ["ca-certificates", "libstdc++6", "python3"],
  nats: ["nats-server"],
  postgres: ["postgresql-15", "postgresql-client-15"],
};

/**
 * The cached root filesystem of `name` as a local base image (`tack-base:<name>-<key>`); built when missing. Two
 * cache levels: debootstrap's output (by suite and packages), then that plus the setup commands (by both).
 */
async function baseImage(name) {
  const packagesKey = sha(RECIPE, SUITE, PACKAGES[name]).slice(0, 16);
  const key = sha(packagesKey, SETUP[name]).slice(0, 16);
  const tag = `tack-base:${name}-${key}`;
  if (imageLabel(tag, "tack.recipe") === key) return tag;
  const tarball = join(CACHE, `rootfs-${name}-${key}.tar`);
  const bootstrapped = join(CACHE, `debootstrap-${name}-${packagesKey}.tar`);
  // Sorted names, numeric owners and clamped mtimes: the same packages give the same tar.
  const tar = (dir, file) => {
    run("tar", ["-C", dir, "--sort=name", "--numeric-owner", "--mtime=2024-01-01 00:00:00", "--clamp-mtime", "-cf", `${file}.tmp`, "."]);
    renameSync(`${file}.tmp`, file);
  };
  if (!existsSync(tarball)) {
    if (process.getuid?.() !== 0) fail(`building the ${name} root filesystem needs root (debootstrap, chroot); run: sudo make images`);
    mkdirSync(CACHE, { recursive: true });
    const work = mkdtempSync("/var/tmp/tack-rootfs-");
    const rootfs = join(work, "rootfs");
    const started = performance.now();
    try {
      if (existsSync(bootstrapped)) {
        say(`${name}: unpacking the cached debootstrap output ${bootstrapped}`);
        mkdirSync(rootfs);
        run("tar", ["-C", rootfs, "--numeric-owner", "-xpf", bootstrapped]);
      } else {
        if (spawnSync("debootstrap", ["--version"]).error) fail("debootstrap is missing; install it: apt-get install -y debootstrap");
        say(`debootstrap ${SUITE} for ${name} (${PACKAGES[name].join(", ")}) into ${work}; cached afterwards in ${CACHE}`);
        await debootstrap(PACKAGES[name], rootfs);
        // Caches and docs only make the image bigger.
        for (const dir of ["var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info"]) {
          rmSync(join(rootfs, dir), { recursive: true, force: true });
          mkdirSync(join(rootfs, dir), { recursive: true });
        }
        tar(rootfs, bootstrapped);
      }
      for (const command of SETUP[name]) run("chroot", [rootfs, "/bin/bash", "-euc", command]);
      tar(rootfs, tarball);
      say(`${name} root filesystem built in ${((performance.now() - started) / 1000).toFixed(0)} s`);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }
  say(`importing ${tarball} as ${tag}`);
  run("docker", ["import", "--change", `LABEL tack.recipe=${key}`, tarball, tag]);
  return tag;
}

/** Runs `docker build` (the classic builder: it needs nothing but the local base image) on `context`. */
function dockerBuild(context, tag, dockerfile) {
  writeFileSync(join(context, "Dockerfile"), dockerfile);
  const result = spawnSync("docker", ["build", "--quiet", "--network=none", "-t", tag, context], { encoding: "utf8", env: { ...process.env, DOCKER_BUILDKIT: "0" }, maxBuffer: 16 * 1024 * 1024 });
  if (result.status !== 0) fail(`docker build of ${tag} failed: ${(result.stderr || result.stdout).trim().split("\n").slice(-3).join(" | ")}`);
}

// ---- services image --------------------------------------------------------------------------------------

const builtins = new Set(builtinModules);
// A package specifier: `name`, `@scope/name`, with an optional subpath; nothing with spaces (strings that merely contain "from").
// `createRequire(...)("pkg")` counts too (the llm's tokenizer is loaded that way).
const IMPORT_SPECIFIERS = /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*|\)\s*\(\s*|\bimport\s+)["']((?:@[a-z0-9][\w.-]*\/)?[a-z0-9][\w.-]*(?:\/[\w./@-]*)?)["']/g;

/** The npm packages a bundle file imports (bare specifiers that are not node built-ins). */
function bareImports(file) {
  const names = new Set();
  for (const [, specifier] of readFileSync(file, "utf8").matchAll(IMPORT_SPECIFIERS)) {
    if (specifier.startsWith("node:") || builtins.has(specifier) || builtins.has(specifier.split("/")[0])) continue;
    const parts = specifier.split("/");
    names.add(specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]);
  }
  return names;
}

/** Where Node finds package `name` from `fromDir`: the nearest node_modules/<name> up to the checkout. */
function resolvePackage(name, fromDir) {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", name);
    if (existsSync(join(candidate, "package.json"))) return candidate;
    if (dir === root || dir === dirname(dir)) return undefined;
  }
}

/**
 * Every package directory the bundles need at run time: the packages they import and, transitively, those
 * packages' dependencies (optional and peer ones when installed), resolved as Node resolves them.
 */
function productionPackages(bundleFiles) {
  const needed = new Map();
  const queue = [];
  for (const file of bundleFiles) for (const name of bareImports(file)) queue.push([name, root, relative(root, file)]);
  while (queue.length > 0) {
    const [name, from, by] = queue.shift();
    const dir = resolvePackage(name, from);
    if (!dir) {
      if (from === root) fail(`${by} imports ${name}, which is not installed in node_modules; run make deps`);
      continue; // an optional or peer dependency that is not installed
    }
    const real = realpathSync(dir);
    if (!real.startsWith(`${root}/node_modules/`)) continue; // a workspace package (@tack/*): bundled in
    if (needed.has(dir)) continue;
    needed.set(dir, real);
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
    for (const dep of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies, ...pkg.peerDependencies })) queue.push([dep, dir, name]);
  }
  return [...needed.keys()].sort();
}

/** Files under `base`/`dir` (relative to `base`), skipping node_modules, tests and anything `skip` rejects. */
function sourceFiles(base, dir, skip = () => false) {
  const out = [];
  const walk = (abs) => {
    for (const entry of readdirSync(abs, { withFileTypes: true })) {
      const path = join(abs, entry.name);
      const rel = relative(base, path);
      if (entry.name === "node_modules" || entry.name === "test" || entry.name === "tests" || /\.test\.[cm]?[jt]s$/.test(entry.name) || skip(rel, entry)) continue;
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile() || entry.isSymbolicLink()) out.push(rel);
    }
  };
  walk(join(base, dir));
  return out;
}

/**
 * The committed tree of HEAD (`git archive`) in a temporary directory, with a node_modules of links to the
 * checkout's packages (the workspace packages @tack/* linked inside the copy): the image holds exactly what
 * the version's git hash names, whatever is being edited in the checkout meanwhile.
 */
function committedTree() {
  const src = mkdtempSync("/var/tmp/tack-services-src-");
  const archive = spawnSync("bash", ["-c", `git -C "$1" archive --format=tar HEAD | tar -x -C "$2"`, "archive", root, src], { encoding: "utf8" });
  if (archive.status !== 0) fail(`git archive HEAD of ${root} failed: ${archive.stderr.trim()}`);
  mkdirSync(join(src, "node_modules"));
  for (const entry of readdirSync(join(root, "node_modules"))) {
    if (entry === "@tack") {
      mkdirSync(join(src, "node_modules/@tack"));
      for (const pkg of readdirSync(join(root, "node_modules/@tack"))) symlinkSync(readlinkSync(join(root, "node_modules/@tack", pkg)), join(src, "node_modules/@tack", pkg));
    } else symlinkSync(join(root, "node_modules", entry), join(src, "node_modules", entry));
  }
  return src;
}

/** Every file of a package directory but its own nested node_modules (those are packages of their own). */
function packageFiles(dir) {
  const out = [];
  const walk = (abs) => {
    for (const entry of readdirSync(abs, { withFileTypes: true })) {
      if (abs === dir && entry.name === "node_modules") continue;
      const path = join(abs, entry.name);
      if (entry.isDirectory()) walk(path);
      else out.push(relative(root, path));
    }
  };
  walk(dir);
  return out;
}

async function fileHash(file) {
  const stat = lstatSync(file);
  if (stat.isSymbolicLink()) return sha("link", readlinkSync(file));
  const hash = createHash("sha256");
  await new Promise((resolveRead, reject) => createReadStream(file).on("data", (chunk) => hash.update(chunk)).on("end", resolveRead).on("error", reject));
  return `${hash.digest("hex")}:${stat.mode & 0o777}`;
}

/** Bundles scripts/images/entrypoint.ts (the @tack/* code it uses included, npm packages external) into `outfile`. */
async function bundleEntrypoint(src, outfile) {
  const { build } = await import("esbuild");
  await build({
    absWorkingDir: src,
    entryPoints: [join(src, "scripts/images/entrypoint.ts")],
    outfile,
    bundle: true,
    format: "esm",
    platform: "node",
    target: `node${readFileSync(join(root, ".node-version"), "utf8").trim().split(".")[0]}`,
    logLevel: "error",
    banner: { js: "// Built by scripts/build-images.mjs from scripts/images/entrypoint.ts; do not edit." },
    plugins: [{
      name: "external-npm",
      setup(b) {
        b.onResolve({ filter: /^[^./]/ }, (args) => (args.kind === "entry-point" || args.path.startsWith("@tack/") ? undefined : { external: true }));
      },
    }],
  });
}

async function servicesImage(version, force) {
  const started = performance.now();
  const node = realpathSync(process.execPath);
  const nodeVersion = process.versions.node;
  const pinned = readFileSync(join(root, ".node-version"), "utf8").trim();
  if (nodeVersion !== pinned) fail(`the services image takes the node binary that runs this script (${node}, ${nodeVersion}), which must be the pinned Node ${pinned} of .node-version (the one node_modules' better-sqlite3 was built for); run it through make (make images), which puts .tack/node/bin first on PATH`);
  const src = committedTree();
  const staging = mkdtempSync("/var/tmp/tack-services-image-");
  try {
    const build = spawnSync(process.execPath, [join(src, "scripts/build.mjs")], { cwd: src, stdio: ["ignore", "ignore", "inherit"] });
    if (build.status !== 0) fail(`make build of the committed tree (HEAD, ${version}) failed (see above); the services image is made of its bundles`);
    // The web UI the gateway serves at / (packages/web/dist).
    const web = spawnSync(process.execPath, [join(src, "packages/web/build.mjs")], { cwd: src, stdio: ["ignore", "ignore", "inherit"] });
    if (web.status !== 0) fail(`the web UI build of the committed tree (HEAD, ${version}) failed (see above); the gateway serves it`);
    const entry = join(staging, "entrypoint.js");
    await bundleEntrypoint(src, entry);
    const manifest = JSON.parse(readFileSync(join(src, "dist/manifest.json"), "utf8"));
    const distFiles = ["dist/manifest.json"];
    for (const [name, info] of Object.entries(manifest.entries)) {
      if (!name.startsWith("services/")) continue;
      for (const output of info.outputs) distFiles.push(`dist/${output}`, `dist/${output}.map`);
    }
    const bundles = [entry, ...distFiles.filter((f) => f.endsWith(".js")).map((f) => join(src, f))];
    const packages = productionPackages(bundles);
    // [absolute source, path in the image relative to /opt/tack]
    const files = [
      ...[
        ...distFiles.filter((f) => existsSync(join(src, f))),
        "package.json", "tsconfig.json",
        ...sourceFiles(src, "packages", (rel) => rel.startsWith("packages/cli/") || rel.startsWith("packages/testkit/") || rel.startsWith("packages/web/")),
        ...sourceFiles(src, "packages/web/dist"),
        ...sourceFiles(src, "services"),
        ...sourceFiles(src, "examples"),
      ].map((file) => [join(src, file), file]),
      ...packages.flatMap(packageFiles).map((file) => [join(root, file), file]),
    ];
    // What the image is made of, by content: base rootfs, node, the entrypoint, every file copied.
    const base = await baseImage("services");
    const hash = createHash("sha256").update(`${RECIPE}\0${base}\0${await fileHash(node)}\0${await fileHash(entry)}\0${readFileSync(fileURLToPath(import.meta.url))}`);
    for (const [from, file] of files) hash.update(`${file}\0${await fileHash(from)}\0`);
    const recipe = hash.digest("hex").slice(0, 16);
    const tag = `tack-services:${version}`;
    if (!force && imageLabel(tag, "tack.recipe") === recipe) {
      say(`${tag} is up to date (recipe ${recipe}, ${imageMb(tag)} MB)`);
      return;
    }
    if (!force && retag(recipe, tag)) return;
    say(`staging ${files.length} files (${packages.length} npm packages the bundles need) for ${tag}`);
    for (const [from, file] of files) {
      // node_modules in a layer of its own: a code change then reuses it (docker build's cache).
      const to = file.startsWith("node_modules/") ? join(staging, file) : join(staging, "opt/tack", file);
      mkdirSync(dirname(to), { recursive: true });
      if (lstatSync(from).isSymbolicLink()) symlinkSync(readlinkSync(from), to);
      else copyFileSync(from, to);
    }
    mkdirSync(join(staging, "opt/tack/dist"), { recursive: true });
    renameSync(entry, join(staging, "opt/tack/dist/entrypoint.js"));
    copyFileSync(node, join(staging, "node"));
    chmodSync(join(staging, "node"), 0o755);
    dockerBuild(staging, tag, [
      `FROM ${base}`,
      "COPY node /usr/local/bin/node",
      "COPY node_modules /opt/tack/node_modules",
      "COPY opt/tack /opt/tack",
      `USER ${UID.tack}:${UID.tack}`,
      "WORKDIR /var/lib/tack",
      "ENV NODE_ENV=production NODE_OPTIONS=--enable-source-maps TACK_STATE_DIR=/var/lib/tack PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8",
      `LABEL tack.recipe=${recipe} tack.node=${nodeVersion}`,
      `ENTRYPOINT ["/usr/local/bin/node", "/opt/tack/dist/entrypoint.js"]`,
      `CMD ["help"]`,
      "",
    ].join("\n"));
    say(`built ${tag} (${imageMb(tag)} MB, node ${nodeVersion}) in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  } finally {
    rmSync(staging, { recursive: true, force: true });
    rmSync(src, { recursive: true, force: true });
  }
}

// ---- nats, postgres, sandbox -----------------------------------------------------------------------------

async function simpleImage(name, version, force, dockerfileLines, extraFiles = {}) {
  const started = performance.now();
  const base = await baseImage(name);
  const recipe = sha(RECIPE, base, dockerfileLines, Object.values(extraFiles).map((file) => readFileSync(join(root, file), "utf8"))).slice(0, 16);
  const tag = `tack-${name}:${version}`;
  if (!force && imageLabel(tag, "tack.recipe") === recipe) {
    say(`${tag} is up to date (recipe ${recipe}, ${imageMb(tag)} MB)`);
    return;
  }
  if (!force && retag(recipe, tag)) return;
  const staging = mkdtempSync(`/var/tmp/tack-${name}-image-`);
  try {
    for (const [target, file] of Object.entries(extraFiles)) {
      copyFileSync(join(root, file), join(staging, target));
      chmodSync(join(staging, target), 0o755);
    }
    dockerBuild(staging, tag, [`FROM ${base}`, ...dockerfileLines, `LABEL tack.recipe=${recipe}`, ""].join("\n"));
    say(`built ${tag} (${imageMb(tag)} MB) in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

const natsImage = (version, force) => simpleImage("nats", version, force, [
  `USER ${UID.nats}:${UID.nats}`,
  "WORKDIR /data",
  'ENTRYPOINT ["/usr/sbin/nats-server"]',
  'CMD ["-c", "/etc/nats/nats-server.conf"]',
]);

const postgresImage = (version, force) => simpleImage("postgres", version, force, [
  "COPY postgres-entrypoint /usr/local/bin/tack-postgres",
  `USER ${UID.postgres}:${UID.postgres}`,
  "ENV PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8",
  'ENTRYPOINT ["/usr/local/bin/tack-postgres"]',
], { "postgres-entrypoint": "scripts/images/postgres-entrypoint.sh" });

function sandboxImage(version) {
  const started = performance.now();
  const result = spawnSync(join(root, "scripts/build-sandbox-image.sh"), [], { stdio: "inherit", env: { ...process.env, TACK_SANDBOX_IMAGE: "tack-sandbox:bookworm" } });
  if (result.status !== 0) fail("the sandbox image did not build (see above)");
  run("docker", ["tag", "tack-sandbox:bookworm", `tack-sandbox:${version}`]);
  say(`tagged tack-sandbox:${version} (${imageMb(`tack-sandbox:${version}`)} MB) in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

// ---- main ------------------------------------------------------------------------------------------------

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const options = parseArgs(process.argv.slice(2));
  const version = imageVersion();
  if (options.printVersion) {
    process.stdout.write(`${version}\n`);
    process.exit(0);
  }
  if (spawnSync("docker", ["info"], { stdio: "ignore" }).status !== 0) fail("the Docker engine is not reachable; start it with: sudo scripts/ensure-docker.sh");
  const started = performance.now();
  for (const name of options.only) {
    if (name === "services") await servicesImage(version, options.force);
    else if (name === "nats") await natsImage(version, options.force);
    else if (name === "postgres") await postgresImage(version, options.force);
    else sandboxImage(version);
  }
  say(`${options.only.map((name) => `tack-${name}:${version}`).join(", ")} ready in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}
