"""The form of one training record, a jsonl file's line or a data folder's row: 'text' (a non-empty string) or
'messages' (a non-empty list of {role, content}, each role one the chat templates know; an assistant's turn that
calls tools, OpenAI's form, has 'tool_calls' and may have a null content). `config.data` and `config.folder_data`
hold every record to it before anything runs."""

from __future__ import annotations

import json

# The roles the chat templates know (a hub model's, e.g. Qwen3's, and the built-in one of the tiny models); another
# role is dropped without a word, refused inside the job or rendered as plain text, as the template has it.
ROLES = ("system", "user", "assistant", "tool")
RECORD_FORM = (
    "'text' (a non-empty string) or 'messages' (a list of {role, content}, role one of "
    + ", ".join(ROLES)
    + ", content a string or, beside an assistant's tool_calls, null)"
)
CALL_FORM = "{function: {name, arguments}} (arguments an object or JSON text)"


def shown(value: object) -> str:
    """A value as a message shows it, cut to 40 characters: JSON where it is JSON's (a data folder's bytes, dates and
    decimals are not: their repr)."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 40 else text[:37] + "..."


def record_problem(record: object, kind: str | None) -> str | None:
    """What is wrong with one record, or None; `kind` is the field the file's first record used."""
    if not isinstance(record, dict):
        return "is not a JSON object"
    if "messages" in record and "text" in record:
        return "has both 'messages' and 'text' (which one to train on?)"
    found = "messages" if "messages" in record else "text" if "text" in record else None
    if found is None:
        return "has neither 'messages' nor 'text'"
    if kind is not None and found != kind:
        return f"has '{found}' where the records before it have '{kind}'"
    value = record[found]
    if found == "text":
        if not isinstance(value, str):
            return f"'text' is {shown(value)}, not a string"
        return None if value.strip() else "'text' is empty or only whitespace (nothing to train on)"
    if not isinstance(value, list) or not value:
        return "'messages' is not a non-empty list"
    for message in value:
        if not isinstance(message, dict):
            return f"'messages' holds {shown(message)}, not an object"
        if "role" not in message:
            return "'messages' holds an entry without a 'role'"
        if message["role"] not in ROLES:
            return f"'messages' holds the role {shown(message['role'])}"
        calls = message.get("tool_calls")
        if calls is not None and (problem := calls_problem(message["role"], calls)):
            return problem
        content = message.get("content")
        if not isinstance(content, str) and not (content is None and calls):
            return f"'messages' holds a 'content' of {shown(content)}, not a string"
    return None


def calls_problem(role: object, calls: object) -> str | None:
    """What is wrong with a turn's 'tool_calls' (OpenAI's form, or a call's name and arguments given bare), or None."""
    if role != "assistant":
        return f"'messages' holds 'tool_calls' in a {shown(role)} turn (only an assistant's turn calls tools)"
    if not isinstance(calls, list) or not calls:
        return f"'messages' holds 'tool_calls' of {shown(calls)}, not a non-empty list of calls"
    for call in calls:
        function = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            return f"'messages' holds a tool call {shown(call)}, not {CALL_FORM}"
        if not isinstance(function.get("arguments", {}), dict | str):
            return f"'messages' holds a tool call whose arguments are {shown(function['arguments'])}, not {CALL_FORM}"
    return None
