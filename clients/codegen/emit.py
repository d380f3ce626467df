"""Writes both clients' operation methods from the server's OpenAPI document.

The request and answer types come from the pinned generators
(datamodel-code-generator for Python, openapi-typescript for TypeScript);
this script adds what they do not make: one method per operation, named by
its operationId, with its path parameters, query parameters or body, its
answer type and how it authenticates. It reads only the document, so a new
operation on the server becomes a new method when the clients are
regenerated.

Usage: emit.py OPENAPI_JSON PYTHON_MODELS PYTHON_OUT TYPESCRIPT_OUT
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

REF = "#/components/schemas/"

# Operations for a browser's session (the board's and the operator page's
# HTML, form posts and cookies) are not part of a programmatic client: an
# operation is one when it takes a key or the operator token, or is one of
# the service's public ones (health, this document).
SKIPPED_TAGS = {"board"}


@dataclass
class Parameter:
    name: str
    schema: Dict[str, Any]
    required: bool
    description: str


@dataclass
class Operation:
    operation_id: str
    method: str
    path: str
    summary: str
    auth: str  # "key", "operator" or "none"
    path_params: List[str]
    query: List[Parameter]
    body: Optional[Dict[str, Any]]
    body_required: bool
    answers: List[Dict[str, Any]]  # JSON schemas of the 2xx answers
    answer_kind: str  # "json", "text" or "empty"


def load_operations(document: Dict[str, Any]) -> List[Operation]:
    operations = []
    for path, item in document["paths"].items():
        for method, raw in item.items():
            operation = parse_operation(path, method, raw)
            if operation is not None:
                operations.append(operation)
    return operations


def parse_operation(path: str, method: str, raw: Dict[str, Any]) -> Optional[Operation]:
    if SKIPPED_TAGS.intersection(raw.get("tags", [])):
        return None
    schemes = {name for requirement in raw.get("security", []) for name in requirement}
    if "ApiKey" in schemes:
        auth = "key"
    elif "OperatorToken" in schemes:
        auth = "operator"
    elif not schemes and "service" in raw.get("tags", []):
        auth = "none"
    else:
        return None
    body = None
    body_required = False
    request = raw.get("requestBody")
    if request is not None:
        content = request.get("content", {})
        if "application/json" not in content:
            # A form post (the operator page's sign-in) is a browser's.
            return None
        body = content["application/json"]["schema"]
        body_required = bool(request.get("required", False))
    answers: List[Dict[str, Any]] = []
    kinds = set()
    for status, response in raw["responses"].items():
        if not status.startswith("2"):
            continue
        content = response.get("content", {})
        if "application/json" in content:
            kinds.add("json")
            schema = content["application/json"]["schema"]
            if schema not in answers:
                answers.append(schema)
        elif "text/plain" in content or "application/x-ndjson" in content:
            kinds.add("text")
        elif "text/html" in content:
            return None
        elif "text/event-stream" in content:
            # A stream that never ends is read with an SSE client (docs/guide/watching.md).
            return None
        else:
            kinds.add("empty")
    if len(kinds) != 1:
        raise SystemExit(f"{raw['operationId']}: answers of several kinds {sorted(kinds)}")
    parameters = raw.get("parameters", [])
    return Operation(
        operation_id=raw["operationId"],
        method=method.upper(),
        path=path,
        summary=raw.get("summary", ""),
        auth=auth,
        path_params=[p["name"] for p in parameters if p["in"] == "path"],
        query=[
            Parameter(p["name"], p["schema"], bool(p.get("required")), p.get("description", ""))
            for p in parameters
            if p["in"] == "query"
        ],
        body=body,
        body_required=body_required,
        answers=answers,
        answer_kind=kinds.pop(),
    )


# ---------------------------------------------------------------- Python


def python_names(models_source: str) -> set:
    classes = re.findall(r"^class (\w+)\(", models_source, re.M)
    aliases = re.findall(r"^(\w+): TypeAlias", models_source, re.M)
    return set(classes) | set(aliases)


def python_type(schema: Dict[str, Any], names: set) -> str:
    if "$ref" in schema:
        name = schema["$ref"][len(REF):]
        if name not in names:
            raise SystemExit(f"the Python models have no type named {name}")
        return f"models.{name}"
    kind = schema.get("type")
    if kind == "array":
        return f"List[{python_type(schema['items'], names)}]"
    if kind == "object":
        return "Dict[str, Any]"
    if kind == "string":
        return "str"
    if kind == "integer":
        return "int"
    if kind == "boolean":
        return "bool"
    if kind == "number":
        return "float"
    raise SystemExit(f"no Python type for the schema {json.dumps(schema)}")


def python_answer(operation: Operation, names: set) -> str:
    if operation.answer_kind == "empty":
        return "None"
    if operation.answer_kind == "text":
        return "str"
    types = [python_type(s, names) for s in operation.answers]
    return types[0] if len(types) == 1 else f"Union[{', '.join(types)}]"


def python_signature(operation: Operation, names: set) -> tuple:
    """The parameters after `self` and the call's keyword arguments."""
    params = [f"{name}: str" for name in operation.path_params]
    call = [f"path=({''.join(p + ', ' for p in operation.path_params)})"]
    if operation.body is not None:
        body_type = python_type(operation.body, names)
        if operation.body_required:
            params.append(f"body: {body_type}")
        else:
            params.append(f"body: Optional[{body_type}] = None")
        call.append("body=body")
    if operation.query:
        params.append("*")
        for parameter in operation.query:
            params.append(f"{parameter.name}: Optional[{python_type(parameter.schema, names)}] = None")
        pairs = ", ".join(f'"{p.name}": {p.name}' for p in operation.query)
        call.append(f"query={{{pairs}}}")
    return params, call


