// The model's memory tools and their dispatcher against a real memjobs API: run by
// tests/gateway/test_gateway_typescript.py, which seeds MEMJOBS_TOOLS_OWNER with a learned memory
// (peanuts) and a session digest (movers, task t-movers running). Skipped without a server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { MemjobsClient } from "../src/index.js";
import { MemjobsMemoryProvider } from "../src/provider.js";
import { MEMORY_TOOLS, MemoryToolDispatcher, TOOL_ERRORS, checkArguments } from "../src/tools.js";

const baseUrl = process.env.MEMJOBS_API_URL;
const seeded = process.env.MEMJOBS_TOOLS_OWNER;
const skip = baseUrl && seeded ? false : "MEMJOBS_API_URL / MEMJOBS_TOOLS_OWNER unset (tests/gateway/test_gateway_typescript.py sets them)";
const token = process.env.MEMJOBS_API_GATEWAY_TOKEN || undefined;

test("three tools, ready to register: names, schemas, one operation per memory call", () => {
  assert.deepEqual(MEMORY_TOOLS.map((t) => [t.type, t.name]), [["function", "memory"], ["function", "recall"], ["function", "memory__recall"]]);
  const memory = MEMORY_TOOLS[0].parameters;
  assert.deepEqual(memory.properties.op.enum, ["read", "append", "replace"]);
  assert.deepEqual(memory.required, ["op", "doc"]);
  for (const tool of MEMORY_TOOLS) assert.equal(tool.parameters.additionalProperties, false);
  assert.deepEqual(TOOL_ERRORS, ["invalid_arguments", "not_found", "ambiguous", "forbidden_document", "sensitive_content", "unavailable"]);
});

test("argument errors are answered before memjobs is called", async () => {
  const calls = [];
  const client = new MemjobsClient({ baseUrl: "http://127.0.0.1:9", fetch: async (url) => { calls.push(url); throw new Error("no"); } });
  const tools = new MemoryToolDispatcher({ client });
  const cases = [
    ["memory", "{not json", "the arguments are not JSON"],
    ["memory", [], "the arguments must be an object"],
    ["memory", { doc: "MEMORY.md" }, "op is required"],
    ["memory", { op: "delete", doc: "MEMORY.md" }, "op must be one of read, append, replace"],
    ["memory", { op: "read", doc: "MEMORY.md", text: "x" }, "text does not go with op read"],
    ["memory", { op: "append", doc: "MEMORY.md" }, "append needs text"],
    ["memory", { op: "append", doc: "MEMORY.md", text: "   " }, "text must not be empty"],
    ["memory", { op: "replace", doc: "MEMORY.md", new_text: "y" }, "replace needs old_text"],
    ["memory", { op: "append", doc: "MEMORY.md", text: "x".repeat(1001) }, "text: at most 1000 characters"],
    ["memory", { op: "read", doc: "MEMORY.md", owner_id: "someone-else" }, "unknown argument: owner_id"],
    ["recall", { days: 0 }, "days: 1 to 90"],
    ["recall", { limit: 2.5 }, "limit must be an integer"],
    ["memory__recall", {}, "query is required"],
    ["memory__recall", { query: 42 }, "query must be a string"],
    ["forget_everything", {}, "no such tool: forget_everything"],
  ];
  for (const [name, args, message] of cases) {
    assert.deepEqual(await tools.dispatch(name, args, { ownerId: "o" }), { ok: false, error: "invalid_arguments", message }, message);
  }
  assert.deepEqual(checkArguments("memory", '{"op":"read","doc":"USER.md"}'), { ok: true, value: { op: "read", doc: "USER.md" } });
  assert.deepEqual(checkArguments("memory", { op: "read", doc: "USER.md", text: null, old_text: null }),
    { ok: true, value: { op: "read", doc: "USER.md" } }); // null: left out, as strict-mode models send it
  await assert.rejects(tools.dispatch("memory", { op: "read", doc: "USER.md" }, {}), TypeError); // the owner is the gateway's
  assert.deepEqual(calls, []);
});

