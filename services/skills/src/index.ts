// The skills service: skill discovery, the catalog and skill bodies over the bus.
export { startSkillsService, type SkillsService, type SkillsServiceOptions } from "./service.js";
export { catalogDigest, operatorRootsFromEnv, Skills, type Catalog, type CatalogEntry, type Invoker, type LoadedSkill, type SkillSource, type SkillsOptions } from "./skills.js";
