// deploy/k8s in `make test`: every overlay builds with the machine's `kubectl kustomize`, every
// object validates against the Kubernetes schemas of the pinned kubernetes-models, Tack's rules
// hold (restricted Pod Security, probes, limits, pinned images, NATS and OTEL settings), and a
// broken copy of a manifest is caught. The NATS configuration the manifests carry starts a real
// nats-server with the Secrets' passwords, and the containers' `--probe` answers through it.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { Bus, registerMicro } from "@tack/bus";
import { compileOperatorConfig, probeService } from "@tack/config";
import { freePort } from "../../packages/cli/src/nats-server.js";
import { renderNatsAuth } from "../../deploy/k8s/render-nats-auth.js";
import { buildOverlay, OVERLAYS, podSpec, policyViolations, schemaError, type K8sObject } from "./k8s-manifests.js";

const built = new Map<string, K8sObject[]>();
const objectsOf = (overlay: string) => built.get(overlay)!;
const find = (objects: K8sObject[], kind: string, name: string, namespace?: string) =>
  objects.find((o) => o.kind === kind && o.metadata.name === name && (namespace === undefined || o.metadata.namespace === namespace))!;
/** A Secret's or ConfigMap's values as text (base64 decoded for a Secret). */
const dataOf = (object: K8sObject): Record<string, string> => {
  const data = (object as { data?: Record<string, string> }).data ?? {};
  return object.kind === "Secret" ? Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v, "base64").toString()])) : data;
};
const secretNamed = (objects: K8sObject[], prefix: string, namespace = "tack") =>
  objects.find((o) => o.kind === "Secret" && o.metadata.namespace === namespace && o.metadata.name.startsWith(`${prefix}-`))!;

beforeAll(() => {
  for (const overlay of OVERLAYS) built.set(overlay, buildOverlay(overlay));
}, 60_000);

