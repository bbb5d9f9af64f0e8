// Declarations of src/tools.js: the model's memory tools and their dispatcher.
import type { MemjobsClient } from "./index.js";
import type { ChangeContext, MemjobsMemoryProvider } from "./provider.js";

export interface ToolDefinition {
  type: "function";
  name: string;
  description: string;
  parameters: { type: "object"; properties: Record<string, Record<string, unknown>>; required?: string[]; additionalProperties: false };
}
export declare const MEMORY_TOOL: ToolDefinition;
export declare const RECALL_TOOL: ToolDefinition;
export declare const MEMORY_RECALL_TOOL: ToolDefinition;
export declare const MEMORY_TOOLS: readonly ToolDefinition[];
export declare const USER_DATA_NOTICE: string;
export type ToolErrorCode = "invalid_arguments" | "not_found" | "ambiguous" | "forbidden_document" | "sensitive_content" | "unavailable";
export declare const TOOL_ERRORS: readonly ToolErrorCode[];

export interface ToolFailure { ok: false; error: ToolErrorCode; message: string; cause?: string }
/** A success: the tool's fields, and the label of the user's data (`trust: "user_data"`, `notice`). */
export interface ToolSuccess { ok: true; trust?: "user_data"; notice?: string; [field: string]: unknown }
export type ToolResult = ToolSuccess | ToolFailure;

export declare function checkArguments(name: string, args: unknown):
  { ok: true; value: Record<string, unknown> } | { ok: false; error: "invalid_arguments"; message: string };
export declare function toolError(error: unknown): ToolFailure;

export declare class MemoryToolDispatcher {
  constructor(options: { client?: MemjobsClient; provider?: MemjobsMemoryProvider; source?: string });
  readonly definitions: readonly ToolDefinition[];
  /** One tool call for the gateway's owner; a refusal is a ToolFailure, never a throw. */
  dispatch(name: string, args: unknown, call: { ownerId: string; context?: ChangeContext }): Promise<ToolResult>;
}
