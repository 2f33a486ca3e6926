// Regular expressions that are not ours (a model's, a repository's, an MCP server's) on a linear-time engine.
export { LinearRegExp, LinearRegExpError, PatternError, unsupportedConstruct, zodOfJsonSchema } from "./linear-regex.js";
