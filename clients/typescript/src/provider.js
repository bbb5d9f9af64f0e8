// The seeds' MemoryProvider for a gateway, backed by memjobs: inject it with
// `createGatewayApplication({ memoryProvider })`.
//
// - describe() → { protocolVersion, key, label }.
// - list(ownerId, options): synchronous and bounded, from a local cache. An owner not in the
//   cache (a cold cache) answers [] (the seed's empty provider) and starts a fetch; an entry older
//   than `refreshMs` answers what it holds and revalidates in the background with a conditional
//   GET (If-None-Match: the server answers 304 with no body while nothing changed). The cache
//   holds at most `maxOwners` owners, least recently listed dropped first.
// - apply(ownerId, changes, context): the memory tool's edits (append; replace of a unique
//   old_text), one turn all or none, through POST /v1/memory/edits; the cache takes the written
//   documents at once. context ({source, session, turn, trace}) is the gateway's, never the model's.
// - health(), close().
import { MemjobsApiError, MemjobsClient, readCapped } from "./index.js";

/** The MemoryProvider protocol this provider implements (the seeds' constant). */
export const MEMORY_PROVIDER_PROTOCOL_VERSION = 2;
/** The same constant under the name memjobs' Python side uses. */
export const PROTOCOL_VERSION = MEMORY_PROVIDER_PROTOCOL_VERSION;
/** The documents a provider lists and writes, in snapshot order. */
export const MEMORY_DOCUMENTS = Object.freeze(["USER.md", "MEMORY.md"]);
const SCOPE_OF = { "USER.md": "user", "MEMORY.md": "memory" };
const MAX_EDITS = 20;

function checkOwner(ownerId) {
  if (typeof ownerId !== "string" || ownerId.length === 0 || ownerId.length > 1024) {
    throw new MemjobsApiError("memjobs: ownerId must be a non-empty string", { reason: "validation" });
  }
}

/** A server document, checked: a known name, its scope, text content, a non-negative version. */
function validDocument(d) {
  if (!d || typeof d !== "object" || !(d.doc in SCOPE_OF)) return undefined;
  if (typeof d.content !== "string" || !Number.isInteger(d.version) || d.version < 0) return undefined;
  return { doc: d.doc, scope: SCOPE_OF[d.doc], content: d.content, version: d.version };
}

/** One change for /v1/memory/edits, camelCase accepted; anything else throws `validation`. */
function toEdit(change, index) {
  const bad = (what) => new MemjobsApiError(`memjobs: changes[${index}]: ${what}`, { reason: "validation" });
  if (!change || typeof change !== "object") throw bad("must be an object");
  const doc = change.doc ?? (change.scope === "user" ? "USER.md" : change.scope === "memory" ? "MEMORY.md" : undefined);
  if (typeof doc !== "string") throw bad("doc (USER.md or MEMORY.md) is required");
  if (change.op === "append") {
    if (typeof change.text !== "string") throw bad("append needs text");
    return { op: "append", doc, text: change.text };
  }
  if (change.op === "replace") {
    const oldText = change.old_text ?? change.oldText;
    const newText = change.new_text ?? change.newText ?? "";
    if (typeof oldText !== "string" || typeof newText !== "string") throw bad("replace needs old_text (and new_text)");
    return { op: "replace", doc, old_text: oldText, new_text: newText };
  }
  throw bad("op must be append or replace (whole-document writes are not accepted: say what changes)");
}

function changeContext(context, source) {
  const out = { source: context?.source ?? source };
  for (const name of ["session", "turn", "trace"]) if (context?.[name] !== undefined) out[name] = context[name];
  return out;
}

