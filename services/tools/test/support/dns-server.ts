import { createSocket } from "node:dgram";
import { isIPv4 } from "node:net";
import ipaddr from "ipaddr.js";

/** Answers for one name: fixed lists, or a function of how many times that type was asked (for rebinding). */
export interface Records {
  readonly A?: readonly string[] | ((asked: number) => readonly string[]);
  readonly AAAA?: readonly string[] | ((asked: number) => readonly string[]);
}

export interface DnsServer {
  /** "127.0.0.1:port", for dnsServerResolver. */
  readonly address: string;
  /** Questions received, as "name TYPE", in order. */
  readonly asked: string[];
  close(): Promise<void>;
}

const TYPES: Record<number, "A" | "AAAA"> = { 1: "A", 28: "AAAA" };

/**
 * A DNS responder on 127.0.0.1 (UDP) answering A and AAAA questions for `zone` only; other names
 * are NXDOMAIN, other types get an empty answer. Just enough of RFC 1035 for Node's resolver.
 */
export async function startDnsServer(zone: Readonly<Record<string, Records>>): Promise<DnsServer> {
  const socket = createSocket("udp4");
  const asked: string[] = [];
  const counts = new Map<string, number>();
  socket.on("message", (query, peer) => {
    const { name, type, questionEnd } = readQuestion(query);
    const typeName = TYPES[type];
    asked.push(`${name} ${typeName ?? type}`);
    const records = zone[name.toLowerCase()];
    const key = `${name} ${type}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
    const answers = records && typeName ? records[typeName] : undefined;
    const list = typeof answers === "function" ? answers(counts.get(key)!) : (answers ?? []);
    socket.send(answer(query, questionEnd, records ? 0 : 3, type, list), peer.port, peer.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    address: `127.0.0.1:${socket.address().port}`,
    asked,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

function readQuestion(query: Buffer): { name: string; type: number; questionEnd: number } {
  const labels: string[] = [];
  let at = 12;
  while (query[at]! !== 0) {
    const length = query[at]!;
    labels.push(query.toString("latin1", at + 1, at + 1 + length));
    at += 1 + length;
  }
  at += 1;
  return { name: labels.join("."), type: query.readUInt16BE(at), questionEnd: at + 4 };
}

function answer(query: Buffer, questionEnd: number, rcode: number, type: number, addresses: readonly string[]): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(query.readUInt16BE(0), 0); // id
  header.writeUInt16BE(0x8180 | rcode, 2); // response, recursion desired + available
  header.writeUInt16BE(1, 4); // one question
  header.writeUInt16BE(addresses.length, 6);
  const records = addresses.map((address) => {
    const data = Buffer.from(ipaddr.parse(address).toByteArray());
    if ((type === 1) !== isIPv4(address)) throw new Error(`test zone lists ${address} under the wrong record type`);
    const record = Buffer.alloc(12);
    record.writeUInt16BE(0xc00c, 0); // name: pointer to the question's
    record.writeUInt16BE(type, 2);
    record.writeUInt16BE(1, 4); // class IN
    record.writeUInt32BE(0, 6); // TTL 0: nothing may cache it
    record.writeUInt16BE(data.length, 10);
    return Buffer.concat([record, data]);
  });
  return Buffer.concat([header, query.subarray(12, questionEnd), ...records]);
}
