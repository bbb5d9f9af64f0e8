// The types are generated from the committed OpenAPI document, and every /v1 route has a method.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { render } from "../scripts/gen-types.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const document = JSON.parse(readFileSync(join(root, "..", "..", "docs", "openapi.json"), "utf8"));

test("src/schema.d.ts is what docs/openapi.json generates", () => {
  assert.equal(readFileSync(join(root, "src", "schema.d.ts"), "utf8"), render(document),
    "stale: run node scripts/gen-types.mjs");
});

test("every route of the document is called by the client (src/*.js)", () => {
  const source = readdirSync(join(root, "src")).filter((name) => name.endsWith(".js"))
    .map((name) => readFileSync(join(root, "src", name), "utf8")).join("\n");
  for (const [path, methods] of Object.entries(document.paths)) {
    if (path === "/metrics") continue;  // Prometheus scrapes it, not a gateway
    const literal = path.replace(/\{(\w+)\}/g, (_, name) => `\${encodeURIComponent(${{ session_id: "sessionId", letter_id: "letterId", doc: "doc" }[name] ?? "taskId"})}`);
    for (const method of Object.keys(methods)) {
      const call = new RegExp(`"${method.toUpperCase()}", [\`"]${literal.replace(/[$.{}()]/g, "\\$&")}[\`"]`);
      assert.match(source, call, `${method.toUpperCase()} ${path}`);
    }
  }
});

test("every request body type's fields are the document's", () => {
  const declarations = readFileSync(join(root, "src", "index.d.ts"), "utf8");
  for (const name of ["RememberAccepted", "ForgetAccepted", "Memories", "Preferences", "SessionEndAccepted",
    "Sessions", "TaskAccepted", "ReindexAccepted", "KnowledgeResults", "Sources", "Health", "Ready"]) {
    assert.ok(document.components.schemas[name], name);
    assert.match(declarations, new RegExp(`Promise<${name}>`), name);
  }
});
