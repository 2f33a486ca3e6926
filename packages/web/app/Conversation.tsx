import { memo } from "react";
import type { Item, ToolCallView } from "./model.js";
import { ms } from "./model.js";

/** The conversation: user and assistant messages, tool calls with their results (expandable), injected context with its source, notices. */
export function Conversation(props: { items: Item[]; running: boolean }) {
  return (
    <ol className="conversation" aria-label="conversation">
      {props.items.map((item) => <Entry key={`${item.kind}-${item.seq}`} item={item} />)}
      {props.running && <li className="working muted">working…</li>}
    </ol>
  );
}

const Entry = memo(function Entry({ item }: { item: Item }) {
  switch (item.kind) {
    case "user":
      return <li className="msg user" data-seq={item.seq}><div className="who">you</div><div className="text">{item.text}</div></li>;
    case "assistant":
      return (
        <li className={`msg assistant${item.streaming ? " streaming" : ""}`} data-seq={item.seq}>
          <div className="who">assistant <span className="muted">turn {item.turn} · step {item.step}</span></div>
          {item.reasoning && <details className="reasoning"><summary>reasoning</summary><div className="text">{item.reasoning}</div></details>}
          {item.content && <div className="text">{item.content}</div>}
          {item.calls.map((c) => <ToolCall key={c.callId} call={c} />)}
        </li>
      );
    case "context":
      return (
        <li className="context" data-seq={item.seq}>
          <details>
            <summary>{item.what} {item.sources.map((s) => <span key={s} className="source">{s}</span>)}</summary>
            <pre>{item.text}</pre>
          </details>
        </li>
      );
    case "notice":
      return <li className={`notice ${item.tone}`} data-seq={item.seq}>{item.text}</li>;
  }
});

function ToolCall({ call }: { call: ToolCallView }) {
  const r = call.result;
  const status = r === undefined ? "running" : r.isError ? "error" : "ok";
  return (
    <details className={`tool ${status}`} data-call={call.callId}>
      <summary><code>{call.name}</code> <span className="args">{summarize(call.arguments)}</span> <span className={`status ${status}`}>{r === undefined ? "running…" : `${r.isError ? "error" : "ok"} · ${ms(r.durationMs)}`}</span></summary>
      <div className="tool-body">
        <div className="label">arguments</div>
        <pre>{pretty(call.arguments)}</pre>
        {call.inner.map((i) => <div key={i.index} className="inner"><code>{i.name}</code> {summarize(i.arguments)}<pre>{i.content}</pre></div>)}
        {r && <><div className="label">result{r.synthesized ? " (written by recovery)" : ""}</div><pre className="result">{r.content}</pre></>}
      </div>
    </details>
  );
}

function summarize(args: string): string {
  try {
    const parsed = JSON.parse(args) as Record<string, unknown>;
    const first = parsed.command ?? parsed.path ?? parsed.file_path ?? parsed.pattern ?? parsed.url ?? parsed.query;
    if (typeof first === "string") return first.length > 120 ? `${first.slice(0, 117)}…` : first;
  } catch {
    // not JSON: show the text
  }
  return args.length > 120 ? `${args.slice(0, 117)}…` : args;
}

function pretty(args: string): string {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}