describe("deploy/k8s", () => {
  it.each(OVERLAYS)("k8s - overlay %s builds with kubectl kustomize and every object validates against the Kubernetes schemas", async (overlay) => {
    const objects = objectsOf(overlay);
    const kinds = new Set(objects.map((o) => o.kind));
    for (const kind of ["Namespace", "StatefulSet", "Deployment", "DaemonSet", "HorizontalPodAutoscaler", "NetworkPolicy", "RuntimeClass", "Secret", "ConfigMap", "Service"]) expect(kinds, kind).toContain(kind);
    const errors = (await Promise.all(objects.map(schemaError))).filter(Boolean);
    expect(errors).toEqual([]);
  });

  it.each(OVERLAYS)("k8s - overlay %s follows Tack's rules: restricted pods, probes, limits, pinned images, NATS and OTEL env", (overlay) => {
    expect(policyViolations(objectsOf(overlay))).toEqual([]);
  });

  it("k8s - a broken copy of a manifest is caught, each break with its own message", async () => {
    const broken = (mutate: (objects: K8sObject[]) => void) => {
      const copy = structuredClone(objectsOf("dev"));
      mutate(copy);
      return policyViolations(copy);
    };
    const container = (objects: K8sObject[], name: string) => podSpec(find(objects, "Deployment", name))!.containers[0]! as Record<string, unknown> & { securityContext: Record<string, unknown>; env: Array<{ name: string }>; resources: Record<string, unknown> };
    expect(broken((o) => { container(o, "tools").image = "tack-services:latest"; })).toEqual([expect.stringMatching(/Deployment\/tack\/tools container tools: image tack-services:latest is tagged latest/)]);
    expect(broken((o) => { container(o, "tools").image = "tack-services"; })).toEqual([expect.stringMatching(/tools: image tack-services has no tag/)]);
    expect(broken((o) => { container(o, "loop").securityContext.capabilities = { drop: ["NET_RAW"] }; })).toEqual([expect.stringMatching(/loop container loop: capabilities.drop does not list ALL/)]);
    expect(broken((o) => { delete container(o, "llm").securityContext.allowPrivilegeEscalation; })).toEqual([expect.stringMatching(/llm: allowPrivilegeEscalation is not false/)]);
    expect(broken((o) => {
      delete podSpec(find(o, "Deployment", "mcp"))!.securityContext!.seccompProfile;
      delete container(o, "mcp").securityContext.seccompProfile;
    })).toEqual([expect.stringMatching(/mcp: seccompProfile is not RuntimeDefault/)]);
    expect(broken((o) => {
      podSpec(find(o, "Deployment", "skills"))!.securityContext!.runAsNonRoot = false;
      delete container(o, "skills").securityContext.runAsNonRoot;
    })).toEqual([expect.stringMatching(/skills: runAsNonRoot is not true/)]);
    expect(broken((o) => { delete container(o, "gateway").readinessProbe; })).toEqual([expect.stringMatching(/gateway container gateway: no readinessProbe/)]);
    expect(broken((o) => { delete (container(o, "tools").resources as { limits?: unknown }).limits; })).toEqual([
      expect.stringMatching(/tools: no cpu limit/), expect.stringMatching(/tools: no memory limit/),
    ]);
    expect(broken((o) => { container(o, "loop").env = container(o, "loop").env.filter((e) => e.name !== "TACK_NATS_PASSWORD"); })).toEqual([expect.stringMatching(/loop: TACK_NATS_PASSWORD is not set/)]);
    expect(broken((o) => { (container(o, "loop").env.find((e) => e.name === "TACK_NATS_USER") as unknown as { value: string }).value = "admin"; })).toEqual([expect.stringMatching(/runs loop as NATS user admin/)]);
    // The OTEL settings come from a ConfigMap: losing it loses OTEL_* in every service.
    expect(broken((o) => { o.splice(o.findIndex((x) => x.kind === "ConfigMap" && x.metadata.namespace === "tack" && x.metadata.name.startsWith("tack-otel-")), 1); }))
      .toEqual(expect.arrayContaining([expect.stringMatching(/tools: names ConfigMap tack-otel-\w+, which is not in namespace tack/), expect.stringMatching(/tools: OTEL_EXPORTER_OTLP_ENDPOINT is not set/)]));
    expect(broken((o) => { o.splice(o.findIndex((x) => x.kind === "HorizontalPodAutoscaler" && x.metadata.name === "tools"), 1); })).toEqual(["Deployment tools: no HorizontalPodAutoscaler scales it"]);
    expect(broken((o) => { o.splice(o.findIndex((x) => x.kind === "NetworkPolicy" && x.metadata.name === "default-deny" && x.metadata.namespace === "tack-sandbox"), 1); })).toEqual([expect.stringMatching(/Namespace tack-sandbox: no default-deny NetworkPolicy/)]);
    // Only the sandbox agent may use the privileged namespace.
    expect(broken((o) => { find(o, "Deployment", "tools").metadata.namespace = "tack-sandbox"; })).toEqual(expect.arrayContaining([expect.stringMatching(/Deployment\/tack-sandbox\/tools: only the sandbox agent may run in the privileged namespace/)]));
    // And the schema check catches a wrong type.
    const deployment = structuredClone(find(objectsOf("dev"), "Deployment", "tools"));
    (deployment.spec as { replicas: unknown }).replicas = "three";
    expect(await schemaError(deployment)).toMatch(/Deployment\/tack\/tools: .*replicas must be integer/);
  });

  it.each(OVERLAYS)("k8s - overlay %s: each Deployment holds only its own secrets (provider keys in llm, web_search's in tools, the admin key and database in the gateway)", (overlay) => {
    const objects = objectsOf(overlay);
    const holders = new Map<string, string[]>();
    for (const object of objects) {
      // Tack's own containers (NATS takes every password: it admits every user).
      for (const c of (podSpec(object)?.containers ?? []).filter((c) => c.image?.includes("tack-services"))) {
        for (const variable of (c.env ?? []) as Array<{ name: string; valueFrom?: { secretKeyRef?: unknown } }>) {
          if (variable.valueFrom?.secretKeyRef) holders.set(variable.name, [...(holders.get(variable.name) ?? []), object.metadata.name].sort());
        }
        expect((c.envFrom ?? []).filter((from) => "secretRef" in from), `${object.metadata.name} takes a whole Secret`).toEqual([]);
      }
    }
    expect(holders.get("OPENAI_API_KEY")).toEqual(["llm"]);
    expect(holders.get("ANTHROPIC_API_KEY")).toEqual(["llm"]);
    expect(holders.get("DEEPSEEK_API_KEY")).toEqual(["llm", "tools"]);
    expect(holders.get("BRAVE_API_KEY")).toEqual(["tools"]);
    expect(holders.get("TACK_API_KEY")).toEqual(["gateway"]);
    expect(holders.get("TACK_DB")).toEqual(["gateway"]);
  });

  it("k8s - a secret given to a service that does not use it, or a whole Secret through envFrom, is caught naming the fix", () => {
    const broken = (mutate: (objects: K8sObject[]) => void) => {
      const copy = structuredClone(objectsOf("dev"));
      mutate(copy);
      return policyViolations(copy);
    };
    const container = (objects: K8sObject[], name: string) => podSpec(find(objects, "Deployment", name))!.containers[0]! as unknown as { env: unknown[]; envFrom: unknown[] };
    const secretName = (objects: K8sObject[], prefix: string) => objects.find((o) => o.kind === "Secret" && o.metadata.name.startsWith(`${prefix}-`))!.metadata.name;
    expect(broken((o) => { container(o, "tools").envFrom.push({ secretRef: { name: secretName(o, "tack-provider-keys") } }); }))
      .toEqual([expect.stringMatching(/Deployment\/tack\/tools container tools: takes the whole Secret tack-provider-keys-\w+ through envFrom; name each key/)]);
    expect(broken((o) => { container(o, "tools").env.push({ name: "OPENAI_API_KEY", valueFrom: { secretKeyRef: { name: secretName(o, "tack-provider-keys"), key: "OPENAI_API_KEY", optional: true } } }); }))
      .toEqual([expect.stringMatching(/tools container tools: gets secret OPENAI_API_KEY from tack-provider-keys-\w+, which the tools service does not use/)]);
    expect(broken((o) => { container(o, "loop").env.push({ name: "TACK_API_KEY", valueFrom: { secretKeyRef: { name: secretName(o, "tack-gateway"), key: "TACK_API_KEY" } } }); }))
      .toEqual([expect.stringMatching(/loop container loop: gets secret TACK_API_KEY from tack-gateway-\w+, which the loop service does not use/)]);
  });

  it("k8s - dev runs Jaeger and PostgreSQL in the cluster and sends every span to Jaeger; team uses an external PostgreSQL and OTLP over gRPC", () => {
    const dev = objectsOf("dev");
    const team = objectsOf("team");
    expect(find(dev, "Deployment", "jaeger")).toBeDefined();
    expect(find(dev, "StatefulSet", "postgres")).toBeDefined();
    const otel = (objects: K8sObject[], namespace: string) => dataOf(objects.find((o) => o.kind === "ConfigMap" && o.metadata.namespace === namespace && o.metadata.name.startsWith("tack-otel-"))!);
    for (const namespace of ["tack", "tack-sandbox"]) {
      expect(otel(dev, namespace)).toMatchObject({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://jaeger.tack.svc.cluster.local:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf", OTEL_TRACES_SAMPLER: "always_on" });
      expect(otel(team, namespace)).toMatchObject({ OTEL_EXPORTER_OTLP_PROTOCOL: "grpc", OTEL_TRACES_SAMPLER: "parentbased_traceidratio", OTEL_TRACES_SAMPLER_ARG: "0.1" });
    }
    expect(dataOf(secretNamed(dev, "tack-postgres")).TACK_DB).toMatch(/^postgres:\/\/tack:[^@]+@postgres\.tack\.svc\.cluster\.local:5432\/tack$/);
    expect(team.some((o) => o.kind === "StatefulSet" && o.metadata.name === "postgres")).toBe(false);
    expect(dataOf(secretNamed(team, "tack-postgres")).TACK_DB).toMatch(/^postgres:\/\//);
    // The sandbox agent is told exactly the pinned sandbox image.
    for (const objects of [dev, team]) {
      const agent = podSpec(find(objects, "DaemonSet", "sandbox"))!;
      const image = agent.initContainers!.find((c) => c.name === "sandbox-image")!.image!;
      expect(image).toMatch(/tack-sandbox:0\.1\.0$/);
      expect(agent.containers[0]!.env!.find((e) => e.name === "TACK_SANDBOX_IMAGE")!.value).toBe(image);
      expect((find(objects, "DaemonSet", "sandbox").spec as { template: { spec: { nodeSelector: unknown } } }).template.spec.nodeSelector).toEqual({ "tack.dev/sandbox": "true" });
    }
  });

  it("k8s - the operator configuration in the ConfigMap compiles, with three log replicas for the three NATS servers", () => {
    const map = dataOf(objectsOf("team").find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("tack-operator-config-"))!);
    const config = compileOperatorConfig(parse(map["config.yaml"]!), { stateDir: "/var/lib/tack", baseDir: "/etc/tack", source: "tack-operator-config" });
    expect(config.log.replicas).toBe(3);
    expect((find(objectsOf("team"), "StatefulSet", "nats").spec as { replicas: number }).replicas).toBe(3);
    expect(config.workspaces.dir).toBe("/var/lib/tack/workspaces");
  });

  it("k8s - the NATS users in base/nats/auth.conf are the permission table's (npx tsx deploy/k8s/render-nats-auth.ts rewrites it)", () => {
    const map = dataOf(objectsOf("dev").find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("nats-config-"))!);
    expect(map["auth.conf"]).toBe(renderNatsAuth("tack"));
    expect(map["auth.conf"]).not.toMatch(/replace-me|"password": "/);
  });
});

describe("deploy/k8s NATS configuration on a real nats-server", () => {
  const work = mkdtempSync(join(tmpdir(), "tack-k8s-nats-"));
  let url = "";
  let child: ReturnType<typeof spawn> | undefined;
  let passwords: Record<string, string> = {};
  const opened: Bus[] = [];

  beforeAll(async () => {
    const dev = buildOverlay("dev");
    const config = dataOf(dev.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("nats-config-"))!);
    passwords = { ...dataOf(secretNamed(dev, "tack-nats-users")), ...dataOf(secretNamed(dev, "tack-nats-sandbox")), ...dataOf(secretNamed(dev, "tack-nats-probe")) };
    const [port, monitor] = [await freePort(), await freePort()];
    // The manifests' nats.conf as it is, but on this machine: free ports, a temporary store, no cluster peers.
    const conf = config["nats.conf"]!
      .replace(/^port: 4222$/m, `port: ${port}\nhost: 127.0.0.1`).replace(/^http: 8222$/m, `http: 127.0.0.1:${monitor}`)
      .replace("/data/jetstream", join(work, "js")).replace("/tmp/nats.pid", join(work, "nats.pid"))
      .replace(/^cluster \{[\s\S]*?^\}$/m, "");
    expect(conf).toContain('include "auth.conf"');
    writeFileSync(join(work, "nats.conf"), conf);
    writeFileSync(join(work, "auth.conf"), config["auth.conf"]!);
    const env = { PATH: process.env.PATH, POD_NAME: "nats-0", ...passwords };
    const check = spawnSync("nats-server", ["-c", join(work, "nats.conf"), "-t"], { env, encoding: "utf8" });
    expect(check.status, check.stderr + check.stdout).toBe(0);
    child = spawn("nats-server", ["-c", join(work, "nats.conf")], { env, stdio: "ignore" });
    url = `nats://127.0.0.1:${port}`;
    for (let i = 0; ; i++) {
      const probe = await Bus.connect({ url, name: "k8s-wait", credentials: { user: "admin", password: passwords.TACK_BUS_ADMIN_PASSWORD! } }).catch((error: unknown) => error as Error);
      if (probe instanceof Bus) {
        await probe.close();
        break;
      }
      if (i > 100) throw probe;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }, 60_000);

  afterAll(async () => {
    for (const bus of opened) await bus.close().catch(() => undefined);
    child?.kill("SIGTERM");
    rmSync(work, { recursive: true, force: true });
  });

  const connectAs = async (user: string) => {
    const bus = await Bus.connect({ url, namespace: "tack", name: `k8s-${user}`, credentials: { user, password: passwords[`TACK_BUS_${user.toUpperCase()}_PASSWORD`]! } });
    opened.push(bus);
    return bus;
  };

  it("k8s - each service logs in with its Secret's password; a wrong one is refused naming the user", async () => {
    for (const user of ["gateway", "loop", "llm", "tools", "sandbox", "skills", "mcp", "probe"]) await connectAs(user);
    await expect(Bus.connect({ url, name: "k8s-wrong", credentials: { user: "loop", password: "not-it" } })).rejects.toMatchObject({ code: "bus.unauthorized", message: expect.stringContaining('user "loop"') });
  });

  it("k8s - the probe user finds this host's instance of a service; another host's or a missing one fails with one line", async () => {
    const env = { NATS_URL: url, TACK_NAMESPACE: "tack", TACK_PROBE_PASSWORD: passwords.TACK_BUS_PROBE_PASSWORD };
    expect(await probeService("tools", { env, waitMs: 500 })).toEqual({ ok: false, message: expect.stringMatching(/^no tools instance on .* answered \$SRV\.PING\.tack-tools in namespace tack; the service is not running/) });
    const tools = await connectAs("tools");
    await registerMicro(tools, { service: "tools", description: "k8s probe test" });
    expect(await probeService("tools", { env })).toEqual({ ok: true, message: expect.stringContaining(`tools on ${hostname()} answers $SRV.PING`) });
    expect(await probeService("tools", { env, host: "tools-7d9f-other" })).toMatchObject({ ok: false, message: expect.stringContaining(`(instances on ${hostname()} did)`) });
    // A service's own user may not ping (decision 0007): that is why the pods get the probe user.
    const own = await probeService("tools", { env: { NATS_URL: url, TACK_NAMESPACE: "tack", TACK_NATS_USER: "tools", TACK_NATS_PASSWORD: passwords.TACK_BUS_TOOLS_PASSWORD }, waitMs: 500 });
    expect(own.ok).toBe(false);
    // A wrong probe password: the probe fails and says NATS refused it.
    expect(await probeService("tools", { env: { ...env, TACK_PROBE_PASSWORD: "nope" } })).toMatchObject({ ok: false, message: expect.stringContaining('refused user "probe"') });
  });

  it("k8s - `<service main> --probe` (the exec probe) exits 0 when its instance answers and 1 when none does", async () => {
    const skills = await connectAs("skills");
    await registerMicro(skills, { service: "skills", description: "k8s probe test" });
    const run = (service: string) => new Promise<{ code: number | null; out: string }>((resolve) => {
      const proc = spawn(process.execPath, ["--import", "tsx", `services/${service}/src/main.ts`, "--probe"], {
        env: { PATH: process.env.PATH, HOME: process.env.HOME, NATS_URL: url, TACK_NAMESPACE: "tack", TACK_NATS_USER: service, TACK_NATS_PASSWORD: passwords[`TACK_BUS_${service.toUpperCase()}_PASSWORD`], TACK_PROBE_PASSWORD: passwords.TACK_BUS_PROBE_PASSWORD },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      proc.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
      proc.on("exit", (code) => resolve({ code, out }));
    });
    const [up, down] = await Promise.all([run("skills"), run("mcp")]);
    expect(up).toEqual({ code: 0, out: expect.stringMatching(/^skills on .* answers \$SRV\.PING in namespace tack/) });
    expect(down).toEqual({ code: 1, out: expect.stringMatching(/^no mcp instance on .* answered/) });
  }, 60_000);
});
