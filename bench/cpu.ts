// CPU accounting for a bench window (the `load` part): samples the whole system's CPU time
// (/proc/stat), every process's (/proc/<pid>/stat: utime+stime of its own, cutime+cstime of the
// children it reaped) and every Docker container's cgroup (cgroup v1 cpuacct.usage, v2 cpu.stat
// usage_usec), then splits the CPU spent between two samples by process kind: each Tack service
// (its process and descendants), the bench's own process, nats-server, dockerd, containerd, the
// containerd shims (with the runc calls they reaped), the sandboxes' exec agents (PID 1 of each
// container) and the commands (the rest of each container's cgroup). `other` is the system's CPU
// time minus all of those, so the kinds add up to the machine's CPU time over the window.
// Reaped children's time counts only under a named kind (init reaps orphans such as the shims of
// removed containers, whose time was counted while they lived), and a shim's without the lifetime
// of its container's PID 1 as last sampled (the cgroup counted it).
// A sample only reads files: no Docker call falls inside a measured window.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { round } from "./lib.js";

/** The kinds CPU time is split into, in report order. */
export const CPU_KINDS = [
  "gateway", "loop", "llm", "tools", "sandbox", "skills", "mcp", "nats", "bench",
  "dockerd", "containerd", "shims", "agents", "commands", "other",
] as const;
export type CpuKind = (typeof CPU_KINDS)[number];

/** One process as a sample saw it; times in clock ticks. */
interface Proc {
  readonly pid: number;
  readonly ppid: number;
  readonly comm: string;
  /** utime + stime. */
  readonly own: number;
  /** cutime + cstime: the children it has waited for. */
  readonly reaped: number;
  /** For a containerd shim, the container it serves (`-id` of its command line). */
  readonly shimOf?: string;
}

/** One container's cgroup as a sample saw it. */
interface Container {
  readonly usageMs: number;
  /** Key (`pid:starttime`) of its PID 1: the earliest-started process of the cgroup whose parent is outside it. */
  readonly init?: string;
}

/** Everything one sample read. */
export interface CpuSample {
  /** performance.now() at the middle of the sample. */
  readonly at: number;
  /** /proc/stat busy time (user + nice + system + irq + softirq), clock ticks: the mean of the reads before and after the scan. */
  readonly busy: number;
  readonly irq: number;
  readonly steal: number;
  readonly idle: number;
  /** Processes by `pid:starttime` (a reused pid is another process). */
  readonly procs: ReadonlyMap<string, Proc>;
  readonly containers: ReadonlyMap<string, Container>;
  /** Keys of the processes inside a container's cgroup (accounted by the cgroup, not per process). */
  readonly contained: ReadonlySet<string>;
  /** The roots of the named kinds at the time of the sample: pid → kind. */
  readonly roots: ReadonlyMap<number, CpuKind>;
  /** How long the scan took, ms. */
  readonly scanMs: number;
  readonly loadavg: readonly number[];
}

/** CPU time between two samples, ms (for the whole window, not per session). */
export interface CpuSplit {
  readonly wallMs: number;
  readonly totalMs: number;
  readonly byKind: Record<CpuKind, number>;
  /** What `other` holds: kernel threads, interrupts, containers not of the measured set, other processes by name, and what no live process accounts for. */
  readonly otherDetail: Record<string, number>;
  /** Steal time the hypervisor took (not part of totalMs), ms. */
  readonly stealMs: number;
  /** The machine's whole CPU time over the window (busy, idle, iowait and steal), ms. */
  readonly capacityMs: number;
}

const CGROUP_DIRS: ReadonlyArray<{ dir: string; usage: (dir: string) => number }> = [
  // cgroup v1 (cgroupfs or systemd driver): cpuacct.usage in ns.
  ...["/sys/fs/cgroup/cpuacct/docker", "/sys/fs/cgroup/cpu,cpuacct/docker", "/sys/fs/cgroup/cpuacct/system.slice"].map((dir) => ({ dir, usage: (d: string) => Number(readFileSync(join(d, "cpuacct.usage"), "utf8")) / 1e6 })),
  // cgroup v2: usage_usec of cpu.stat.
  ...["/sys/fs/cgroup/docker", "/sys/fs/cgroup/system.slice"].map((dir) => ({
    dir,
    usage: (d: string) => Number(/^usage_usec (\d+)$/m.exec(readFileSync(join(d, "cpu.stat"), "utf8"))?.[1] ?? Number.NaN) / 1e3,
  })),
];
const CONTAINER_DIR = /^(?:docker-)?([0-9a-f]{64})(?:\.scope)?$/;

/** Samples CPU time; `roots` names the pids of the services at the time of each sample. */
export class CpuMeter {
  /** Clock ticks per second (`getconf CLK_TCK`). */
  readonly hz: number;
  readonly cores = cpus().length;

  constructor(private readonly services: () => Partial<Record<CpuKind, readonly number[]>>) {
    let hz = 100;
    try {
      hz = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;
    } catch {
      // getconf missing: Linux's USER_HZ is 100 everywhere it runs.
    }
    this.hz = hz;
  }

