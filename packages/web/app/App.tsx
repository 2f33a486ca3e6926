import { useCallback, useEffect, useState } from "react";
import { TackApiError, type Session } from "@tack/client";
import { pageClient, storedKey, storeKey } from "./auth.js";
import { SessionPage } from "./SessionPage.js";
import { Sidebar } from "./Sidebar.js";

const client = pageClient();

/** The session id in the location (`#/s/<id>`), if any. */
function routeSession(): string | undefined {
  const m = /^#\/s\/([^/]+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]!) : undefined;
}

/** The whole page: sign-in until a key works, then the sessions and the open one. */
export function App() {
  const [signedIn, setSignedIn] = useState(storedKey() !== "");
  const [sessionId, setSessionId] = useState(routeSession());
  const [sessions, setSessions] = useState<Session[] | undefined>();
  const [error, setError] = useState("");

  useEffect(() => {
    const onHash = () => setSessionId(routeSession());
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, []);

  const refresh = useCallback(async () => {
    try {
      const all: Session[] = [];
      for await (const s of client.allSessions()) all.push(s);
      setSessions(all);
    } catch (e) {
      if (e instanceof TackApiError && e.status === 401) {
        storeKey("");
        setSignedIn(false);
        setError(e.message);
      } else setError((e as Error).message);
    }
  }, []);

  // With a session open, the sidebar's list waits for its conversation's first paint (onPainted).
  const [listWanted, setListWanted] = useState(routeSession() === undefined);
  useEffect(() => {
    // …or at most 1.5 s, should that session fail to load.
    const timer = setTimeout(() => setListWanted(true), 1_500);
    return () => clearTimeout(timer);
  }, []);
  useEffect(() => {
    if (signedIn && listWanted) void refresh();
  }, [signedIn, listWanted, refresh]);

  if (!signedIn) return <SignIn error={error} onSignedIn={() => { setError(""); setSignedIn(true); }} />;
  return (
    <div className="layout">
      <Sidebar
        sessions={sessions}
        current={sessionId}
        client={client}
        onCreated={(id) => { void refresh(); location.hash = `#/s/${encodeURIComponent(id)}`; }}
        onSignOut={() => { storeKey(""); setSignedIn(false); setSessions(undefined); }}
      />
      <main className="main">
        {error && <div className="banner error" role="alert">{error}</div>}
        {sessionId ? <SessionPage key={sessionId} id={sessionId} client={client} onChanged={refresh} onPainted={() => setListWanted(true)} /> : <p className="empty">Choose a session on the left, or create one.</p>}
      </main>
    </div>
  );
}

function SignIn(props: { error: string; onSignedIn: () => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(props.error);
  const [busy, setBusy] = useState(false);
  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    setBusy(true);
    storeKey(key.trim());
    try {
      await client.listSessions({ limit: 1 });
      props.onSignedIn();
    } catch (e) {
      storeKey("");
      setError(e instanceof TackApiError && e.status === 401 ? `That key does not work: ${e.message}` : (e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="signin" onSubmit={submit}>
      <h1>Tack</h1>
      <label htmlFor="api-key">API key</label>
      <input id="api-key" type="password" autoComplete="off" value={key} onChange={(e) => setKey(e.target.value)} placeholder="the key in .tack/api-key" required />
      <button type="submit" disabled={busy || key.trim() === ""}>Sign in</button>
      <p className="hint">The key stays in this tab (sessionStorage) and is sent only to this gateway.</p>
      {error && <p className="error" role="alert">{error}</p>}
    </form>
  );
}
