// Declarations of src/blackboard.js: a session's L0 blackboard across hosts.
import type { MemjobsClient } from "./index.js";
import type { BlackboardCursor, BlackboardEntry, BlackboardPage } from "./schema.js";

export declare const MAX_APPEND_ENTRIES: number;
export declare const APPEND_PART_BYTES: number;

export declare class SessionBlackboard {
  constructor(client: MemjobsClient);
  readonly client: MemjobsClient;
  /** Queue entries (idempotent by entry_id; any order: they are read back by seq). */
  append(args: { ownerId: string; sessionId: string; entries: BlackboardEntry[] }): Promise<number>;
  /** One page in event order; pass a page's next_after as `after` for the next. */
  page(args: { ownerId: string; sessionId: string; after?: BlackboardCursor; limit?: number }): Promise<BlackboardPage>;
  /** Every live entry of the session, in event order. */
  restore(args: { ownerId: string; sessionId: string }): Promise<BlackboardEntry[]>;
}
