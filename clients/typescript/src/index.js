// memjobs HTTP API client: no runtime dependencies (fetch), Node 20+ and browsers.
//
// Safety rules, as the seeds' remote personal-memory client has them:
// - the base URL must be HTTPS, or plain HTTP on a loopback address (127.0.0.0/8, ::1, localhost);
// - every response body is capped (maxResponseBytes, 1 MiB by default) while it is read;
// - redirects are refused (one could lead off HTTPS), and every call has a timeout.
// Errors: MemjobsApiError carries the RFC 9457 problem document; branch on .reason (or .type).

const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;
const DEFAULT_TIMEOUT_MS = 10_000;

/** An error reply of the API: the problem document's fields, or a client-side reason. */
export class MemjobsApiError extends Error {
  constructor(message, { status = 0, reason = "client", type = "urn:memjobs:problem:client", detail, problem } = {}) {
    super(message);
    this.name = "MemjobsApiError";
    this.status = status;
    this.reason = reason;
    this.type = type;
    this.detail = detail;
    this.problem = problem;
  }
}

/** True for the hosts plain HTTP may be used with. */
export function isLoopbackHost(hostname) {
  const host = hostname.replace(/^\[|\]$/g, "").toLowerCase();
  if (host === "localhost" || host === "::1") return true;
  const parts = host.split(".");
  return parts.length === 4 && parts[0] === "127" && parts.every((p) => /^\d{1,3}$/.test(p) && Number(p) <= 255);
}

/** The base URL, checked: HTTPS, or HTTP on loopback; no credentials, query or fragment. */
export function checkBaseUrl(baseUrl) {
  let url;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new MemjobsApiError("memjobs: baseUrl is not a URL", { reason: "insecure_url" });
  }
  if (url.username || url.password || url.search || url.hash) {
    throw new MemjobsApiError("memjobs: baseUrl must not carry credentials, a query or a fragment", { reason: "insecure_url" });
  }
  if (url.protocol === "https:") return url;
  if (url.protocol === "http:" && isLoopbackHost(url.hostname)) return url;
  throw new MemjobsApiError("memjobs: baseUrl must be https://, or http:// on a loopback address", { reason: "insecure_url" });
}

/** The body of `response` as text, refused past `maxBytes` while it is read (the provider uses it too). */
export async function readCapped(response, maxBytes) {
  const declared = Number(response.headers.get("content-length"));
  if (Number.isFinite(declared) && declared > maxBytes) {
    await response.body?.cancel();
    throw new MemjobsApiError(`memjobs: response over ${maxBytes} bytes`, { status: response.status, reason: "response_too_large" });
  }
  if (!response.body) return "";
  const reader = response.body.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      throw new MemjobsApiError(`memjobs: response over ${maxBytes} bytes`, { status: response.status, reason: "response_too_large" });
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
}

export class MemjobsClient {
  /**
   * @param {object} options
   * @param {string} options.baseUrl  e.g. "http://127.0.0.1:8780" or "https://memjobs.internal"
   * @param {string} [options.token]  the gateway token (or the host token, for reindexKnowledge), or a
   *   scoped token from `memjobs token issue` (its owners and scopes only: 403 `forbidden` outside them)
   * @param {number} [options.maxResponseBytes]  cap on each response body (default 1 MiB)
   * @param {number} [options.timeoutMs]  per call (default 10 s)
   * @param {typeof fetch} [options.fetch]  a fetch implementation (default globalThis.fetch)
   */
  constructor({ baseUrl, token, maxResponseBytes = DEFAULT_MAX_RESPONSE_BYTES, timeoutMs = DEFAULT_TIMEOUT_MS, fetch: fetchImpl } = {}) {
    const url = checkBaseUrl(baseUrl);
    this.baseUrl = url.href.replace(/\/+$/, "");
    this.token = token;
    this.maxResponseBytes = maxResponseBytes;
    this.timeoutMs = timeoutMs;
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
  }