export class MemjobsMemoryProvider {
  /**
   * @param {object} options
   * @param {MemjobsClient} [options.client]  a client (else one is built from baseUrl, token, …)
   * @param {string} [options.baseUrl]
   * @param {string} [options.token]  the gateway token, or a scoped token with read and write
   * @param {string} [options.key]  describe().key (default "memjobs")
   * @param {string} [options.label]  describe().label
   * @param {number} [options.maxOwners]  owners cached at most (default 1000; least recently listed dropped)
   * @param {number} [options.refreshMs]  age past which list() revalidates an owner (default 2000 ms)
   * @param {number} [options.maxDocChars]  a listed document's content, at most (default 8000 characters)
   * @param {string} [options.source]  context.source when the gateway names none (default "gateway")
   * @param {() => number} [options.now]  the clock, in ms (tests)
   */
  constructor({ client, baseUrl, token, timeoutMs, maxResponseBytes, fetch, key = "memjobs", label = "memjobs (USER.md, MEMORY.md)",
    maxOwners = 1000, refreshMs = 2000, maxDocChars = 8000, source = "gateway", now = Date.now } = {}) {
    this.client = client ?? new MemjobsClient({ baseUrl, token, timeoutMs, maxResponseBytes, fetch });
    if (!(Number.isInteger(maxOwners) && maxOwners >= 1)) throw new RangeError("maxOwners must be a positive integer");
    this.key = key;
    this.label = label;
    this.maxOwners = maxOwners;
    this.refreshMs = refreshMs;
    this.maxDocChars = maxDocChars;
    this.source = source;
    this.now = now;
    /** @type {Map<string, {docs: any[]|null, etag?: string, fetchedAt: number, retryAt?: number, inflight?: Promise<any>, generation: number}>} */
    this.cache = new Map();
    this.closed = false;
    this.lastError = undefined;
    this.aborts = new AbortController();
  }

  describe() {
    return { protocolVersion: MEMORY_PROVIDER_PROTOCOL_VERSION, key: this.key, label: this.label };
  }

  /** The owner's documents from the cache, at once; [] for an owner not fetched yet (fetch started). */
  list(ownerId, options) {
    options = options ?? {};
    if (this.closed || typeof ownerId !== "string" || ownerId.length === 0) return [];
    let entry = this.cache.get(ownerId);
    if (entry) {
      this.cache.delete(ownerId); // least recently listed last out
      this.cache.set(ownerId, entry);
    } else {
      entry = { docs: null, fetchedAt: 0, generation: 0 };
      this.#insert(ownerId, entry);
    }
    const now = this.now();
    const due = entry.docs === null || now - entry.fetchedAt >= this.refreshMs;
    if (!entry.inflight && due && now >= (entry.retryAt ?? 0)) {
      this.refresh(ownerId).catch(() => {}); // its failure is in health(); retried refreshMs later
    }
    const maxDocs = Number.isInteger(options.maxDocs) && options.maxDocs >= 0 ? options.maxDocs : MEMORY_DOCUMENTS.length;
    const maxChars = Number.isInteger(options.maxChars) && options.maxChars >= 0 ? Math.min(options.maxChars, this.maxDocChars) : this.maxDocChars;
    return (entry.docs ?? []).slice(0, maxDocs).map((d) => ({ ...d, content: d.content.slice(0, maxChars) }));
  }

