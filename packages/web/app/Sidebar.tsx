import { useMemo, useState } from "react";
import type { Session, TackClient } from "@tack/client";

/** Sessions grouped by workspace, and the form that creates one. */
export function Sidebar(props: { sessions: Session[] | undefined; current: string | undefined; client: TackClient; onCreated: (id: string) => void; onSignOut: () => void }) {
  const groups = useMemo(() => {
    const map = new Map<string, Session[]>();
    for (const s of props.sessions ?? []) map.set(s.workspace, [...(map.get(s.workspace) ?? []), s]);
    return [...map].sort(([a], [b]) => a.localeCompare(b));
  }, [props.sessions]);
  return (
    <nav className="sidebar">
      <header><strong>Tack</strong><button className="link" onClick={props.onSignOut}>Sign out</button></header>
      <NewSession client={props.client} onCreated={props.onCreated} />
      {props.sessions === undefined ? <p className="muted">Loading sessions…</p> : groups.length === 0 ? <p className="muted">No sessions yet.</p> : null}
      {groups.map(([workspace, sessions]) => (
        <section key={workspace} className="group" aria-label={`workspace ${workspace}`}>
          <h3 title={workspace}>{workspace}</h3>
          <ul>
            {sessions.map((s) => (
              <li key={s.id}>
                <a href={`#/s/${encodeURIComponent(s.id)}`} className={s.id === props.current ? "current" : undefined}>
                  {s.title || s.id}<span className="muted"> · {s.model}</span>
                </a>
              </li>
            ))}
          </ul>
        </section>
      ))}
    </nav>
  );
}

function NewSession(props: { client: TackClient; onCreated: (id: string) => void }) {
  const [open, setOpen] = useState(false);
  const [workspace, setWorkspace] = useState(localStorage.getItem("tack.workspace") ?? "");
  const [model, setModel] = useState(localStorage.getItem("tack.model") ?? "deepseek:deepseek-chat");
  const [mode, setMode] = useState("standard");
  const [sandboxMode, setSandboxMode] = useState("workspace-write");
  const [title, setTitle] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  if (!open) return <button className="new" onClick={() => setOpen(true)}>New session</button>;
  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError("");
    try {
      const ws = workspace.trim();
      const created = await props.client.createSession({
        ...(ws.startsWith("ws_") ? { workspace_id: ws } : { workspace: ws }),
        model: model.trim(), mode, sandbox_mode: sandboxMode as "read-only", title: title.trim(),
      });
      localStorage.setItem("tack.workspace", ws);
      localStorage.setItem("tack.model", model.trim());
      setOpen(false);
      setTitle("");
      props.onCreated(created.id);
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="new-session" onSubmit={submit} aria-label="new session">
      <label>Workspace <input name="workspace" aria-label="Workspace" value={workspace} onChange={(e) => setWorkspace(e.target.value)} placeholder="/home/me/project or ws_…" required /></label>
      <label>Model <input name="model" aria-label="Model" value={model} onChange={(e) => setModel(e.target.value)} required /></label>
      <label>Mode <select name="mode" aria-label="Mode" value={mode} onChange={(e) => setMode(e.target.value)}>{["standard", "code", "minimal", "creator"].map((m) => <option key={m}>{m}</option>)}</select></label>
      <label>Sandbox <select name="sandbox_mode" aria-label="Sandbox" value={sandboxMode} onChange={(e) => setSandboxMode(e.target.value)}>{["read-only", "workspace-write", "danger-full-access"].map((m) => <option key={m}>{m}</option>)}</select></label>
      <label>Title <input name="title" aria-label="Title" value={title} onChange={(e) => setTitle(e.target.value)} maxLength={200} /></label>
      <div className="row"><button type="submit" disabled={busy}>Create</button><button type="button" className="link" onClick={() => setOpen(false)}>Cancel</button></div>
      {error && <p className="error" role="alert">{error}</p>}
    </form>
  );
}
