import { useEffect, useMemo, useRef, useState } from "react";
import type { ContextSize, EventJson, SessionDetail, StreamState, TackClient, TenantUsage } from "@tack/client";
import { Conversation } from "./Conversation.js";
import { foldSession } from "./model.js";
import { Timeline } from "./Timeline.js";
import { WaitingCards } from "./Waiting.js";

/**
 * One session: its history first (one request to the current end of the log), then live events
 * over SSE from the next seq (resumed after drops by the client). Events arriving together are
 * applied in one render.
 */
export function SessionPage(props: { id: string; client: TackClient; onChanged: () => void; onPainted?: () => void }) {
  const { id, client } = props;
  const [events, setEvents] = useState<EventJson[]>([]);
  const [detail, setDetail] = useState<SessionDetail | undefined>();
  const [live, setLive] = useState<StreamState["state"]>("connecting");
  const [error, setError] = useState("");
  const [tab, setTab] = useState<"conversation" | "timeline">("conversation");
  const [context, setContext] = useState<ContextSize | undefined>();
  const [tenant, setTenant] = useState<TenantUsage | undefined>();
  const painted = useRef(false);

  useEffect(() => {
    const stop = new AbortController();
    let pending: EventJson[] = [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    const flush = () => {
      timer = undefined;
      const batch = pending;
      pending = [];
      if (batch.length) setEvents((prev) => prev.concat(batch));
    };
    void (async () => {
      try {
        // The history alone first: nothing else competes with it for the gateway before the first paint.
        const history = await client.listEvents(id, { signal: stop.signal });
        setEvents(history);
        client.getSession(id).then(setDetail, () => undefined);
        for await (const e of client.events(id, { from: (history.at(-1)?.seq ?? 0) + 1, signal: stop.signal, onState: (s) => setLive(s.state) })) {
          pending.push(e);
          timer ??= setTimeout(flush, 30);
        }
      } catch (e) {
        if (!stop.signal.aborted) setError((e as Error).message);
      }
    })();
    return () => {
      stop.abort();
      if (timer) clearTimeout(timer);
    };
  }, [id, client]);

  const view = useMemo(() => foldSession(events), [events]);

  // The first paint of the conversation, for the bench (ui_first_paint_ms): two frames after the history rendered.
  useEffect(() => {
    if (painted.current || events.length === 0) return;
    painted.current = true;
    const n = events.length;
    requestAnimationFrame(() => requestAnimationFrame(() => {
      performance.mark("tack:conversation-painted", { detail: { events: n } });
      props.onPainted?.();
    }));
  }, [events]);

  // The context and tenant meters: at load and whenever a turn ends (or a mode changes the prompt).
  const turnsEnded = view.turns.filter((t) => t.endMs !== undefined).length;
  const lastEnded = view.turns.filter((t) => t.endMs !== undefined).at(-1)?.turn;
  const loaded = events.length > 0;
  useEffect(() => {
    if (!loaded) return;
    client.context(id).then(setContext, () => undefined);
    client.usage().then(setTenant, () => undefined);
  }, [client, id, turnsEnded, loaded]);

  const act = async (what: () => Promise<unknown>) => {
    setError("");
    try {
      await what();
    } catch (e) {
      setError((e as Error).message);
    }
  };

  return (
    <div className="session">
      <header className="session-header">
        <div>
          <h2>{detail?.title || id}</h2>
          <p className="muted">
            <code>{id}</code> · {detail?.model} · mode {view.mode || detail?.mode} · sandbox {view.sandboxMode || detail?.sandbox_mode}
            {view.planMode ? " · plan mode" : ""} · <span className={`live ${live}`} data-testid="live">{live === "open" ? "live" : live}</span>
          </p>
        </div>
        <div className="toolbar">
          <button disabled={!view.running} title={view.running ? "stop the running turn at its next step" : "no turn is running"} onClick={() => act(() => client.cancelTurn(id))}>Cancel</button>
          <button
            disabled={lastEnded === undefined}
            title={lastEnded === undefined ? "a session forks at the end of a turn; none has ended yet" : `a new session with this one's log up to the end of turn ${lastEnded}`}
            onClick={() => act(async () => {
              const forked = await client.forkSession(id, { turn: lastEnded! });
              props.onChanged();
              location.hash = `#/s/${encodeURIComponent(forked.id)}`;
            })}
          >Fork</button>
          <button title="download the whole log and its spilled results as one JSON bundle" onClick={() => act(() => exportBundle(client, id))}>Export</button>
        </div>
      </header>
      <Meters context={context} costUsd={view.costUsd} tokens={view.tokens} tenant={tenant} />
      {error && <div className="banner error" role="alert">{error}</div>}
      <WaitingCards
        waiting={view.waiting}
        onApproval={(callId, decision) => act(() => client.decideApproval(id, callId, decision))}
        onAnswers={(callId, answers) => act(() => client.answerQuestion(id, callId, answers))}
        onPlan={(callId, approve, feedback) => act(() => client.decidePlan(id, { call_id: callId, approve, feedback }))}
      />
      <div className="tabs" role="tablist">
        <button role="tab" aria-selected={tab === "conversation"} onClick={() => setTab("conversation")}>Conversation</button>
        <button role="tab" aria-selected={tab === "timeline"} onClick={() => setTab("timeline")}>Timeline</button>
      </div>
      {tab === "conversation" ? <Conversation items={view.items} running={view.running} /> : <Timeline turns={view.turns} />}
      <Composer running={view.running} onSend={(text) => act(async () => { await client.postMessage(id, text); props.onChanged(); })} />
    </div>
  );
}

/** Downloads the session's export bundle as `<id>.json`. */
async function exportBundle(client: TackClient, id: string): Promise<void> {
  const bundle = await client.exportSession(id);
  const url = URL.createObjectURL(new Blob([JSON.stringify(bundle)], { type: "application/json" }));
  const link = Object.assign(document.createElement("a"), { href: url, download: `${id}.json` });
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function Meters(props: { context: ContextSize | undefined; costUsd: number; tokens: { input: number; cached: number; output: number }; tenant: TenantUsage | undefined }) {
  const c = props.context;
  const parts = c && c.tokens ? [
    { label: "system", value: c.tokens.system_prompt, cls: "system" },
    { label: "tools", value: c.tokens.tools, cls: "tools" },
    { label: "conversation", value: c.tokens.conversation, cls: "conversation" },
  ] : [];
  const total = parts.reduce((a, p) => a + p.value, 0);
  return (
    <div className="meters">
      <div className="meter" aria-label="context meter">
        <span className="meter-title">Context</span>
        {c === undefined ? <span className="muted">…</span> : c.tokens === null ? <span className="muted">no model request yet</span> : (
          <>
            <div className="bar">{parts.map((p) => <span key={p.label} className={p.cls} style={{ flexGrow: p.value }} title={`${p.label}: ${p.value} tokens`} />)}</div>
            <span className="legend">{parts.map((p) => <span key={p.label} className={p.cls}>{p.label} {p.value.toLocaleString()}</span>)} · total {total.toLocaleString()} tokens</span>
          </>
        )}
      </div>
      <div className="meter" aria-label="cost meter">
        <span className="meter-title">Cost</span>
        <span data-testid="session-cost">${props.costUsd.toFixed(4)}</span>
        <span className="muted"> · {props.tokens.input.toLocaleString()} in ({props.tokens.cached.toLocaleString()} cached) · {props.tokens.output.toLocaleString()} out</span>
        {props.tenant && <span className="muted"> · tenant {props.tenant.tenant}: ${props.tenant.cost_usd.toFixed(4)}</span>}
      </div>
    </div>
  );
}

function Composer(props: { running: boolean; onSend: (text: string) => Promise<void> }) {
  const [text, setText] = useState("");
  const [busy, setBusy] = useState(false);
  const send = async (event: React.FormEvent) => {
    event.preventDefault();
    if (!text.trim()) return;
    setBusy(true);
    await props.onSend(text);
    setText("");
    setBusy(false);
  };
  return (
    <form className="composer" onSubmit={send}>
      <textarea aria-label="message" value={text} onChange={(e) => setText(e.target.value)} placeholder={props.running ? "A turn is running…" : "Ask for something"}
        onKeyDown={(e) => { if (e.key === "Enter" && (e.metaKey || e.ctrlKey)) void send(e); }} />
      <button type="submit" disabled={busy || !text.trim()}>Send</button>
    </form>
  );
}
