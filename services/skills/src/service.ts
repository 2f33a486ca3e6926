import { Bus, type BusAuth, endpoint, serviceNamespace, SkillsRpc, startService, type ServiceHandle } from "@tack/bus";
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

/**
 * Connects to the bus and serves the rpcs of `tack.skills.v1.Skills` (`SkillsRpc`: catalog, load,
 * invalidate) in queue group `skills`. It reads the workspaces from the host's filesystem, so it runs where they live
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
  let service: ServiceHandle;
  try {
    service = await startService({
      bus, name: "skills", description: "skill discovery, catalog and bodies, read from the workspaces and skill roots",
      endpoints: () => [
        endpoint(SkillsRpc.Catalog, (request) => skills.catalog(request.workspace)),
        endpoint(SkillsRpc.LoadSkill, (request) => skills.load(request.workspace, request.name, request.by as Invoker)),
        endpoint(SkillsRpc.Invalidate, async (request) => ({
          recomputed: await skills.invalidate(request.path, request.workspace || undefined),
        })),
      ],
    });
  } catch (error) {
    skills.close();
    await bus.close();
    throw error;
  }

  return {
    skills,
    async stop() {
      await service.stop();
      skills.close();
      await bus.close();
    },
  };
}
