// Declarations of src/index.js; the bodies' types come from src/schema.d.ts, which
// scripts/gen-types.mjs generates from docs/openapi.json.
import type {
  DeadLetterDetail, DeadLetterList, Erased, ForgetAccepted, Purged, Retried, Health, KnowledgeResults, KnowledgeText, Memories, Preferences, Problem, Ready,
  MemoryAudit, MemoryContext, MemoryDocument, MemoryDocuments, MemoryEdit, MemoryEditsApplied,
  ReindexAccepted, RememberAccepted, SessionEndAccepted, Sessions, Sources, TaskAccepted, TaskRef,
  TaskUpdate, Turn,
} from "./schema.js";

export type * from "./schema.js";

export interface ClientOptions {
  /** https://…, or http:// on a loopback address only. */
  baseUrl: string;
  /** The gateway token (or the host token, for reindexKnowledge), or a scoped token from
   *  `memjobs token issue` (its owners and scopes only: 403 `forbidden` outside them). */
  token?: string;
  /** Cap on each response body, in bytes (default 1 MiB). */
  maxResponseBytes?: number;
  /** Per call (default 10 000 ms). */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

export interface ErrorFields {
  status?: number;
  reason?: string;
  type?: string;
  detail?: string;
  problem?: Problem;
}

export declare class MemjobsApiError extends Error {
  constructor(message: string, fields?: ErrorFields);
  /** HTTP status; 0 for a client-side refusal (insecure_url, response_too_large, timeout, network). */
  status: number;
  /** The problem's reason (validation, sensitive_content, memory_off, …) or a client-side one. */
  reason: string;
  type: string;
  detail?: string;
  problem?: Problem;
}

export declare function isLoopbackHost(hostname: string): boolean;
export declare function checkBaseUrl(baseUrl: string): URL;
export declare function readCapped(response: Response, maxBytes: number): Promise<string>;

export declare class MemjobsClient {
  constructor(options: ClientOptions);
  readonly baseUrl: string;
  request(method: string, path: string, options?: { body?: unknown; owner?: string; query?: Record<string, unknown> }): Promise<unknown>;

  remember(args: { ownerId: string; text: string; sessionId?: string; kind?: "utterance" | "explicit" }): Promise<RememberAccepted>;
  forget(args: { ownerId: string; sourceId: string }): Promise<ForgetAccepted>;
  recall(args: { ownerId: string; query: string; limit?: number }): Promise<Memories>;
  preferences(args: { ownerId: string }): Promise<Preferences>;

  /** Queues consolidation and the digest by default (the workers decide); `false` opts out. */
  endSession(args: { ownerId: string; sessionId: string; transcript: Turn[]; tasks?: TaskRef[]; consolidate?: boolean; digest?: boolean }): Promise<SessionEndAccepted>;
  sessions(args: { ownerId: string; days?: number; limit?: number }): Promise<Sessions>;
  putTask(args: { ownerId: string; taskId: string; goal: string; status: TaskUpdate["status"] }): Promise<TaskAccepted>;

  /** The memory tool: USER.md and MEMORY.md (and the provider's describe()); one document. */
  memoryDocuments(args: { ownerId: string }): Promise<MemoryDocuments>;
  memoryDocument(args: { ownerId: string; doc: "USER.md" | "MEMORY.md" }): Promise<MemoryDocument>;
  /** One turn's edits, in order, all or none; not_found / ambiguous reject (MemjobsApiError). */
  editMemory(args: { ownerId: string; edits: MemoryEdit[]; context?: MemoryContext }): Promise<MemoryEditsApplied>;

  reindexKnowledge(args: { ownerId: string; consent: boolean; documents: KnowledgeText[] }): Promise<ReindexAccepted>;
  searchKnowledge(args: { ownerId: string; query: string; k?: number }): Promise<KnowledgeResults>;

  sources(args: { ownerId: string; limit?: number; includeText?: boolean }): Promise<Sources>;
  memories(args: { ownerId: string; limit?: number }): Promise<Memories>;

  health(): Promise<Health>;
  ready(): Promise<Ready>;

  /** The memory audit trail of every host (the host token): never memory text. */
  memoryAudit(args?: { ownerKey?: string; session?: string; source?: string; since?: string; beforeId?: number; limit?: number }): Promise<MemoryAudit>;

  /** Erase the owner from every store (the host token); idempotent: call again after a 503. */
  eraseOwner(args: { ownerId: string }): Promise<Erased>;
  /** Everything memjobs holds about the owner, as JSON Lines text (the host token; within maxResponseBytes). */
  exportOwner(args: { ownerId: string }): Promise<string>;

  /** Dead letters: the host token. */
  deadLetters(args?: { queue?: string }): Promise<DeadLetterList>;
  deadLetter(args: { letterId: string; reveal?: boolean }): Promise<DeadLetterDetail>;
  retryDeadLetter(args: { letterId: string }): Promise<Retried>;
  retryDeadLetters(args: { queue?: string; all?: boolean }): Promise<Retried>;
  purgeDeadLetter(args: { letterId: string }): Promise<Purged>;
  purgeDeadLetters(args: { queue?: string; olderThanS?: number; all?: boolean }): Promise<Purged>;
}
export { APPEND_PART_BYTES, MAX_APPEND_ENTRIES, SessionBlackboard } from "./blackboard.js";
