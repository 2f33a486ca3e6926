import { TackError } from "@tack/bus";
import { Role, type CompleteRequest, type Delta } from "@tack/proto";
import { expect } from "vitest";
import type { Completion, ProviderEntry } from "../src/provider.js";

/** A request with every kind of message: a finished tool round, a plain answer, a new question. */
export const conversation: CompleteRequest = {
  sessionId: "s1",
  model: "deepseek:deepseek-chat",
  systemPrompt: "You are Tack.",
  tools: [{
    name: "read_file",
    description: "Read a file.",
    parametersJson: '{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}',
    // Harness-only fields: the providers must leave them out of what the model is sent.
    deniable: ["writes"], operationArgument: "path", handler: "", approval: "", hookAliases: ["Read"], pathIsFile: true, writesPath: false, sessionOperation: "",
  }],
  messages: [
    { role: Role.ROLE_USER, content: "What is in README.md?", reasoningContent: "", toolCalls: [], toolCallId: "", images: [] },
    {
      role: Role.ROLE_ASSISTANT,
      content: "",
      reasoningContent: "I should read it.",
      toolCalls: [{ id: "call_00_abc", name: "read_file", arguments: '{"path":"README.md"}' }],
      toolCallId: "",
      images: [],
    },
    { role: Role.ROLE_TOOL, content: "# Tack", reasoningContent: "", toolCalls: [], toolCallId: "call_00_abc", images: [] },
    { role: Role.ROLE_ASSISTANT, content: "It is a harness.", reasoningContent: "Summarize.", toolCalls: [], toolCallId: "", images: [] },
    { role: Role.ROLE_USER, content: "Add two and three.", reasoningContent: "", toolCalls: [], toolCallId: "", images: [] },
  ],
  temperature: 0.2,
  maxTokens: 4096,
};

/** Runs one completion of `model` on `entry`, collecting the deltas and the result or the TackError. */
export async function runProvider(
  entry: ProviderEntry,
  model: string,
  request: CompleteRequest = conversation,
  signal = new AbortController().signal,
): Promise<{ deltas: Delta[]; result?: Completion; error?: TackError }> {
  const provider = entry.create(model);
  if (!provider) throw new Error(`${entry.form} does not bind ${model}`);
  const deltas: Delta[] = [];
  try {
    return { deltas, result: await provider.complete(request, (delta) => deltas.push(delta), signal) };
  } catch (error) {
    expect(error).toBeInstanceOf(TackError);
    return { deltas, error: error as TackError };
  }
}