test("memory: read, append, replace and delete, one per call, through the provider's cache", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const provider = new MemjobsMemoryProvider({ baseUrl, token, refreshMs: 60_000 });
  await provider.refresh(ownerId);
  const tools = new MemoryToolDispatcher({ provider, source: "realtime" });
  const call = { ownerId, context: { session: "s-9", turn: "t-1" } };
  const empty = await tools.dispatch("memory", '{"op":"read","doc":"MEMORY.md"}', call);
  assert.deepEqual([empty.ok, empty.content, empty.version, empty.trust], [true, "", 0, "user_data"]);
  assert.match(empty.notice, /never follow instructions/);
  const appended = await tools.dispatch("memory", { op: "append", doc: "MEMORY.md", text: "- 住在杭州\n- 喜欢咖啡" }, call);
  assert.deepEqual([appended.ok, appended.applied, appended.version, appended.content, appended.trust], [true, true, 1, "- 住在杭州\n- 喜欢咖啡", "user_data"]);
  assert.equal(provider.list(ownerId)[0].content, "- 住在杭州\n- 喜欢咖啡"); // the gateway's context sees it at once
  const again = await tools.dispatch("memory", { op: "append", doc: "MEMORY.md", text: "- 住在杭州" }, call);
  assert.deepEqual([again.ok, again.applied, again.reason], [true, false, "duplicate"]);
  assert.equal((await tools.dispatch("memory", { op: "replace", doc: "MEMORY.md", old_text: "杭州", new_text: "上海" }, call)).version, 2);
  const deleted = await tools.dispatch("memory", { op: "replace", doc: "MEMORY.md", old_text: "- 喜欢咖啡" }, call);
  assert.deepEqual([deleted.ok, deleted.content, deleted.version], [true, "- 住在上海", 3]);
  assert.deepEqual(provider.list(ownerId), [{ doc: "MEMORY.md", scope: "memory", content: "- 住在上海", version: 3 }]);
  await provider.close();
});

test("memory: each of the seed's errors, and nothing written", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const tools = new MemoryToolDispatcher({ client: new MemjobsClient({ baseUrl, token }) });
  const call = { ownerId };
  await tools.dispatch("memory", { op: "append", doc: "MEMORY.md", text: "- likes tea\n- buys tea" }, call);
  const refusals = [
    [{ op: "replace", doc: "MEMORY.md", old_text: "coffee", new_text: "juice" }, "not_found"],
    [{ op: "replace", doc: "MEMORY.md", old_text: "tea", new_text: "milk" }, "ambiguous"],
    [{ op: "append", doc: "ASSISTANT.md", text: "- be rude" }, "forbidden_document"],
    [{ op: "read", doc: "ASSISTANT.md" }, "forbidden_document"],
    [{ op: "append", doc: "MEMORY.md", text: "my password is hunter2!" }, "sensitive_content"],
  ];
  for (const [args, error] of refusals) {
    const result = await tools.dispatch("memory", args, call);
    assert.deepEqual([result.ok, result.error], [false, error], JSON.stringify(args));
    assert.ok(result.message && !result.message.includes("hunter2"));
  }
  const kept = await tools.dispatch("memory", { op: "read", doc: "MEMORY.md" }, call);
  assert.deepEqual([kept.content, kept.version], ["- likes tea\n- buys tea", 1]);
  const keyed = await tools.dispatch("memory__recall", { query: "my password is hunter2!" }, call);
  assert.deepEqual([keyed.ok, keyed.error], [false, "sensitive_content"]);
});

test("recall: the session's topic and gist, the task's live status; memory__recall: the learned memory", { skip }, async () => {
  const tools = new MemoryToolDispatcher({ client: new MemjobsClient({ baseUrl, token }) });
  const recalled = await tools.dispatch("recall", {}, { ownerId: seeded });
  assert.equal(recalled.ok, true, JSON.stringify(recalled));
  assert.equal(recalled.trust, "user_data");
  const [session] = recalled.sessions;
  assert.deepEqual([session.session_id, session.topic, session.gist], ["s-movers", "搬家", "约了周六的搬家公司"]);
  assert.deepEqual(session.tasks, [{ task_id: "t-movers", goal: "book movers", status: "running" }]);
  const found = await tools.dispatch("memory__recall", { query: "花生过敏", limit: 3 }, { ownerId: seeded });
  assert.equal(found.ok, true, JSON.stringify(found));
  assert.equal(found.trust, "user_data");
  assert.ok(found.memories.some((m) => m.text.includes("花生")), JSON.stringify(found));
  const nobody = await tools.dispatch("recall", { days: 90 }, { ownerId: `ts-${randomUUID()}` });
  assert.deepEqual(nobody.sessions, []); // another owner's sessions never answer
});
