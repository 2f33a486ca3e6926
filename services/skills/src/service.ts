import { Bus, registerMicro, serviceNamespace, type BusAuth } from "@tack/bus";
import { InvalidateSkillsRequest, InvalidateSkillsResponse, LoadSkillRequest, LoadSkillResponse, SkillCatalogRequest, SkillCatalogResponse } from "@tack/proto";
import { Skills, type Invoker, type SkillsOptions } from "./skills.js";

/** How to start a skills service. */
export interface SkillsServiceOptions extends Omit<SkillsOptions, "onChange"> {
  /** NATS server URL, e.g. `nats://127.0.0.1:4222`. */
  natsUrl: string;
  /** NATS user and TLS files (`commonConfig().natsAuth`); none for an open NATS. */
  natsAuth?: BusAuth;
  /** Subject namespace (default `tack`); tests use a unique one. */
  namespace?: string;
}

/** A running skills service. */
export interface SkillsService {
  /** The registry it serves from: `addRoot` registers skills at run time. */
  readonly skills: Skills;
  /** Stops serving and watching and closes the connection. */
  stop(): Promise<void>;
}

/** Queue group shared by all replicas, so each request is handled once. */
const QUEUE = "skills";

/**
 * Connects to the bus and serves `skills.catalog`, `skills.load` and `skills.invalidate` in queue
 * group `skills`. It reads the workspaces from the host's filesystem, so it runs where they live
 * (next to the sandbox service).
 */
export async function startSkillsService(options: SkillsServiceOptions): Promise<SkillsService> {
  const namespace = serviceNamespace("skills", options);
  const skills = new Skills(options);
  let bus: Bus;
  try {
    bus = await Bus.connect({ url: options.natsUrl, namespace, name: "tack-skills", ...options.natsAuth });
  } catch (error) {
    skills.close();
    throw error;
  }
  const subscriptions = [
    bus.serve(bus.names.skillsCatalog, QUEUE, SkillCatalogRequest, SkillCatalogResponse, (request) => skills.catalog(request.workspace)),
    bus.serve(bus.names.skillsLoad, QUEUE, LoadSkillRequest, LoadSkillResponse, (request) => skills.load(request.workspace, request.name, request.by as Invoker)),
    bus.serve(bus.names.skillsInvalidate, QUEUE, InvalidateSkillsRequest, InvalidateSkillsResponse, async (request) => ({
      recomputed: await skills.invalidate(request.path, request.workspace || undefined),
    })),
  ];
  // Discoverable as micro-service tack-skills ($SRV.PING/INFO/STATS) once it serves.
  await registerMicro(bus, { service: "skills", description: "skill discovery, catalog and bodies, read from the workspaces and skill roots" });

  return {
    skills,
    async stop() {
      for (const subscription of subscriptions) subscription.unsubscribe();
      skills.close();
      await bus.close();
    },
  };
}