  /** Reads everything once (synchronously, so no other work of this process interleaves). */
  sample(): CpuSample {
    const t0 = performance.now();
    const before = readStat();
    const procs = new Map<string, Proc>();
    const byPid = new Map<number, string>();
    for (const name of readdirSync("/proc")) {
      if (!/^\d+$/.test(name)) continue;
      const proc = readProc(Number(name));
      if (!proc) continue;
      procs.set(proc.key, proc.proc);
      byPid.set(proc.proc.pid, proc.key);
    }
    const containers = new Map<string, Container>();
    const contained = new Set<string>();
    for (const { dir, usage } of CGROUP_DIRS) {
      if (!existsSync(dir)) continue;
      for (const entry of readdirSync(dir)) {
        const id = CONTAINER_DIR.exec(entry)?.[1];
        if (!id) continue;
        try {
          const usageMs = usage(join(dir, entry));
          const pids = readFileSync(join(dir, entry, "cgroup.procs"), "utf8").split("\n").filter(Boolean).map(Number);
          const inside = new Set(pids);
          let init: string | undefined;
          for (const pid of pids) {
            const key = byPid.get(pid);
            if (!key) continue;
            contained.add(key);
            // The earliest-started one whose parent (the shim) is outside: the agent, not a passing runc process.
            const started = (k: string) => Number(k.split(":")[1]);
            if (!inside.has(procs.get(key)!.ppid) && (init === undefined || started(key) < started(init))) init = key;
          }
          containers.set(id, { usageMs, init });
        } catch {
          // Removed meanwhile.
        }
      }
    }
    const roots = new Map<number, CpuKind>([[process.pid, "bench"]]);
    for (const proc of procs.values()) {
      if (proc.comm === "nats-server") roots.set(proc.pid, "nats");
      else if (proc.comm === "dockerd") roots.set(proc.pid, "dockerd");
      else if (proc.comm === "containerd") roots.set(proc.pid, "containerd");
      else if (proc.comm.startsWith("containerd-shim")) roots.set(proc.pid, "shims");
    }
    for (const [kind, pids] of Object.entries(this.services())) for (const pid of pids ?? []) roots.set(pid, kind as CpuKind);
    const after = readStat();
    const mean = (k: keyof ReturnType<typeof readStat>) => (before[k] + after[k]) / 2;
    return {
      at: (t0 + performance.now()) / 2, busy: mean("busy"), irq: mean("irq"), steal: mean("steal"), idle: mean("idle"),
      procs, containers, contained, roots, scanMs: performance.now() - t0, loadavg: loadavg(),
    };
  }

  /**
   * The CPU spent from `a` to `b`, split by kind. `measured` are the ids of the containers whose
   * cgroups count as agents and commands (the others fall in `other`); shims of other containers too.
   */
  split(a: CpuSample, b: CpuSample, measured: ReadonlySet<string>): CpuSplit {
    const ms = (ticks: number) => (ticks * 1000) / this.hz;
    const byKind = Object.fromEntries(CPU_KINDS.map((k) => [k, 0])) as Record<CpuKind, number>;
    const detail: Record<string, number> = {};
    const add = (name: string, value: number) => void (detail[name] = (detail[name] ?? 0) + value);
    const parents = new Map<number, Proc>();
    for (const proc of b.procs.values()) parents.set(proc.pid, proc);
    // The nearest ancestor (or itself) that is a root, as the end sample sees the process tree.
    const nearest = (proc: Proc): { kind: CpuKind; root: Proc } | undefined => {
      for (let p: Proc | undefined = proc, hops = 0; p && hops < 64; hops++) {
        const kind = b.roots.get(p.pid);
        if (kind) return { kind, root: p };
        p = p.ppid > 0 ? parents.get(p.ppid) : undefined;
      }
      return undefined;
    };
    // A shim reaps its container's PID 1 when the container stops: that lifetime was counted by the cgroup already.
    const initReapedBy = new Map<string, number>();
    for (const [id, container] of a.containers) {
      const init = container.init && !b.procs.has(container.init) ? a.procs.get(container.init) : undefined;
      if (init) initReapedBy.set(id, (initReapedBy.get(id) ?? 0) + init.own + init.reaped);
    }
    for (const [key, proc] of b.procs) {
      if (b.contained.has(key)) continue;
      const was = a.procs.get(key);
      const found = nearest(proc);
      // Reaped children count only under a named kind: an unnamed process (init, a subreaper) reaps orphans, such as shims of
      // removed containers, whose whole lifetime was counted while they lived.
      const reaped = found ? proc.reaped - (was?.reaped ?? 0) - (proc.shimOf !== undefined ? initReapedBy.get(proc.shimOf) ?? 0 : 0) : 0;
      const used = ms(proc.own - (was?.own ?? 0) + Math.max(0, reaped));
      if (used <= 0) continue;
      if (found?.kind === "shims" && found.root.shimOf !== undefined && !measured.has(found.root.shimOf)) add("other_shims", used);
      else if (found) byKind[found.kind] += used;
      else if (proc.pid === 2 || proc.ppid === 2) add("kernel_threads", used);
      else add(`process:${proc.comm}`, used);
    }
    for (const [id, container] of b.containers) {
      const was = a.containers.get(id);
      const used = container.usageMs - (was?.usageMs ?? 0);
      if (!measured.has(id)) {
        add("other_containers", used);
        continue;
      }
      const init = container.init ? b.procs.get(container.init) : undefined;
      const initWas = container.init ? a.procs.get(container.init) : undefined;
      const agent = init ? Math.min(used, ms(init.own - (initWas?.own ?? 0))) : 0;
      byKind.agents += agent;
      byKind.commands += used - agent;
    }
    const totalMs = ms(b.busy - a.busy);
    const irqMs = ms(b.irq - a.irq);
    add("irq_softirq", irqMs);
    const named = CPU_KINDS.reduce((sum, k) => sum + byKind[k], 0);
    byKind.other = totalMs - named;
    const listed = Object.values(detail).reduce((sum, v) => sum + v, 0);
    // Processes that exited in the window and were reaped outside the named kinds, and rounding of per-process ticks.
    detail.exited_or_unattributed = byKind.other - listed;
    return {
      wallMs: b.at - a.at, totalMs, byKind, otherDetail: detail, stealMs: ms(b.steal - a.steal),
      capacityMs: ms(b.busy + b.idle + b.steal - a.busy - a.idle - a.steal),
    };
  }
}

