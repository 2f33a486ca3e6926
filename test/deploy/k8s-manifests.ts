// Helpers of test/deploy/k8s.test.ts: build an overlay of deploy/k8s with the machine's
// `kubectl kustomize`, validate every object against the Kubernetes schemas of the pinned
// kubernetes-models package, and check Tack's deployment rules (`policyViolations`).
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { mayReceive } from "../../packages/cli/src/service-env.js";
import { SERVICES, type ServiceName } from "../../packages/cli/src/services.js";

/** deploy/k8s of this checkout. */
export const K8S_DIR = fileURLToPath(new URL("../../deploy/k8s", import.meta.url));

/** Every overlay `make test` builds. */
export const OVERLAYS = ["dev", "team"] as const;

/** One Kubernetes object as kustomize printed it. */
export type K8sObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
};

/** `kubectl kustomize deploy/k8s/overlays/<overlay>`, parsed; throws with kustomize's message. */
export function buildOverlay(overlay: string): K8sObject[] {
  const text = execFileSync("kubectl", ["kustomize", `${K8S_DIR}/overlays/${overlay}`], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  return parseAllDocuments(text).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`overlay ${overlay}: ${doc.errors[0]!.message}`);
    return doc.toJS() as K8sObject;
  });
}

/** "<kind>/<namespace>/<name>", how violations name an object. */
export const objectName = (o: K8sObject) => `${o.kind}/${o.metadata.namespace ?? "-"}/${o.metadata.name}`;

/**
 * Validates `object` against the JSON schema of its apiVersion and kind in kubernetes-models
 * (the version package-lock.json pins). Returns the schema's complaint, or undefined when valid.
 * An apiVersion/kind the package does not know is a complaint too.
 */
export async function schemaError(object: K8sObject): Promise<string | undefined> {
  const [group, version] = object.apiVersion.includes("/") ? object.apiVersion.split("/") : ["", object.apiVersion];
  const path = group ? `kubernetes-models/${group}/${version}/${object.kind}` : `kubernetes-models/${version}/${object.kind}`;
  let Model: new (data: unknown) => { validate(): void };
  try {
    Model = ((await import(path)) as Record<string, new (data: unknown) => { validate(): void }>)[object.kind]!;
  } catch {
    return `${objectName(object)}: no schema for ${object.apiVersion} ${object.kind} in kubernetes-models`;
  }
  // kustomize folds long base64 values over lines; the API server's decoder skips the line breaks, the schema's format check does not.
  const data = object.kind === "Secret" ? { data: Object.fromEntries(Object.entries((object as { data?: Record<string, string> }).data ?? {}).map(([k, v]) => [k, v.replace(/\s/g, "")])) } : {};
  try {
    new Model({ ...object, ...data }).validate();
    return undefined;
  } catch (error) {
    return `${objectName(object)}: ${(error as Error).message}`;
  }
}

type Container = {
  name: string;
  image?: string;
  env?: Array<{ name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string; optional?: boolean }; configMapKeyRef?: { name: string; key: string; optional?: boolean } } }>;
  envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }>;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  readinessProbe?: unknown;
  livenessProbe?: unknown;
  securityContext?: SecurityContext;
};
type SecurityContext = {
  runAsNonRoot?: boolean;
  runAsUser?: number;
  privileged?: boolean;
  allowPrivilegeEscalation?: boolean;
  capabilities?: { drop?: string[]; add?: string[] };
  seccompProfile?: { type?: string };
};
type PodSpec = {
  containers: Container[];
  initContainers?: Container[];
  securityContext?: SecurityContext;
  hostNetwork?: boolean;
  hostPID?: boolean;
  hostIPC?: boolean;
  volumes?: Array<{ name: string; hostPath?: unknown }>;
};

const WORKLOADS = new Set(["Deployment", "StatefulSet", "DaemonSet"]);

/** The pod template of a workload object, else undefined. */
export function podSpec(object: K8sObject): PodSpec | undefined {
  if (!WORKLOADS.has(object.kind)) return undefined;
  return (object.spec as { template: { spec: PodSpec } }).template.spec;
}

/** Secrets every service Pod holds besides its service's own: its NATS password, and the probe user's for the exec probes. */
const POD_SECRETS = new Set(["TACK_NATS_PASSWORD", "TACK_PROBE_PASSWORD"]);

/** Variables every Tack service container must get (directly or through envFrom). */
export const REQUIRED_SERVICE_ENV = [
  "NATS_URL", "TACK_NAMESPACE", "TACK_NATS_USER", "TACK_NATS_PASSWORD", "TACK_PROBE_PASSWORD", "TACK_CONFIG",
  "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_SAMPLER",
] as const;

