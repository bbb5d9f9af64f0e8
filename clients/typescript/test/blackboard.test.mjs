// The L0 blackboard against a real memjobs API (and its worker): run by
// tests/http/test_http_blackboard.py, which sets MEMJOBS_API_URL and MEMJOBS_API_GATEWAY_TOKEN.
// Skipped without MEMJOBS_API_URL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { MemjobsApiError, MemjobsClient, SessionBlackboard } from "../src/index.js";
import { until } from "./polling.mjs";

const baseUrl = process.env.MEMJOBS_API_URL;
const skip = baseUrl ? false : "MEMJOBS_API_URL is unset (tests/http/test_http_blackboard.py starts a server)";
const client = () => new MemjobsClient({ baseUrl, token: process.env.MEMJOBS_API_GATEWAY_TOKEN || undefined });
const entry = (seq) => ({ entry_id: `e-${seq}`, seq, at: new Date().toISOString(), trust: "runtime",
  priority: seq % 3, result: `step ${seq}`, evidence: [`turn:${seq}`] });


test("entries appended by one client are restored by another, in event order, once", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const sessionId = "s-ts-board";
  const here = new SessionBlackboard(client());
  assert.equal(await here.append({ ownerId, sessionId, entries: [entry(3), entry(1)] }), 2);
  assert.equal(await here.append({ ownerId, sessionId, entries: [entry(2), entry(1)] }), 2);  // e-1 again
  const there = new SessionBlackboard(client());  // another gateway (another host, in production)
  const restored = await until(async () => {
    const entries = await there.restore({ ownerId, sessionId });
    return entries.length === 3 && entries;
  }, "three entries", 60_000);
  assert.deepEqual(restored.map((e) => [e.seq, e.entry_id, e.result]),
    [[1, "e-1", "step 1"], [2, "e-2", "step 2"], [3, "e-3", "step 3"]]);
  assert.deepEqual(await there.restore({ ownerId: `${ownerId}-other`, sessionId }), []);
});

test("a secret in an entry rejects the append, without echoing it", { skip }, async () => {
  const board = new SessionBlackboard(client());
  await assert.rejects(board.append({ ownerId: `ts-${randomUUID()}`, sessionId: "s-ts-secret",
    entries: [{ ...entry(1), result: "my password is hunter2!" }] }),
  (e) => e instanceof MemjobsApiError && e.status === 422 && e.reason === "sensitive_content"
    && !JSON.stringify(e.problem).includes("hunter2"));
});
