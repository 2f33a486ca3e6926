// The skill file format (SKILL.md): front matter checked, body kept; shared by the skills service and `tack skill install`.
export {
  capDescription, DESCRIPTION_CAP, MAX_FRONT_MATTER_CHARS, MAX_FRONT_MATTER_DEPTH, parseSkill, SkillProblem, validName, type ParsedSkill,
} from "./parse.js";
