// A session's L0 blackboard across hosts: append entries (queued, idempotent by entry id) and
// restore them on any host, in event order. Over the memjobs HTTP API, through a MemjobsClient.
//
//   const board = new SessionBlackboard(memjobs);
//   await board.append({ ownerId, sessionId, entries: [{ entry_id: "e-1", seq: 1, at: new Date().toISOString(),
//                                                        trust: "runtime", priority: 1, result: "table booked",
//                                                        evidence: ["task:t-1"] }] });
//   const entries = await board.restore({ ownerId, sessionId });   // on any host
//
// The seeds' limits hold per session (7 days per entry, 1,000 entries, 8 MB; the oldest dropped
// first). A field that looks like a credential rejects the append (reason `sensitive_content`).

/** Entries one request carries at most (a longer append is sent as several requests). */
export const MAX_APPEND_ENTRIES = 100;
/** About the most bytes of entries one request carries (the API's default body cap is 1 MiB). */
export const APPEND_PART_BYTES = 512 * 1024;

function parts(entries) {
  const out = [[]];
  let size = 0;
  const encoder = new TextEncoder();
  for (const entry of entries) {
    const cost = encoder.encode(JSON.stringify(entry)).length;
    const last = out[out.length - 1];
    if (last.length > 0 && (last.length >= MAX_APPEND_ENTRIES || size + cost > APPEND_PART_BYTES)) {
      out.push([]);
      size = 0;
    }
    out[out.length - 1].push(entry);
    size += cost;
  }
  return out;
}

export class SessionBlackboard {
  /** @param {import("./index.js").MemjobsClient} client */
  constructor(client) {
    this.client = client;
  }

  /** Queue the entries; resolves to how many were queued. */
  async append({ ownerId, sessionId, entries }) {
    if (!Array.isArray(entries) || entries.length === 0) throw new TypeError("entries: at least one entry");
    let queued = 0;
    for (const part of parts(entries)) {
      const reply = await this.client.request("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/blackboard`,
        { body: { owner_id: ownerId, entries: part } });
      queued += reply.entries;
    }
    return queued;
  }

  /** One page of the session's entries, in event order (`after`: a previous page's `next_after`). */
  page({ ownerId, sessionId, after, limit }) {
    return this.client.request("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/blackboard`, {
      owner: ownerId, query: { after_seq: after?.seq, after_id: after?.entry_id, limit },
    });
  }

  /** Every live entry of the session, in event order (all pages). */
  async restore({ ownerId, sessionId }) {
    const entries = [];
    let after;
    do {
      const page = await this.page({ ownerId, sessionId, after });
      entries.push(...page.entries);
      after = page.next_after ?? undefined;
    } while (after);
    return entries;
  }
}
