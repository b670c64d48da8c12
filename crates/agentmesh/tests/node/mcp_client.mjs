// Drives `agentmesh mcp` as a Node-based MCP host does: the official TypeScript
// SDK's stdio client spawns the server (Node hands a child Unix socketpairs for
// its stdin and stdout), lists the tools and runs one call. Every tool's input
// schema is compiled by ajv with its default options, once as draft-07 and once
// as draft 2020-12, and the call's arguments are validated against its schema;
// then the enqueued task's history is read back with ledger_tail and its taskId.
//
// Usage: node mcp_client.mjs <agentmesh binary> <data dir> [global option ...]
// The global options (such as --database-url URL) go before `mcp`.
// Prints one JSON report on stdout; the Rust test reads it.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020.js";

const [binary, dataDir, ...globals] = process.argv.slice(2);
if (!binary || !dataDir) {
  console.error("usage: node mcp_client.mjs <agentmesh binary> <data dir> [global option ...]");
  process.exit(2);
}

const transport = new StdioClientTransport({
  command: binary,
  args: ["--data-dir", dataDir, ...globals, "mcp"],
  stderr: "inherit",
});
const client = new Client({ name: "agentmesh-node-test", version: "0.0.0" });
await client.connect(transport);

const { tools } = await client.listTools();
const call = { name: "enqueue_task", arguments: { message: "written by the Node client", taskMode: "code_change" } };

const schemaErrors = [];
for (const [dialect, Validator] of [["draft-07", Ajv], ["2020-12", Ajv2020]]) {
  const ajv = new Validator();
  for (const tool of tools) {
    try {
      const validate = ajv.compile(tool.inputSchema);
      if (tool.name === call.name && !validate(call.arguments)) {
        schemaErrors.push(`${dialect} ${tool.name}: the call's arguments fail: ${ajv.errorsText(validate.errors)}`);
      }
    } catch (err) {
      schemaErrors.push(`${dialect} ${tool.name}: ${err.message}`);
    }
  }
}

const result = await client.callTool(call);
const history = { name: "ledger_tail", arguments: { taskId: result.structuredContent?.task?.id ?? "" } };
for (const [dialect, Validator] of [["draft-07", Ajv], ["2020-12", Ajv2020]]) {
  const ajv = new Validator();
  const validate = ajv.compile(tools.find((tool) => tool.name === history.name).inputSchema);
  if (!validate(history.arguments)) {
    schemaErrors.push(`${dialect} ${history.name}: the call's arguments fail: ${ajv.errorsText(validate.errors)}`);
  }
}
const taskHistory = await client.callTool(history);
await client.close();

process.stdout.write(
  JSON.stringify({
    server: client.getServerVersion(),
    tools: tools.map((tool) => tool.name),
    schemaErrors,
    result,
    taskHistory,
  }),
);