/**
 * Tack's rules for a built overlay, each broken rule one line naming the object and what to
 * change. Empty when everything holds:
 * - every image has a version (a tag other than `latest`, or a digest);
 * - every container has CPU and memory requests and limits, every long-running one readiness and liveness probes;
 * - namespaces declare their Pod Security level; in a `restricted` one every pod and container
 *   conforms (runAsNonRoot, no root uid, allowPrivilegeEscalation false, capabilities drop ALL,
 *   seccompProfile RuntimeDefault, no privileged, host namespaces or hostPath); only the sandbox
 *   agent lives in a `privileged` one;
 * - every Tack service container gets NATS_URL, TACK_NAMESPACE, its own NATS user and password,
 *   the probe's password, TACK_CONFIG and the OTEL_* variables, and each Secret and ConfigMap it names exists with the key;
 * - least secret: a Tack service container takes Secrets key by key (never a whole Secret through
 *   envFrom), and only variables its service may receive (SERVICE_ENV of packages/cli/src/services.ts,
 *   the one allowlist `tack up` uses too) besides its NATS password and the probe's;
 * - tools and loop have an HPA; RuntimeClass gvisor uses runsc; each namespace denies by default.
 */
export function policyViolations(objects: readonly K8sObject[]): string[] {
  const out: string[] = [];
  const find = (kind: string, namespace: string | undefined, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name && (o.metadata.namespace ?? undefined) === namespace);
  const namespaces = new Map(objects.filter((o) => o.kind === "Namespace").map((o) => [o.metadata.name, o.metadata.labels?.["pod-security.kubernetes.io/enforce"]]));
  for (const [name, level] of namespaces) {
    if (!level) out.push(`Namespace ${name}: no pod-security.kubernetes.io/enforce label; give it restricted (or privileged for the sandbox agents only)`);
  }
  if (namespaces.get("tack") !== "restricted") out.push("Namespace tack: pod-security.kubernetes.io/enforce must be restricted");

  for (const object of objects) {
    const spec = podSpec(object);
    if (!spec) continue;
    const where = objectName(object);
    const namespace = object.metadata.namespace ?? "";
    const level = namespaces.get(namespace);
    if (level === undefined) out.push(`${where}: its namespace ${namespace || "(none)"} is not part of the overlay; create it with a Pod Security label`);
    const restricted = level === "restricted";
    if (level === "privileged" && !(object.kind === "DaemonSet" && object.metadata.name === "sandbox")) {
      out.push(`${where}: only the sandbox agent may run in the privileged namespace ${namespace}; move it to a restricted one`);
    }
    const podSecurity = spec.securityContext ?? {};
    if (restricted) {
      if (spec.hostNetwork || spec.hostPID || spec.hostIPC) out.push(`${where}: uses the host's network, PID or IPC namespace, which restricted forbids`);
      for (const volume of spec.volumes ?? []) if (volume.hostPath) out.push(`${where}: volume ${volume.name} is a hostPath, which restricted forbids`);
    }
    const containers = [...spec.containers.map((c) => ({ c, init: false })), ...(spec.initContainers ?? []).map((c) => ({ c, init: true }))];
    for (const { c, init } of containers) {
      const at = `${where} container ${c.name}`;
      if (!c.image) out.push(`${at}: no image`);
      else if (!c.image.includes("@")) {
        const tag = /:([^/:]+)$/.exec(c.image)?.[1];
        if (!tag) out.push(`${at}: image ${c.image} has no tag; pin a version with the overlay's images:`);
        else if (tag === "latest") out.push(`${at}: image ${c.image} is tagged latest; pin a version with the overlay's images:`);
      }
      for (const kind of ["requests", "limits"] as const) {
        for (const resource of ["cpu", "memory"]) {
          if (!c.resources?.[kind]?.[resource]) out.push(`${at}: no ${resource} ${kind === "requests" ? "request" : "limit"} under resources.${kind}`);
        }
      }
      if (!init) {
        if (!c.readinessProbe) out.push(`${at}: no readinessProbe`);
        if (!c.livenessProbe) out.push(`${at}: no livenessProbe`);
      }
      const privilegedAgent = object.kind === "DaemonSet" && object.metadata.name === "sandbox" && c.name === "sandbox" && level === "privileged";
      if (!privilegedAgent) out.push(...restrictedViolations(at, podSecurity, c.securityContext ?? {}));
      if (c.image?.includes("tack-services") && !init) out.push(...serviceEnvViolations(at, object, c, find));
    }
  }

  for (const name of ["tools", "loop"]) {
    const hpa = objects.find((o) => o.kind === "HorizontalPodAutoscaler" && (o.spec as { scaleTargetRef?: { name?: string } }).scaleTargetRef?.name === name);
    if (!hpa) out.push(`Deployment ${name}: no HorizontalPodAutoscaler scales it`);
    else if (!find("Deployment", hpa.metadata.namespace, name)) out.push(`${objectName(hpa)}: scales Deployment ${name}, which does not exist`);
  }
  const gvisor = find("RuntimeClass", undefined, "gvisor");
  if ((gvisor as { handler?: string } | undefined)?.handler !== "runsc") out.push("RuntimeClass gvisor: missing or its handler is not runsc");
  for (const namespace of namespaces.keys()) {
    const denies = objects.some((o) => o.kind === "NetworkPolicy" && o.metadata.namespace === namespace
      && Object.keys((o.spec as { podSelector?: object }).podSelector ?? {}).length === 0
      && !(o.spec as { ingress?: unknown }).ingress && !(o.spec as { egress?: unknown }).egress
      && ((o.spec as { policyTypes?: string[] }).policyTypes ?? []).join(",") === "Ingress,Egress");
    if (!denies) out.push(`Namespace ${namespace}: no default-deny NetworkPolicy (empty podSelector, policyTypes Ingress and Egress, no rules)`);
  }
  return out;
}

