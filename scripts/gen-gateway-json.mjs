// Generates the gateway's REST encoders from proto/tack/gateway/v1/gateway.proto: one function per
// message, writing the generated ts-proto message in the REST JSON form (snake_case names, in the
// order the proto declares the fields), a straight function per message (no reflection per request). What
// a field writes when it has no value comes from its annotations (read here, not shown in docs):
//   - a `proto3 optional` scalar or a message field is left out when absent, unless `@nullable`;
//   - `@nullable`: written as `null` when absent (a repeated field: when empty);
//   - `@omitEmpty`: left out when it holds its type's default ("", 0, false, []);
//   - `@when FIELD [VALUE]`: written only when the sibling FIELD equals VALUE (or, without one,
//     has a value);
//   - `@nullWhen FIELD`: written as `null` when the sibling bool FIELD is true;
//   - `@json`: a string holding JSON text, written as the JSON value itself;
//   - `@in none`: not in the REST form (gRPC only).
// Called by scripts/gen.mjs; run alone, `node scripts/gen-gateway-json.mjs` prints the module.
import { fileURLToPath } from "node:url";
import { commentsOf, parseComment, protoImage } from "./gen-gateway.mjs";

const FILE = "tack/gateway/v1/gateway.proto";
const PACKAGE = "tack.gateway.v1";

/** ts-proto's property name of a proto field. */
const camel = (name) => name.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
/** The encoder function's name of a message. */
const encoderName = (message) => `rest${message}`;

/** The expression that writes one value `v` of `field` (not repeated). */
function valueExpression(field, v, json) {
  if (json) return `JSON.parse(${v}) as unknown`;
  if (field.type === "TYPE_BYTES") return `Buffer.from(${v}).toString("base64")`;
  if (field.type !== "TYPE_MESSAGE") return v;
  const name = field.typeName.replace(/^\./, "");
  if (name === "tack.log.v1.Event") return `Event.toJSON(${v})`;
  if (!name.startsWith(`${PACKAGE}.`)) throw new Error(`${FILE}: field ${field.name}: no REST encoder for ${name}`);
  return `${encoderName(name.slice(PACKAGE.length + 1))}(${v})`;
}

/** The TypeScript of one message's encoder. */
function encoder(message, index, comments) {
  const always = [];
  const later = [];
  for (const [fi, field] of (message.field ?? []).entries()) {
    const { notes } = parseComment(comments.get(`4.${index}.2.${fi}`));
    const has = (key) => notes.some((n) => n.key === key);
    if (notes.some((n) => n.key === "in" && n.value === "none")) continue;
    const key = field.name;
    const m = `m.${camel(field.name)}`;
    const repeated = field.label === "LABEL_REPEATED";
    const json = has("json");
    let value = repeated
      ? (field.type === "TYPE_MESSAGE" || field.type === "TYPE_BYTES" ? `${m}.map((v) => ${valueExpression(field, "v", json)})` : m)
      : valueExpression(field, m, json);
    const absentCheck = repeated ? `${m}.length === 0` : `${m} === undefined`;
    const mayBeAbsent = repeated || field.proto3Optional === true || field.type === "TYPE_MESSAGE";
    let condition;
    const nullWhen = notes.find((n) => n.key === "nullWhen")?.value;
    if (nullWhen !== undefined) {
      const found = (message.field ?? []).find((f) => f.name === nullWhen);
      if (found?.type !== "TYPE_BOOL") throw new Error(`${FILE}: ${message.name}.${key}: @nullWhen names no bool field ${nullWhen}`);
      value = `m.${camel(nullWhen)} ? null : ${value}`;
    } else if (has("nullable")) {
      if (!mayBeAbsent) throw new Error(`${FILE}: ${message.name}.${key}: @nullable needs an optional, message or repeated field`);
      value = `${absentCheck} ? null : ${value}`;
    } else if (has("omitEmpty")) {
      condition = repeated ? `${m}.length > 0` : field.type === "TYPE_BOOL" ? m : field.type === "TYPE_MESSAGE" ? `${m} !== undefined` : `${m} !== ${field.type === "TYPE_STRING" ? '""' : "0"}`;
    } else if (mayBeAbsent && !repeated) condition = `${m} !== undefined`;
    for (const when of notes.filter((n) => n.key === "when")) {
      const [sibling, expected] = when.value.split(/\s+/);
      const found = (message.field ?? []).find((f) => f.name === sibling);
      if (!found) throw new Error(`${FILE}: ${message.name}.${key}: @when names no field ${sibling}`);
      const s = `m.${camel(sibling)}`;
      const test = expected !== undefined ? `${s} === ${JSON.stringify(expected)}` : found.label === "LABEL_REPEATED" ? `${s}.length > 0` : `${s} !== undefined`;
      condition = condition ? `${test} && ${condition}` : test;
    }
    // In the proto's order: the leading fields always written in the object literal, the rest assigned after.
    if (condition) later.push(`  if (${condition}) o.${key} = ${value};`);
    else if (later.length) later.push(`  o.${key} = ${value};`);
    else always.push(`${key}: ${value}`);
  }
  const { doc } = parseComment(comments.get(`4.${index}`));
  const type = `gatewayV1.${message.name}`;
  const lines = [`/** The REST form of \`${PACKAGE}.${message.name}\`${doc ? ` (${doc.replace(/\*\//g, "* /")})` : ""}. */`];
  lines.push(`export function ${encoderName(message.name)}(m: ${type}): RestJson {`);
  if (later.length === 0) lines.push(`  return { ${always.join(", ")} };`);
  else lines.push(`  const o: RestJson = ${always.length ? `{ ${always.join(", ")} }` : "{}"};`, ...later, "  return o;");
  lines.push("}");
  return lines.join("\n");
}

/** The TypeScript module written to services/gateway/src/gen/rest-json.ts. */
export function restJsonModule(image) {
  const file = image.file.find((f) => f.name === FILE);
  if (!file) throw new Error(`${FILE} is missing from the proto image`);
  const comments = commentsOf(file);
  const service = file.service.find((s) => s.name === "Gateway");
  const responses = new Set(service.method.map((m) => m.outputType.slice(PACKAGE.length + 2)));
  const messages = file.messageType.filter((m) => !m.name.endsWith("Request"));
  const used = JSON.stringify(messages.map((m) => m.field ?? [])).includes(".tack.log.v1.Event");
  const table = messages.filter((m) => responses.has(m.name)).map((m) => `  ${m.name}: ${encoderName(m.name)},`);
  return `// Code generated by scripts/gen-gateway-json.mjs from proto/${FILE}. DO NOT EDIT; run \`make gen\`.
${used ? 'import { Event, gatewayV1 } from "@tack/proto";' : 'import { gatewayV1 } from "@tack/proto";'}

/** A message in its REST JSON form. */
export type RestJson = { [key: string]: unknown };

${messages.map((m) => encoder(m, file.messageType.indexOf(m), comments)).join("\n\n")}

/** The REST encoder of every unary response message, by message name (an operation's \`responseType\`). */
export const REST_ENCODERS = {
${table.join("\n")}
} as const;
`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.stdout.write(restJsonModule(protoImage()));
