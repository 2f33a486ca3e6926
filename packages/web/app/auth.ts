// The API key of this tab: kept in sessionStorage, so it is gone when the tab closes.
import { TackClient } from "@tack/client";

const KEY = "tack.apiKey";

/** The key this tab signed in with, if any. */
export function storedKey(): string {
  try {
    return sessionStorage.getItem(KEY) ?? "";
  } catch {
    return "";
  }
}

/** Remembers (or, with "", forgets) the key for this tab. */
export function storeKey(key: string): void {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

/** A client of the gateway that served this page, reading the tab's key at each request. */
export function pageClient(): TackClient {
  return new TackClient({ baseUrl: "", apiKey: storedKey });
}