  /** Fetch the owner's documents now (a conditional GET when cached); resolves to what list() will answer. */
  refresh(ownerId) {
    checkOwner(ownerId);
    if (this.closed) return Promise.reject(new MemjobsApiError("memjobs: the provider is closed", { reason: "closed" }));
    let entry = this.cache.get(ownerId);
    if (!entry) {
      entry = { docs: null, fetchedAt: 0, generation: 0 };
      this.#insert(ownerId, entry);
    }
    if (entry.inflight) return entry.inflight;
    const generation = entry.generation;
    const work = this.#fetchDocuments(ownerId, entry.docs === null ? undefined : entry.etag).then(({ status, etag, body }) => {
      entry.fetchedAt = this.now();
      entry.retryAt = undefined;
      this.lastError = undefined;
      if (status === 304) return entry.docs ?? [];
      const docs = (body?.documents ?? []).map(validDocument).filter((d) => d && d.version > 0);
      // An apply that landed while this read was under way may be newer than what it read.
      entry.docs = generation === entry.generation ? docs : mergeNewest(entry.docs ?? [], docs);
      entry.etag = generation === entry.generation ? etag : undefined;
      return entry.docs;
    }, (error) => {
      this.lastError = error;
      entry.retryAt = this.now() + this.refreshMs; // a server that is down is not asked at every list()
      throw error;
    }).finally(() => {
      entry.inflight = undefined;
    });
    entry.inflight = work;
    return work;
  }

  /** The memory tool's edits of one turn, all or none; resolves to {changed, documents, edits}. */
  async apply(ownerId, changes, context = {}) {
    checkOwner(ownerId);
    if (this.closed) throw new MemjobsApiError("memjobs: the provider is closed", { reason: "closed" });
    if (!Array.isArray(changes) || changes.length === 0 || changes.length > MAX_EDITS) {
      throw new MemjobsApiError(`memjobs: changes must be 1 to ${MAX_EDITS} edits`, { reason: "validation" });
    }
    const edits = changes.map(toEdit);
    const result = await this.client.editMemory({ ownerId, edits, context: changeContext(context, this.source) });
    const documents = (result.documents ?? []).map(validDocument).filter(Boolean);
    const entry = this.cache.get(ownerId);
    if (entry && documents.length > 0) {
      entry.generation += 1;
      entry.etag = undefined; // the next read is a full one
      entry.docs = mergeNewest(entry.docs ?? [], documents);
    }
    return { changed: result.changed, documents, edits: result.edits };
  }

  health() {
    if (this.closed) return { ok: false, detail: "closed" };
    if (this.lastError) return { ok: false, detail: `the last refresh failed (${this.lastError.reason ?? "error"})` };
    return { ok: true, detail: `${this.cache.size} owners cached` };
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    this.aborts.abort();
    this.cache.clear();
  }

  #insert(ownerId, entry) {
    this.cache.set(ownerId, entry);
    while (this.cache.size > this.maxOwners) this.cache.delete(this.cache.keys().next().value);
  }

  async #fetchDocuments(ownerId, etag) {
    const client = this.client;
    const headers = { accept: "application/json, application/problem+json", "x-memjobs-owner": encodeURIComponent(ownerId) };
    if (client.token) headers.authorization = `Bearer ${client.token}`;
    if (etag) headers["if-none-match"] = etag;
    let response;
    try {
      response = await client.fetch(`${client.baseUrl}/v1/memory/documents`, {
        method: "GET", headers, redirect: "error",
        signal: AbortSignal.any([AbortSignal.timeout(client.timeoutMs), this.aborts.signal]),
      });
    } catch (error) {
      const reason = error?.name === "TimeoutError" ? "timeout" : this.closed ? "closed" : "network";
      throw new MemjobsApiError(`memjobs: GET /v1/memory/documents failed (${reason})`, { reason });
    }
    if (response.status === 304) {
      await response.body?.cancel();
      return { status: 304, etag };
    }
    const text = await readCapped(response, client.maxResponseBytes);
    let body;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      throw new MemjobsApiError("memjobs: GET /v1/memory/documents: the reply is not JSON", { status: response.status, reason: "bad_reply" });
    }
    if (!response.ok) {
      throw new MemjobsApiError(`memjobs: GET /v1/memory/documents: ${body?.title ?? response.status}`, {
        status: response.status, reason: body?.reason ?? "http_error", type: body?.type, detail: body?.detail, problem: body,
      });
    }
    return { status: response.status, etag: response.headers.get("etag") ?? undefined, body };
  }
}

/** Both lists' documents, the higher version of each, in snapshot order. */
function mergeNewest(held, fresh) {
  const best = new Map();
  for (const d of [...held, ...fresh]) {
    const kept = best.get(d.doc);
    if (!kept || d.version > kept.version) best.set(d.doc, d);
  }
  return MEMORY_DOCUMENTS.filter((name) => best.has(name)).map((name) => best.get(name));
}
