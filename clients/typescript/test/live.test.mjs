// Against a real memjobs API: run by tests/http/test_http_typescript.py, which starts a server and sets
// MEMJOBS_API_URL, twice: an open one (what `memjobs up` serves on loopback: no token) and a tokened one
// (MEMJOBS_API_GATEWAY_TOKEN and MEMJOBS_API_HOST_TOKEN set). Skipped without MEMJOBS_API_URL.
//   open stack:    MEMJOBS_API_URL=$(memjobs url) node --test test/live.test.mjs
//   tokened stack: also MEMJOBS_API_GATEWAY_TOKEN=… MEMJOBS_API_HOST_TOKEN=… (the server's tokens)
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { MemjobsApiError, MemjobsClient } from "../src/index.js";
import { until } from "./polling.mjs";

const baseUrl = process.env.MEMJOBS_API_URL;
const skip = baseUrl ? false : "MEMJOBS_API_URL is unset (tests/http/test_http_typescript.py starts a server)";
// Tokens set: the server requires them (and refuses the gateway's token where the host's is needed).
const tokened = Boolean(process.env.MEMJOBS_API_GATEWAY_TOKEN && process.env.MEMJOBS_API_HOST_TOKEN);
const gateway = baseUrl && new MemjobsClient({ baseUrl, token: process.env.MEMJOBS_API_GATEWAY_TOKEN || undefined });
const host = baseUrl && new MemjobsClient({ baseUrl, token: process.env.MEMJOBS_API_HOST_TOKEN || undefined });
const ts = "2026-11-30T10:00:00Z";


test("remember, recall, memories, sources and forget", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const { source_id: sourceId, status } = await gateway.remember({ ownerId, text: "我每天早上喝绿茶", kind: "explicit" });
  assert.equal(status, "queued");
  assert.match(sourceId, /^src_[0-9a-f]{32}$/);
  await until(async () => (await gateway.sources({ ownerId })).sources.some((s) => s.state === "learned"), "learned");
  const recalled = await gateway.recall({ ownerId, query: "绿茶", limit: 3 });
  assert.deepEqual(recalled.memories.map((m) => m.source_ids), [[sourceId]]);
  assert.equal((await gateway.memories({ ownerId })).memories.length, 1);
  const shown = await gateway.sources({ ownerId, includeText: true });
  assert.equal(shown.sources[0].text, "我每天早上喝绿茶");
  assert.deepEqual(await gateway.forget({ ownerId, sourceId }), { source_id: sourceId, status: "forgotten", purge: "queued" });
  assert.deepEqual((await gateway.recall({ ownerId, query: "绿茶" })).memories, []);
  assert.deepEqual(await gateway.preferences({ ownerId }), { doc: "USER.md", version: 0, content: "" });
});

test("a gateway ends a session once, reports a task, and reads the sessions", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const transcript = [{ role: "user", text: "book a table for two", ts }, { role: "assistant", text: "done", ts }];
  const tasks = [{ task_id: "t-1", goal: "book a table" }];
  const [a, b] = await Promise.all([
    gateway.endSession({ ownerId, sessionId: "s/1 é", transcript, tasks }),
    gateway.endSession({ ownerId, sessionId: "s/1 é", transcript, tasks }),
  ]);
  assert.deepEqual([a.status, b.status].sort(), ["already_ended", "queued"]);
  assert.equal(a.session_id, "s/1 é");
  assert.deepEqual(await gateway.putTask({ ownerId, taskId: "t-1", goal: "book a table", status: "succeeded" }),
    { task_id: "t-1", status: "queued" });
  const listed = await gateway.sessions({ ownerId, days: 7 });
  assert.ok(Array.isArray(listed.sessions) && listed.truncated === false);
});

test("knowledge: reindex needs the host token and consent; search finds the document", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const documents = [{ doc_id: "tea", title: "Tea notes", text: "Oolong tea is half oxidised." }];
  if (tokened) {
    await assert.rejects(gateway.reindexKnowledge({ ownerId, consent: true, documents }),
      (e) => e instanceof MemjobsApiError && e.status === 403 && e.reason === "forbidden");
  }
  await assert.rejects(host.reindexKnowledge({ ownerId, consent: false, documents }), (e) => e.reason === "consent_required");
  assert.deepEqual(await host.reindexKnowledge({ ownerId, consent: true, documents }), { documents: 1, status: "queued" });
  const found = await until(async () => {
    const r = await gateway.searchKnowledge({ ownerId, query: "oolong", k: 2 });
    return r.results.length ? r : undefined;
  }, "indexed");
  assert.equal(found.results[0].title, "Tea notes");
  assert.equal(found.results[0].trust, "untrusted_external");
});

test("refusals carry their problem type", { skip }, async () => {
  await assert.rejects(gateway.remember({ ownerId: "x", text: "my password is hunter2!" }),
    (e) => e.status === 422 && e.reason === "sensitive_content" && e.type === "urn:memjobs:problem:sensitive_content" && !e.message.includes("hunter2"));
  await assert.rejects(gateway.remember({ ownerId: "x", text: "" }), (e) => e.reason === "validation");
  const anonymous = new MemjobsClient({ baseUrl });
  if (tokened) {
    await assert.rejects(anonymous.remember({ ownerId: "x", text: "hi" }), (e) => e.status === 401 && e.reason === "unauthorized");
  } else {  // open (loopback, no tokens): no token needed, none refused
    assert.equal((await anonymous.remember({ ownerId: `ts-${randomUUID()}`, text: "hi" })).status, "queued");
  }
  await assert.rejects(gateway.sources({ ownerId: "" }), (e) => e.status === 422 && e.reason === "validation");
  assert.deepEqual(await anonymous.health(), { status: "ok" });
  assert.deepEqual(await anonymous.ready(),
    { status: "ready", redis: "ok", state_store: "ok", models: { chat: "closed", embed: "closed" } });
});