/**
 * Consecutive splits added up. A window over which containers came and went is measured as the
 * sum of shorter ones: a split only sees a container (or process) alive at its end.
 */
export function sumSplits(splits: readonly CpuSplit[]): CpuSplit {
  const byKind = Object.fromEntries(CPU_KINDS.map((k) => [k, splits.reduce((sum, s) => sum + s.byKind[k], 0)])) as Record<CpuKind, number>;
  const otherDetail: Record<string, number> = {};
  for (const s of splits) for (const [name, v] of Object.entries(s.otherDetail)) otherDetail[name] = (otherDetail[name] ?? 0) + v;
  const total = (k: "wallMs" | "totalMs" | "stealMs" | "capacityMs") => splits.reduce((sum, s) => sum + s[k], 0);
  return { wallMs: total("wallMs"), totalMs: total("totalMs"), byKind, otherDetail, stealMs: total("stealMs"), capacityMs: total("capacityMs") };
}

/** `split` divided by `sessions`, rounded, in the shape the bench reports. */
export function perSession(split: CpuSplit, sessions: number, otherTop = 8): {
  wall_ms: number;
  cpu_ms_per_session: number;
  by_kind: Record<CpuKind, number>;
  other_detail: Record<string, number>;
  /** CPU time over the machine's capacity (wall × cores, from /proc/stat), percent. */
  busy_percent: number;
  steal_ms: number;
} {
  const each = (v: number) => round(v / sessions, 1);
  const detail = Object.entries(split.otherDetail).sort(([, x], [, y]) => Math.abs(y) - Math.abs(x));
  const shown = detail.slice(0, otherTop);
  const rest = detail.slice(otherTop).reduce((sum, [, v]) => sum + v, 0);
  return {
    wall_ms: Math.round(split.wallMs),
    cpu_ms_per_session: each(split.totalMs),
    by_kind: Object.fromEntries(CPU_KINDS.map((k) => [k, each(split.byKind[k])])) as Record<CpuKind, number>,
    other_detail: Object.fromEntries([...shown.map(([k, v]) => [k, each(v)]), ...(detail.length > otherTop ? [["the_rest", each(rest)]] : [])]),
    busy_percent: round(split.capacityMs > 0 ? (100 * split.totalMs) / split.capacityMs : Number.NaN, 1),
    steal_ms: Math.round(split.stealMs),
  };
}

function readStat(): { busy: number; irq: number; steal: number; idle: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!;
  // cpu user nice system idle iowait irq softirq steal guest guest_nice (guest time is already in user and nice)
  const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number) as number[];
  return { busy: user! + nice! + system! + irq! + softirq!, irq: irq! + softirq!, steal: steal ?? 0, idle: idle! + iowait! };
}

function readProc(pid: number): { key: string; proc: Proc } | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined; // exited meanwhile
  }
  const close = stat.lastIndexOf(")");
  const comm = stat.slice(stat.indexOf("(") + 1, close);
  // After ") ": state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17) … starttime(22).
  const f = stat.slice(close + 2).split(" ");
  const n = (field: number) => Number(f[field - 3]);
  let shimOf: string | undefined;
  if (comm.startsWith("containerd-shim")) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      const at = argv.indexOf("-id");
      if (at >= 0) shimOf = argv[at + 1];
    } catch {
      // exited meanwhile
    }
  }
  return {
    key: `${pid}:${n(22)}`,
    proc: { pid, ppid: n(4), comm, own: n(14) + n(15), reaped: n(16) + n(17), ...(shimOf ? { shimOf } : {}) },
  };
}
