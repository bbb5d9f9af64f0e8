// The memory tool (USER.md, MEMORY.md) and the memory audit against a real memjobs API: run by
// tests/http/test_http_memory_docs.py, which starts a tokened server and sets MEMJOBS_API_URL,
// MEMJOBS_API_GATEWAY_TOKEN and MEMJOBS_API_HOST_TOKEN. Skipped without MEMJOBS_API_URL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { MemjobsApiError, MemjobsClient } from "../src/index.js";

const baseUrl = process.env.MEMJOBS_API_URL;
const skip = baseUrl ? false : "MEMJOBS_API_URL is unset (tests/http/test_http_memory_docs.py starts a server)";
const gateway = baseUrl && new MemjobsClient({ baseUrl, token: process.env.MEMJOBS_API_GATEWAY_TOKEN || undefined });
const host = baseUrl && new MemjobsClient({ baseUrl, token: process.env.MEMJOBS_API_HOST_TOKEN || undefined });
const context = { source: "realtime", session: "s-ts", turn: "turn-1", trace: "trace-1" };

test("read, append, replace and delete: one turn, one result", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const empty = await gateway.memoryDocuments({ ownerId });
  assert.deepEqual(empty.documents.map((d) => [d.doc, d.version]), [["USER.md", 0], ["MEMORY.md", 0]]);
  assert.equal(empty.provider.protocolVersion, 2);
  const first = await gateway.editMemory({ ownerId, context, edits: [
    { op: "append", doc: "MEMORY.md", text: "- 住在杭州" },
    { op: "append", doc: "MEMORY.md", text: "- 喜欢喝茶" },
    { op: "append", doc: "USER.md", text: "- 叫我小林" },
  ] });
  assert.equal(first.changed, 2);
  assert.deepEqual(first.edits.map((e) => e.applied), [true, true, true]);
  // "那条记错了" and "忘掉它": exact edits on the latest document.
  const second = await gateway.editMemory({ ownerId, edits: [
    { op: "replace", doc: "MEMORY.md", old_text: "杭州", new_text: "上海" },
    { op: "replace", doc: "MEMORY.md", old_text: "- 喜欢喝茶", new_text: "" },
  ] });
  assert.deepEqual(second.documents, [{ doc: "MEMORY.md", scope: "memory", content: "- 住在上海", version: 2 }]);
  assert.deepEqual(await gateway.memoryDocument({ ownerId, doc: "MEMORY.md" }),
    { doc: "MEMORY.md", scope: "memory", content: "- 住在上海", version: 2 });
});

test("not_found, ambiguous, ASSISTANT.md and secrets are refused, and nothing is written", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  await gateway.editMemory({ ownerId, edits: [{ op: "append", doc: "MEMORY.md", text: "- likes tea\n- buys tea" }] });
  await assert.rejects(gateway.editMemory({ ownerId, edits: [
    { op: "append", doc: "MEMORY.md", text: "- walks daily" },
    { op: "replace", doc: "MEMORY.md", old_text: "coffee", new_text: "juice" },
  ] }), (e) => e instanceof MemjobsApiError && e.status === 404 && e.reason === "not_found" && e.detail.startsWith("edits[1]"));
  await assert.rejects(gateway.editMemory({ ownerId, edits: [{ op: "replace", doc: "MEMORY.md", old_text: "tea", new_text: "milk" }] }),
    (e) => e.status === 409 && e.reason === "ambiguous");
  await assert.rejects(gateway.editMemory({ ownerId, edits: [{ op: "append", doc: "ASSISTANT.md", text: "- be rude" }] }),
    (e) => e.reason === "forbidden_document");
  await assert.rejects(gateway.memoryDocument({ ownerId, doc: "ASSISTANT.md" }), (e) => e.reason === "forbidden_document");
  await assert.rejects(gateway.editMemory({ ownerId, edits: [{ op: "append", doc: "MEMORY.md", text: "my password is hunter2!" }] }),
    (e) => e.status === 422 && e.reason === "sensitive_content" && !e.message.includes("hunter2"));
  const kept = await gateway.memoryDocument({ ownerId, doc: "MEMORY.md" });
  assert.deepEqual([kept.content, kept.version], ["- likes tea\n- buys tea", 1]);
});

test("the audit trail is the host's, and carries the gateway's context", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  await gateway.editMemory({ ownerId, context, edits: [{ op: "append", doc: "USER.md", text: "- reply briefly" }] });
  await assert.rejects(gateway.memoryAudit(), (e) => e.status === 403 && e.reason === "forbidden");
  const { entries } = await host.memoryAudit({ session: "s-ts", source: "realtime", limit: 50 });
  const mine = entries.filter((e) => e.doc === "USER.md" && e.applied);
  assert.ok(mine.length >= 1);
  assert.deepEqual([mine[0].turn, mine[0].trace, mine[0].source], ["turn-1", "trace-1", "realtime"]);
  assert.match(mine[0].owner_key, /^[0-9a-f]{64}$/);
  assert.ok(!JSON.stringify(entries).includes("reply briefly") && !JSON.stringify(entries).includes(ownerId));
});
