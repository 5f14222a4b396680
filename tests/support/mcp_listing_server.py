"""An MCP server over stdio whose tool listing is hostile, written as raw JSON-RPC lines.

Its mode (the first argument) says how; every mode also lists ``lookup``, an ordinary tool
that answers ``found <x>``:

* ``exp``: ``doubling`` has a 1 kB input schema whose ``$defs`` each refer twice to the next
  (2^18 checks for one string);
* ``many``: ``t0`` .. ``t<N-1>`` as well (N: the second argument);
* ``endless``: ``t0``, ``t1``... N a page (the second argument), each page with a cursor to
  another: a listing that never ends;
* ``malformed``: ``noschema`` has no input schema and ``arrschema`` an array's, which the
  protocol refuses, and ``noname`` has no name.
"""

from __future__ import annotations

import json
import sys

MODE = sys.argv[1]
SIMPLE = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
LOOKUP = {"name": "lookup", "description": "Look a word up.", "inputSchema": SIMPLE}


def doubling(levels: int) -> dict:
    defs: dict = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


if MODE == "exp":
    TOOLS = [{"name": "doubling", "description": "Look up.", "inputSchema": doubling(18)}, LOOKUP]
elif MODE == "many":
    TOOLS = [LOOKUP] + [
        {"name": f"t{i}", "description": "A tool.", "inputSchema": SIMPLE}
        for i in range(int(sys.argv[2]))
    ]
elif MODE == "endless":
    TOOLS = [LOOKUP]
    PER_PAGE = int(sys.argv[2])
elif MODE == "malformed":
    TOOLS = [
        {"name": "noschema", "description": "No schema."},
        LOOKUP,
        {"name": "arrschema", "description": "An array.", "inputSchema": {"type": "array"}},
        {"description": "No name.", "inputSchema": SIMPLE},
    ]
else:
    raise SystemExit(f"no mode {MODE!r}")


def answer(message: dict) -> dict | None:
    method, params = message.get("method"), message.get("params") or {}
    if "id" not in message:
        return None  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "listing", "version": "1"},
        }
    elif method == "tools/list" and MODE == "endless":
        page = int(params.get("cursor") or 0)
        tools = [
            {"name": f"t{page * PER_PAGE + i}", "description": "A tool.", "inputSchema": SIMPLE}
            for i in range(PER_PAGE)
        ]
        result = {"tools": TOOLS + tools if page == 0 else tools, "nextCursor": str(page + 1)}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        text = f"found {params['arguments'].get('x')}"
        result = {"content": [{"type": "text", "text": text}]}
    else:
        error = {"code": -32601, "message": f"no method {method}"}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


for line in sys.stdin:
    reply = answer(json.loads(line))
    if reply is not None:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