def emit_python(operations: List[Operation], names: set) -> str:
    out = [
        "# Generated by clients/codegen/emit.py from the server's OpenAPI document:",
        "# do not edit; run clients/generate.sh.",
        '"""One method per operation of the API, for the sync and the async client."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union, cast",
        "",
        "from ._transport import AsyncTransport, Operation, SyncTransport",
        "",
        "if TYPE_CHECKING:",
        "    from . import models",
        "",
        "OPERATIONS: Dict[str, Operation] = {",
    ]
    for op in operations:
        out.append(
            f'    "{op.operation_id}": Operation("{op.operation_id}", "{op.method}", "{op.path}", '
            f'auth="{op.auth}", answer="{op.answer_kind}"),'
        )
    out.append("}")
    for flavour, base, prefix, awaits in (
        ("Sync", "SyncTransport", "def", ""),
        ("Async", "AsyncTransport", "async def", "await "),
    ):
        out += ["", "", f"class {flavour}Operations({base}):"]
        out.append(f'    """Every operation of the API, {"blocking" if flavour == "Sync" else "as coroutines"}."""')
        for op in operations:
            params, call = python_signature(op, names)
            answer = python_answer(op, names)
            signature = ", ".join(["self"] + params)
            out += [
                "",
                f"    {prefix} {op.operation_id}({signature}) -> {answer}:",
                f'        """{op.method} {op.path}: {op.summary}."""',
            ]
            invoke = f'{awaits}self._invoke(OPERATIONS["{op.operation_id}"], {", ".join(call)})'
            if answer == "None":
                out.append(f"        {invoke}")
            else:
                out.append(f'        return cast("{answer}", {invoke})')
    return "\n".join(out) + "\n"


# ------------------------------------------------------------ TypeScript


def emit_typescript(operations: List[Operation]) -> str:
    out = [
        "// Generated by clients/codegen/emit.py from the server's OpenAPI document:",
        "// do not edit; run clients/generate.sh.",
        "// One method per operation of the API; the types are openapi-typescript's.",
        "",
        'import type { Answer, Body, Query } from "./types.js";',
        'import type { CallOptions, OperationSpec } from "./transport.js";',
        "",
        "export const OPERATIONS = {",
    ]
    for op in operations:
        out.append(
            f'  {op.operation_id}: {{ id: "{op.operation_id}", method: "{op.method}", path: "{op.path}", '
            f'auth: "{op.auth}", answer: "{op.answer_kind}" }},'
        )
    out += [
        "} as const satisfies Record<string, OperationSpec>;",
        "",
        "/** Every operation of the API. */",
        "export abstract class Operations {",
        "  protected abstract invoke(",
        "    operation: OperationSpec,",
        "    path: readonly string[],",
        "    query: Record<string, unknown> | undefined,",
        "    body: unknown,",
        "    options: CallOptions | undefined,",
        "  ): Promise<unknown>;",
    ]
    for op in operations:
        params = [f"{name}: string" for name in op.path_params]
        body = "undefined"
        query = "undefined"
        if op.body is not None:
            optional = "" if op.body_required else "?"
            params.append(f'body{optional}: Body<"{op.operation_id}">')
            body = "body"
        if op.query:
            params.append(f'query?: Query<"{op.operation_id}">')
            query = "query"
        params.append("options?: CallOptions")
        path = f"[{', '.join(op.path_params)}]"
        out += [
            "",
            f"  /** {op.method} {op.path}: {op.summary}. */",
            f"  {op.operation_id}({', '.join(params)}): Promise<Answer<\"{op.operation_id}\">> {{",
            f"    return this.invoke(OPERATIONS.{op.operation_id}, {path}, {query}, {body}, options) as Promise<",
            f'      Answer<"{op.operation_id}">',
            "    >;",
            "  }",
        ]
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv: List[str]) -> None:
    if len(argv) != 5:
        raise SystemExit(__doc__)
    document_path, models_path, python_out, typescript_out = argv[1:]
    with open(document_path, encoding="utf-8") as f:
        document = json.load(f)
    with open(models_path, encoding="utf-8") as f:
        names = python_names(f.read())
    operations = load_operations(document)
    with open(python_out, "w", encoding="utf-8") as f:
        f.write(emit_python(operations, names))
    with open(typescript_out, "w", encoding="utf-8") as f:
        f.write(emit_typescript(operations))


if __name__ == "__main__":
    main(sys.argv)
