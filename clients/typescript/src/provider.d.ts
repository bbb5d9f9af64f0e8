// Declarations of src/provider.js: the seeds' MemoryProvider, backed by memjobs.
import type { MemjobsClient, ClientOptions } from "./index.js";
import type { MemoryEditResult } from "./schema.js";

export declare const MEMORY_PROVIDER_PROTOCOL_VERSION: 2;
/** Alias of MEMORY_PROVIDER_PROTOCOL_VERSION. */
export declare const PROTOCOL_VERSION: 2;
export declare const MEMORY_DOCUMENTS: readonly ["USER.md", "MEMORY.md"];

export interface ProviderInfo { protocolVersion: number; key: string; label: string }
export interface ProviderDocument { doc: "USER.md" | "MEMORY.md"; scope: "user" | "memory"; content: string; version: number }
export interface ListOptions { maxDocs?: number; maxChars?: number }
/** The memory tool's operations: append Markdown, or replace a unique old_text ("" deletes). */
export type MemoryChange =
  | { op: "append"; doc?: string; scope?: "user" | "memory"; text: string }
  | { op: "replace"; doc?: string; scope?: "user" | "memory"; old_text?: string; new_text?: string; oldText?: string; newText?: string };
/** Supplied by the gateway, never by the model; kept in memjobs' audit trail. */
export interface ChangeContext { source?: string; session?: string; turn?: string; trace?: string }
export interface ApplyResult { changed: number; documents: ProviderDocument[]; edits: MemoryEditResult[] }
export interface ProviderHealth { ok: boolean; detail?: string }

/** The MemoryProvider a gateway injects (`createGatewayApplication({ memoryProvider })`). */
export interface MemoryProvider {
  describe(): ProviderInfo;
  list(ownerId: string, options?: ListOptions): ProviderDocument[];
  apply(ownerId: string, changes: MemoryChange[], context?: ChangeContext): Promise<ApplyResult>;
  health(): ProviderHealth;
  close(): Promise<void>;
}

export interface MemjobsMemoryProviderOptions extends Partial<ClientOptions> {
  client?: MemjobsClient;
  key?: string;
  label?: string;
  /** Owners cached at most (default 1000), the least recently listed dropped first. */
  maxOwners?: number;
  /** Age past which list() revalidates an owner in the background (default 2000 ms). */
  refreshMs?: number;
  /** A listed document's content, at most (default 8000 characters). */
  maxDocChars?: number;
  /** context.source when the gateway names none (default "gateway"). */
  source?: string;
  now?: () => number;
}

export declare class MemjobsMemoryProvider implements MemoryProvider {
  constructor(options: MemjobsMemoryProviderOptions);
  readonly client: MemjobsClient;
  describe(): ProviderInfo;
  /** Synchronous and bounded, from the cache: [] for an owner not fetched yet (the fetch starts). */
  list(ownerId: string, options?: ListOptions): ProviderDocument[];
  /** Fetch now (a conditional GET when cached); resolves to what list() will answer. */
  refresh(ownerId: string): Promise<ProviderDocument[]>;
  apply(ownerId: string, changes: MemoryChange[], context?: ChangeContext): Promise<ApplyResult>;
  health(): ProviderHealth;
  close(): Promise<void>;
}