  async request(method, path, { body, owner, query, raw } = {}) {
    const headers = { accept: "application/json, application/problem+json" };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (owner !== undefined) headers["x-memjobs-owner"] = encodeURIComponent(owner);
    if (body !== undefined) headers["content-type"] = "application/json";
    let target = this.baseUrl + path;
    if (query) {
      const params = new URLSearchParams();
      for (const [key, value] of Object.entries(query)) if (value !== undefined) params.set(key, String(value));
      const text = params.toString();
      if (text) target += `?${text}`;
    }
    let response;
    try {
      response = await this.fetch(target, {
        method, headers, redirect: "error", signal: AbortSignal.timeout(this.timeoutMs),
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      const reason = error?.name === "TimeoutError" ? "timeout" : "network";
      throw new MemjobsApiError(`memjobs: ${method} ${path} failed (${reason})`, { reason });
    }
    const text = await readCapped(response, this.maxResponseBytes);
    if (raw && response.ok) return text;  // a reply that is not one JSON document (JSON Lines)
    let document;
    try {
      document = text ? JSON.parse(text) : undefined;
    } catch {
      throw new MemjobsApiError(`memjobs: ${method} ${path}: the reply is not JSON`, { status: response.status, reason: "bad_reply" });
    }
    if (!response.ok) {
      const problem = document && typeof document === "object" ? document : undefined;
      throw new MemjobsApiError(`memjobs: ${method} ${path}: ${problem?.title ?? response.status}`, {
        status: response.status, reason: problem?.reason ?? "http_error", type: problem?.type, detail: problem?.detail, problem,
      });
    }
    return document;
  }

  // -- personal memory (the remote protocol) --------------------------------------------
  remember({ ownerId, text, sessionId, kind }) {
    return this.request("POST", "/v1/remember", { body: { owner_id: ownerId, text, session_id: sessionId, kind } });
  }
  forget({ ownerId, sourceId }) {
    return this.request("POST", "/v1/forget", { body: { owner_id: ownerId, source_id: sourceId } });
  }
  recall({ ownerId, query, limit }) {
    return this.request("POST", "/v1/recall", { body: { owner_id: ownerId, query, limit } });
  }
  preferences({ ownerId }) {
    return this.request("GET", "/v1/preferences", { owner: ownerId });
  }

  // -- sessions ----------------------------------------------------------------------------
  // Consolidation and the digest are queued by default (the workers decide with their own
  // settings); `consolidate: false` / `digest: false` opt out. The reply says what was queued.
  endSession({ ownerId, sessionId, transcript, tasks = [], consolidate, digest }) {
    const body = { owner_id: ownerId, transcript, tasks };
    if (consolidate !== undefined) body.consolidate = consolidate;
    if (digest !== undefined) body.digest = digest;
    return this.request("POST", `/v1/sessions/${encodeURIComponent(sessionId)}/end`, { body });
  }
  sessions({ ownerId, days, limit }) {
    return this.request("GET", "/v1/sessions", { owner: ownerId, query: { days, limit } });
  }
  putTask({ ownerId, taskId, goal, status }) {
    return this.request("PUT", `/v1/tasks/${encodeURIComponent(taskId)}`, { body: { owner_id: ownerId, goal, status } });
  }

  // -- the memory tool: USER.md and MEMORY.md ---------------------------------------------
  // read both documents (and which provider keeps them), or one; ASSISTANT.md is refused.
  memoryDocuments({ ownerId }) {
    return this.request("GET", "/v1/memory/documents", { owner: ownerId });
  }
  memoryDocument({ ownerId, doc }) {
    return this.request("GET", `/v1/memory/documents/${encodeURIComponent(doc)}`, { owner: ownerId });
  }
  // One turn's edits, applied in order, all or none, with one result: {op: "append", doc, text}
  // or {op: "replace", doc, old_text, new_text} (new_text "" deletes). not_found and ambiguous
  // (and sensitive_content, forbidden_document) reject with a MemjobsApiError whose detail names
  // the edit. `context` ({source, session, turn, trace}) is the gateway's, never the model's.
  editMemory({ ownerId, edits, context }) {
    const body = { owner_id: ownerId, edits };
    if (context !== undefined) body.context = context;
    return this.request("POST", "/v1/memory/edits", { body });
  }

  // -- knowledge ---------------------------------------------------------------------------
  reindexKnowledge({ ownerId, consent, documents }) {
    return this.request("POST", "/v1/knowledge/reindex", { body: { owner_id: ownerId, consent, documents } });
  }
  searchKnowledge({ ownerId, query, k }) {
    return this.request("POST", "/v1/knowledge/search", { body: { owner_id: ownerId, query, k } });
  }

  // -- the owner's own view ------------------------------------------------------------------
  sources({ ownerId, limit, includeText }) {
    return this.request("GET", "/v1/sources", { owner: ownerId, query: { limit, include_text: includeText } });
  }
  memories({ ownerId, limit }) {
    return this.request("GET", "/v1/memories", { owner: ownerId, query: { limit } });
  }

  // -- operations ----------------------------------------------------------------------------
  health() {
    return this.request("GET", "/healthz");
  }
  ready() {
    return this.request("GET", "/readyz");
  }

  // -- the memory audit (the host token): every host's trail, never memory text --------------
  memoryAudit({ ownerKey, session, source, since, beforeId, limit } = {}) {
    return this.request("GET", "/v1/ops/memory-audit", {
      query: { owner_key: ownerKey, session, source, since, before_id: beforeId, limit },
    });
  }

  // -- an owner's whole data (the host token): docs/data-lifecycle.md -----------------------
  eraseOwner({ ownerId }) {
    return this.request("DELETE", "/v1/owners", { owner: ownerId });
  }
  exportOwner({ ownerId }) {
    return this.request("GET", "/v1/owners/export", { owner: ownerId, raw: true });
  }

  // -- dead letters (the host token) ---------------------------------------------------------
  deadLetters({ queue } = {}) {
    return this.request("GET", "/v1/ops/dead-letters", { query: { queue } });
  }
  deadLetter({ letterId, reveal }) {
    return this.request("GET", `/v1/ops/dead-letters/${encodeURIComponent(letterId)}`, { query: { reveal } });
  }
  retryDeadLetter({ letterId }) {
    return this.request("POST", `/v1/ops/dead-letters/${encodeURIComponent(letterId)}/retry`, { body: {} });
  }
  retryDeadLetters({ queue, all } = {}) {
    return this.request("POST", "/v1/ops/dead-letters/retry", { body: { queue, all } });
  }
  purgeDeadLetter({ letterId }) {
    return this.request("DELETE", `/v1/ops/dead-letters/${encodeURIComponent(letterId)}`);
  }
  purgeDeadLetters({ queue, olderThanS, all } = {}) {
    return this.request("POST", "/v1/ops/dead-letters/purge", { body: { queue, older_than_s: olderThanS, all } });
  }
}
export { APPEND_PART_BYTES, MAX_APPEND_ENTRIES, SessionBlackboard } from "./blackboard.js";
