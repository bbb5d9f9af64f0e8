// Injecting memjobs into a seed-style gateway: its MemoryProvider, and its model's memory tools.
// Type-checked by `tsc -p .` against the declarations; `createGatewayApplication` stands for the
// gateway's own composition root (declared here so that the example compiles on its own).
import { MEMORY_PROVIDER_PROTOCOL_VERSION, MemjobsMemoryProvider, type MemoryProvider } from "@memjobs/client/memory-provider";
import { MEMORY_TOOLS, MemoryToolDispatcher, type ToolResult } from "@memjobs/client/tools";

declare const process: { env: Record<string, string | undefined> };
declare function createGatewayApplication(options: { memoryProvider: MemoryProvider }): {
  registerTools(tools: readonly object[], handler: (name: string, args: string, call: { ownerId: string; sessionId: string; turnId: string }) => Promise<string>): void;
};

const memoryProvider = new MemjobsMemoryProvider({
  baseUrl: process.env.MEMJOBS_API_URL ?? "http://127.0.0.1:8780",
  token: process.env.MEMJOBS_API_GATEWAY_TOKEN,
  key: "memjobs",
  label: "memjobs memory",
});
if (memoryProvider.describe().protocolVersion !== MEMORY_PROVIDER_PROTOCOL_VERSION) throw new Error("protocol mismatch");

const gateway = createGatewayApplication({ memoryProvider });
const tools = new MemoryToolDispatcher({ provider: memoryProvider, source: "realtime" });

// The model's tools: registered as they are; each call answers JSON for the model.
gateway.registerTools(MEMORY_TOOLS, async (name, args, call) => {
  const result: ToolResult = await tools.dispatch(name, args, {
    ownerId: call.ownerId, context: { session: call.sessionId, turn: call.turnId },
  });
  return JSON.stringify(result);
});

// At session start, warm the cache so that the first turn's list() has the documents.
export async function onSessionStart(ownerId: string): Promise<number> {
  await memoryProvider.refresh(ownerId);
  return memoryProvider.list(ownerId, { maxChars: 4000 }).length;
}

export async function onShutdown(): Promise<void> {
  await memoryProvider.close();
}
