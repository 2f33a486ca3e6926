// Test-only: a throwaway PostgreSQL database per test file, on the server this machine and CI run
// at 127.0.0.1:5432 (trust auth). TACK_TEST_POSTGRES_URL names another server or user.
import { randomBytes } from "node:crypto";
import pg from "pg";

/** The server's maintenance database, through which test databases are created and dropped. */
export const POSTGRES_ADMIN_URL = process.env.TACK_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test";

/** A database that exists until `drop`. */
export interface TestDatabase {
  readonly name: string;
  /** `postgres://…/<name>`. */
  readonly url: string;
  /** Drops the database, ending connections that are still open to it. */
  drop(): Promise<void>;
}

/** Creates an empty, uniquely named database (`tack_<label>_<random>`). */
export async function createTestDatabase(label: string): Promise<TestDatabase> {
  const name = `tack_${label}_${randomBytes(5).toString("hex")}`;
  await admin(`create database ${name}`);
  const url = new URL(POSTGRES_ADMIN_URL);
  url.pathname = `/${name}`;
  return { name, url: url.toString(), drop: () => admin(`drop database if exists ${name} with (force)`) };
}

async function admin(statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}
