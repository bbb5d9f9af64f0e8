// Type-checked by `tsc -p .` (not run): the README's gateway snippet, against the declarations.
import { MemjobsApiError, MemjobsClient, SessionBlackboard, type BlackboardEntry, type SessionEndAccepted, type Turn } from "../src/index.js";

export async function endSession(token: string, ownerId: string, sessionId: string, turns: Turn[]): Promise<SessionEndAccepted | undefined> {
  const memjobs = new MemjobsClient({ baseUrl: "http://127.0.0.1:8780", token });
  try {
    const ended = await memjobs.endSession({ ownerId, sessionId, transcript: turns, tasks: [{ task_id: "t1", goal: "book a table" }] });
    const recalled = await memjobs.recall({ ownerId, query: "tea", limit: 3 });
    const first: string | undefined = recalled.memories[0]?.source_ids[0];
    void first;
    return ended;
  } catch (error) {
    if (error instanceof MemjobsApiError && error.reason === "backend_unavailable") return undefined;
    throw error;
  }
}

// The memory tool: a turn's edits, and what a refusal looks like.
export async function correctMemory(memjobs: MemjobsClient, ownerId: string, turnId: string): Promise<number> {
  const { documents, provider } = await memjobs.memoryDocuments({ ownerId });
  const version: number = documents[0]?.version ?? 0;
  void provider?.protocolVersion;
  try {
    const applied = await memjobs.editMemory({ ownerId, context: { turn: turnId }, edits: [
      { op: "replace", doc: "MEMORY.md", old_text: "杭州", new_text: "上海" },
      { op: "append", doc: "USER.md", text: "- 叫我小林" },
    ] });
    return applied.changed + version;
  } catch (error) {
    if (error instanceof MemjobsApiError && (error.reason === "not_found" || error.reason === "ambiguous")) return 0;
    throw error;
  }
}

// The L0 blackboard: a session moved to another host restores its entries in event order.
export async function resumeSession(memjobs: MemjobsClient, ownerId: string, sessionId: string): Promise<string[]> {
  const board = new SessionBlackboard(memjobs);
  const queued: number = await board.append({ ownerId, sessionId, entries: [
    { entry_id: "e-1", seq: 1, at: new Date().toISOString(), trust: "runtime", priority: 1, result: "table booked", evidence: ["task:t-1"] },
  ] });
  const entries: BlackboardEntry[] = await board.restore({ ownerId, sessionId });
  return entries.slice(0, queued).map((e) => `${e.seq} ${e.trust}: ${e.result ?? ""}`);
}
