"""Checks agentmesh's OpenAPI document with validators that share no code with it.

    python openapi_check.py DOCUMENT.json [EXCHANGES.json]

DOCUMENT.json is validated as OpenAPI 3.1 by openapi-spec-validator; a failure
exits 1 with the validator's message. EXCHANGES.json, when given, is a list of
answers the daemon gave ({"method", "path" (the documented template), "status",
"body"}): each body is validated by openapi-schema-validator against the schema
the document gives for that operation and status. Prints one JSON report on
stdout: {"valid": true, "exchanges": [null or the reason it does not match, ...]}.
"""

import json
import sys

from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError


def resolve(document, node):
    """Follows a local $ref of the document (a components/responses entry)."""
    while isinstance(node, dict) and "$ref" in node and len(node) == 1:
        pointer = node["$ref"]
        assert pointer.startswith("#/"), pointer
        node = document
        for part in pointer[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def mismatch(document, exchange):
    """Why the answer does not match the document, or None."""
    item = document["paths"].get(exchange["path"])
    if item is None:
        return f"{exchange['path']} is not in the document"
    operation = item.get(exchange["method"].lower())
    if operation is None:
        return f"{exchange['method']} {exchange['path']} is not in the document"
    response = operation["responses"].get(str(exchange["status"]))
    if response is None:
        return f"{exchange['method']} {exchange['path']} documents no {exchange['status']} answer"
    response = resolve(document, response)
    media = response.get("content", {}).get("application/json")
    if media is None:
        return f"{exchange['method']} {exchange['path']} {exchange['status']} documents no JSON body"
    # The schema's $refs point into the document: resolve them against it.
    schema = {"allOf": [media["schema"]], "components": document["components"]}
    validator = OAS31Validator(schema)
    errors = sorted(validator.iter_errors(exchange["body"]), key=lambda e: list(e.absolute_path))
    if errors:
        return "; ".join(
            f"at /{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors
        )
    return None


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        document = json.load(f)
    try:
        validate(document, cls=OpenAPIV31SpecValidator)
    except OpenAPIValidationError as err:
        print(f"the document is not valid OpenAPI 3.1: {err}", file=sys.stderr)
        sys.exit(1)
    report = {"valid": True, "exchanges": []}
    if len(sys.argv) > 2:
        with open(sys.argv[2], encoding="utf-8") as f:
            exchanges = json.load(f)
        report["exchanges"] = [mismatch(document, e) for e in exchanges]
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
