"""The JSON Schema of both event logs, generated from the payload types of `events.py` and
checked in beside the web reducer as `web/events.schema.json`, where tests hold the JS to it.
Regenerate it with:

    PYTHONPATH=src python -c 'import json; from outlive.domain.event_schema import json_schema;
    print(json.dumps(json_schema(), indent=1, sort_keys=True))' > src/outlive/web/events.schema.json
"""

from __future__ import annotations

from typing import Any

import msgspec

from .events import OWNER_PAYLOAD_TYPES, SESSION_PAYLOAD_TYPES, Payload

__all__ = ["json_schema"]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of both logs' events, `{type, data}` per event type, generated from
    the payload types (checked in as `web/events.schema.json`)."""
    payloads = (*SESSION_PAYLOAD_TYPES, *OWNER_PAYLOAD_TYPES)
    (refs, defs) = msgspec.json.schema_components(payloads, ref_template="#/$defs/{name}")

    def branch(cls: type[Payload], ref: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "required": ["type", "data"],
                "properties": {"type": {"const": cls.TYPE}, "data": ref}}

    session = [branch(c, r) for c, r in zip(SESSION_PAYLOAD_TYPES, refs, strict=False)]
    owner = [branch(c, r) for c, r in zip(OWNER_PAYLOAD_TYPES, refs[len(SESSION_PAYLOAD_TYPES):],
                                          strict=True)]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "outlive events",
        "description": "Generated from src/outlive/domain/events.py: do not edit by hand.",
        "$defs": {
            **defs,
            "SessionEvent": {"oneOf": session},
            "OwnerEvent": {"oneOf": owner},
        },
        "oneOf": [{"$ref": "#/$defs/SessionEvent"}, {"$ref": "#/$defs/OwnerEvent"}],
    }
