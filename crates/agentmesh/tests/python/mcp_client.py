"""Drives agentmesh's MCP server with the official Python MCP SDK's client.

Two transports, as a Python host would connect:

    python mcp_client.py stdio <agentmesh binary> <data dir> [global option ...]
        spawns `agentmesh --data-dir DIR [global option ...] mcp` with the SDK's
        stdio client (the global options, such as --database-url URL, go before
        `mcp`);
    python mcp_client.py http <MCP endpoint URL>
        connects with the SDK's streamable HTTP client, sending the bearer token
        from $AGENTMESH_TOKEN.

Either way the client initializes the session, lists every tool (following the
cursor), checks that each tool's input schema is a JSON Schema object that both
draft-07 and draft 2020-12 accept, enqueues one task with `enqueue_task` (its
arguments validated against the tool's schema first) and reads it back with
`show_task`. The SDK itself checks each structured result against the tool's
output schema, when the tool declares one.

Prints one JSON report on stdout, which the Rust test reads; a failure at the
protocol level raises, so the process exits non-zero with a traceback.
"""

import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager

import httpx2
from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import SchemaError

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

MESSAGE = "written by the Python client"
# How long one request may go unanswered before the SDK gives up on it; the Rust
# test waits longer, so a silent server fails with the SDK's error.
REQUEST_TIMEOUT_SECONDS = 60
USAGE = (
    "usage: mcp_client.py stdio <agentmesh binary> <data dir> [global option ...]\n"
    "       mcp_client.py http <MCP endpoint URL>   (bearer token in $AGENTMESH_TOKEN)"
)


def fail_usage(why):
    print(f"mcp_client.py: {why}\n{USAGE}", file=sys.stderr)
    sys.exit(2)


@asynccontextmanager
async def stdio_streams(binary, data_dir, globals_):
    server = StdioServerParameters(command=binary, args=["--data-dir", data_dir, *globals_, "mcp"])
    # The server's log lines go to this process's stderr, which the test keeps.
    async with stdio_client(server, errlog=sys.stderr) as streams:
        yield streams


@asynccontextmanager
async def http_streams(url):
    token = os.environ.get("AGENTMESH_TOKEN")
    if not token:
        fail_usage("$AGENTMESH_TOKEN is not set")
    # trust_env=False: the daemon is on loopback, and no proxy from the
    # environment may stand in between.
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30, read=REQUEST_TIMEOUT_SECONDS),
        trust_env=False,
    )
    async with http, streamable_http_client(url, http_client=http) as streams:
        yield streams


def schema_errors(tools, call):
    """Every way a tool's input schema falls short, as lines of text."""
    errors = []
    for tool in tools:
        schema = tool.input_schema
        if not isinstance(schema, dict) or schema.get("type") != "object":
            errors.append(f"{tool.name}: the input schema is not a JSON Schema object: {schema!r}")
            continue
        for dialect, validator in (("draft-07", Draft7Validator), ("2020-12", Draft202012Validator)):
            try:
                validator.check_schema(schema)
            except SchemaError as err:
                errors.append(f"{dialect} {tool.name}: {err.message}")
                continue
            if tool.name == call["name"]:
                for err in validator(schema).iter_errors(call["arguments"]):
                    errors.append(f"{dialect} {tool.name}: the call's arguments fail: {err.message}")
    return errors


def dump(model):
    """A result of the SDK as the wire has it (camelCase keys, nothing unset)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(streams):
    read_stream, write_stream = streams
    async with ClientSession(read_stream, write_stream, read_timeout_seconds=REQUEST_TIMEOUT_SECONDS) as session:
        initialized = await session.initialize()

        tools, cursor = [], None
        while True:
            params = None if cursor is None else {"cursor": cursor}
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break

        call = {"name": "enqueue_task", "arguments": {"message": MESSAGE, "taskMode": "code_change"}}
        errors = schema_errors(tools, call)
        enqueued = await session.call_tool(call["name"], call["arguments"])
        task_id = (enqueued.structured_content or {}).get("task", {}).get("id")
        shown = None
        if not enqueued.is_error and isinstance(task_id, str):
            shown = dump(await session.call_tool("show_task", {"taskId": task_id}))

    return {
        "protocolVersion": initialized.protocol_version,
        "server": dump(initialized.server_info),
        "tools": [tool.name for tool in tools],
        "schemaErrors": errors,
        "enqueued": dump(enqueued),
        "shown": shown,
    }


def main(argv):
    if len(argv) < 2:
        fail_usage("no transport named")
    transport, rest = argv[1], argv[2:]
    if transport == "stdio" and len(rest) >= 2:
        streams = stdio_streams(rest[0], rest[1], rest[2:])
    elif transport == "http" and len(rest) == 1:
        streams = http_streams(rest[0])
    else:
        fail_usage(f"bad arguments: {argv[1:]!r}")

    async def session():
        async with streams as pair:
            return await run(pair)

    report = asyncio.run(session())
    sys.stdout.write(json.dumps(report))
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