/** The Pod Security `restricted` rules for one container under its pod's securityContext. */
function restrictedViolations(at: string, pod: SecurityContext, container: SecurityContext): string[] {
  const out: string[] = [];
  const runAsNonRoot = container.runAsNonRoot ?? pod.runAsNonRoot;
  if (runAsNonRoot !== true) out.push(`${at}: runAsNonRoot is not true (pod or container securityContext)`);
  const uid = container.runAsUser ?? pod.runAsUser;
  if (uid === 0) out.push(`${at}: runAsUser is 0`);
  if (container.privileged) out.push(`${at}: privileged`);
  if (container.allowPrivilegeEscalation !== false) out.push(`${at}: allowPrivilegeEscalation is not false`);
  if (!(container.capabilities?.drop ?? []).includes("ALL")) out.push(`${at}: capabilities.drop does not list ALL`);
  for (const added of container.capabilities?.add ?? []) if (added !== "NET_BIND_SERVICE") out.push(`${at}: adds capability ${added}`);
  const seccomp = container.seccompProfile?.type ?? pod.seccompProfile?.type;
  if (seccomp !== "RuntimeDefault" && seccomp !== "Localhost") out.push(`${at}: seccompProfile is not RuntimeDefault`);
  return out;
}

/** NATS, probe and OTEL settings of one Tack service container, resolved through the ConfigMaps and Secrets it names. */
function serviceEnvViolations(at: string, object: K8sObject, c: Container, find: (kind: string, namespace: string | undefined, name: string) => K8sObject | undefined): string[] {
  const out: string[] = [];
  const namespace = object.metadata.namespace;
  const values = new Map<string, string>();
  const dataOf = (kind: "ConfigMap" | "Secret", name: string): Record<string, string> | undefined => {
    const source = find(kind, namespace, name);
    if (!source) {
      out.push(`${at}: names ${kind} ${name}, which is not in namespace ${namespace}`);
      return undefined;
    }
    const data = (source as { data?: Record<string, string> }).data ?? {};
    return kind === "Secret" ? Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v, "base64").toString()])) : data;
  };
  const service = /dist\/services\/([a-z]+)\/main\.js/.exec(((c as { command?: string[] }).command ?? []).join(" "))?.[1];
  const known = service !== undefined && (SERVICES as readonly string[]).includes(service);
  for (const from of c.envFrom ?? []) {
    if (from.secretRef) out.push(`${at}: takes the whole Secret ${from.secretRef.name} through envFrom; name each key its service uses with secretKeyRef (optional: true when it may be absent)`);
    const data = from.configMapRef ? dataOf("ConfigMap", from.configMapRef.name) : from.secretRef ? dataOf("Secret", from.secretRef.name) : undefined;
    for (const [key, value] of Object.entries(data ?? {})) values.set(key, value);
  }
  for (const variable of c.env ?? []) {
    const ref = variable.valueFrom?.secretKeyRef ?? variable.valueFrom?.configMapKeyRef;
    if (ref) {
      const data = dataOf(variable.valueFrom?.secretKeyRef ? "Secret" : "ConfigMap", ref.name);
      if (data && !(ref.key in data) && !ref.optional) out.push(`${at}: ${variable.name} names key ${ref.key} of ${ref.name}, which has no such key`);
      values.set(variable.name, data?.[ref.key] ?? "");
      if (variable.valueFrom?.secretKeyRef && known && !POD_SECRETS.has(variable.name) && !mayReceive(service as ServiceName, variable.name)) {
        out.push(`${at}: gets secret ${variable.name} from ${ref.name}, which the ${service} service does not use; remove it (SERVICE_ENV in packages/cli/src/services.ts lists what each service uses)`);
      }
    } else if (variable.valueFrom) values.set(variable.name, "(from the pod)");
    else values.set(variable.name, variable.value ?? "");
  }
  for (const name of REQUIRED_SERVICE_ENV) {
    if (!values.get(name)) out.push(`${at}: ${name} is not set (env or envFrom)`);
  }
  if (!service) out.push(`${at}: command does not start dist/services/<service>/main.js`);
  else if (values.get("TACK_NATS_USER") && values.get("TACK_NATS_USER") !== service) {
    out.push(`${at}: runs ${service} as NATS user ${values.get("TACK_NATS_USER")}; each service connects as its own user (decision 0007)`);
  }
  const url = values.get("NATS_URL");
  if (url && !/^(nats|tls):\/\//.test(url)) out.push(`${at}: NATS_URL ${url} is not a nats:// or tls:// URL`);
  return out;
}
