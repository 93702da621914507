"""What the workbench's JavaScript reads of events, found by reading the source (no browser).

A small tokenizer (comments, strings, template literals with their `${}` expressions, regex
literals) and a few patterns over its tokens, in the shapes the web code is written in:

* a handler table `const NAME = { type: handler, type: factory("x"), ... }`, whose handlers are
  `function f(txn, seq, data)` (or a factory returning `(txn, seq, data) => ...`);
* reads of an event's data `get(data, "f")`, `has(data, "f")`, `data.f`, `data["f"]`, followed
  into the helpers the data is passed to (`newTool(callId, data)` reads through its own name);
* `switch (x.type) { case "a": case "b": ... }` groups, whose reads belong to their types.

Only what `tests/unit/test_event_schema_js.py` needs; it fails loudly when the source stops
looking like this (a table or function it expects is not found), never silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "Function",
    "Token",
    "arrow_param",
    "braced",
    "compared_to",
    "data_reads",
    "functions",
    "handler_table",
    "reads_of",
    "string_array",
    "switch_groups",
    "table_of_objects",
    "tokenize",
]


@dataclass(frozen=True)
class Token:
    kind: str  # "name", "str", "num", "punct", "regex"
    value: str


_PUNCT = ("===", "!==", "...", "=>", "&&", "||", "??", "?.", "==", "!=", "<=", ">=", "++", "--",
          "+=", "-=", "**")
_REGEX_AFTER = {"(", ",", "=", ":", "[", "!", "&", "|", "?", "{", "}", ";", "&&", "||", "??",
                "===", "!==", "==", "!=", "=>", "return", "typeof", "case"}
_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUM = re.compile(r"[0-9][0-9A-Za-z_.]*")


def tokenize(src: str) -> list[Token]:
    out: list[Token] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c.isspace():
            i += 1
        elif src.startswith("//", i):
            i = _end_of(src, "\n", i)
        elif src.startswith("/*", i):
            i = _end_of(src, "*/", i) + 1
        elif c in "\"'":
            j = _string_end(src, i, c)
            out.append(Token("str", _unescape(src[i + 1 : j])))
            i = j + 1
        elif c == "`":
            i = _template(src, i, out)
        elif c == "/" and (not out or out[-1].value in _REGEX_AFTER):
            i = _regex_end(src, i)
            out.append(Token("regex", ""))
        elif m := _NAME.match(src, i):
            out.append(Token("name", m.group()))
            i = m.end()
        elif m := _NUM.match(src, i):
            out.append(Token("num", m.group()))
            i = m.end()
        else:
            op = next((p for p in _PUNCT if src.startswith(p, i)), c)
            out.append(Token("punct", op))
            i += len(op)
    return out


def _end_of(src: str, mark: str, i: int) -> int:
    j = src.find(mark, i + 2)
    return len(src) if j < 0 else j + 1


def _string_end(src: str, i: int, quote: str) -> int:
    j = i + 1
    while src[j] != quote:
        j += 2 if src[j] == "\\" else 1
    return j


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def _regex_end(src: str, i: int) -> int:
    j, in_class = i + 1, False
    while True:
        c = src[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c == "/" and not in_class:
            break
        j += 1
    j += 1
    while j < len(src) and src[j].isalpha():  # flags
        j += 1
    return j


def _template(src: str, i: int, out: list[Token]) -> int:
    """A template literal: its text is dropped, its `${}` expressions are tokens like any."""
    j = i + 1
    while src[j] != "`":
        if src[j] == "\\":
            j += 2
            continue
        if src.startswith("${", j):
            depth, k = 1, j + 2
            while depth:
                if src[k] == "`":
                    k = _template(src, k, []) - 1
                elif src[k] in "\"'":
                    k = _string_end(src, k, src[k])
                elif src[k] == "{":
                    depth += 1
                elif src[k] == "}":
                    depth -= 1
                k += 1
            out.append(Token("punct", "("))
            out.extend(tokenize(src[j + 2 : k - 1]))
            out.append(Token("punct", ")"))
            j = k
            continue
        j += 1
    out.append(Token("str", ""))
    return j + 1


def braced(toks: list[Token], start: int) -> int:
    """The index of the bracket closing the one at `start` (`{`, `(` or `[`)."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    opening = toks[start].value
    depth = 0
    for k in range(start, len(toks)):
        if toks[k].kind != "punct":
            continue
        if toks[k].value == opening:
            depth += 1
        elif toks[k].value == pairs[opening]:
            depth -= 1
            if depth == 0:
                return k
    raise ValueError(f"unbalanced {opening!r}")


def _split_args(toks: list[Token]) -> list[list[Token]]:
    """The comma-separated parts of a bracket's contents (nested brackets kept whole)."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in toks:
        if t.kind == "punct" and t.value in "([{":
            depth += 1
        elif t.kind == "punct" and t.value in ")]}":
            depth -= 1
        if depth == 0 and t.kind == "punct" and t.value == ",":
            parts.append([])
        else:
            parts[-1].append(t)
    return [p for p in parts if p]


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[str, ...]
    body: list[Token] = field(repr=False)


def functions(toks: list[Token]) -> dict[str, Function]:
    """Every `function name(params) { ... }` and class method `name(params) { ... }`."""
    found: dict[str, Function] = {}
    for k, t in enumerate(toks[:-1]):
        if t.kind != "name" or toks[k + 1].value != "(":
            continue
        declared = k > 0 and toks[k - 1].value == "function"
        method = k > 0 and toks[k - 1].value in ("}", ";", "{") and not declared
        if not (declared or method) or t.value in _KEYWORDS:
            continue
        close = braced(toks, k + 1)
        if close + 1 >= len(toks) or toks[close + 1].value != "{":
            continue
        params = tuple(p[0].value for p in _split_args(toks[k + 2 : close]) if p[0].kind == "name")
        end = braced(toks, close + 1)
        found.setdefault(t.value, Function(t.value, params, toks[close + 2 : end]))
    return found


def handler_table(toks: list[Token], name: str) -> dict[str, tuple[str, list[Token]]]:
    """`const NAME = { key: fn, key: factory(args) }` → key → (function name, its arguments)."""
    return {key: (fn, rest[1:-1]) for key, (fn, rest) in _raw_table(toks, name).items()}


def _raw_table(toks: list[Token], name: str) -> dict[str, tuple[str, list[Token]]]:
    """`const NAME = { key: first, rest... }` → key → (first token, the tokens after it)."""
    for k in range(len(toks) - 3):
        if toks[k].value == name and toks[k + 1].value == "=" and toks[k + 2].value == "{":
            table: dict[str, tuple[str, list[Token]]] = {}
            for entry in _split_args(toks[k + 3 : braced(toks, k + 2)]):
                key, colon, first, *rest = entry
                if colon.value != ":":
                    raise ValueError(f"{name}: an entry that is not `key: value`: {entry}")
                table[key.value] = (first.value, [first, *rest] if first.value == "{" else rest)
            return table
    raise ValueError(f"no table {name}")


def table_of_objects(toks: list[Token], name: str) -> dict[str, set[str]]:
    """`const NAME = { key: { field: ..., ... }, ... }` → key → its fields."""
    return {key: {part[0].value for part in _split_args(value[1:-1])}
            for key, (brace, value) in _raw_table(toks, name).items() if brace == "{"}


def compared_to(body: list[Token], subject: str) -> set[str]:
    """The strings `subject` is compared with (`subject === "x"`, `"x" !== subject`), where
    `subject` is a name or a dotted path like `ev.type`."""
    path = subject.split(".")
    width = 2 * len(path) - 1
    out: set[str] = set()
    for k in range(len(body) - width + 1):
        if [t.value for t in body[k : k + width : 2]] != path:
            continue
        if any(t.value != "." for t in body[k + 1 : k + width : 2]):
            continue
        if k + width + 1 < len(body) and body[k + width].value in ("===", "!==") \
                and body[k + width + 1].kind == "str":
            out.add(body[k + width + 1].value)
        if k >= 2 and body[k - 1].value in ("===", "!==") and body[k - 2].kind == "str":
            out.add(body[k - 2].value)
    return out


def string_array(toks: list[Token], name: str) -> list[str]:
    """`const NAME = ["a", "b", ...]` → its strings."""
    for k in range(len(toks) - 3):
        if toks[k].value == name and toks[k + 1].value == "=" and toks[k + 2].value == "[":
            return [t.value for t in toks[k + 3 : braced(toks, k + 2)] if t.kind == "str"]
    raise ValueError(f"no array {name}")


def reads_of(body: list[Token], name: str) -> set[str]:
    """The fields of `name` read directly in `body`: `get(name, "f")`, `has(name, "f")`,
    `name.f`, `name?.f`, `name["f"]`."""
    out: set[str] = set()
    for k, t in enumerate(body):
        if t.kind != "name" or t.value != name:
            continue
        before = body[k - 1].value if k else ""
        if before == ".":
            continue  # `x.name` is another object's field of that name
        after = body[k + 1 : k + 4]
        if len(after) >= 2 and after[0].value in (".", "?.") and after[1].kind == "name":
            out.add(after[1].value)
        elif len(after) >= 3 and after[0].value == "[" and after[1].kind == "str" \
                and after[2].value == "]":
            out.add(after[1].value)
        elif (k >= 2 and body[k - 1].value == "(" and body[k - 2].value in ("get", "has")
              and len(after) >= 2 and after[0].value == "," and after[1].kind == "str"):
            out.add(after[1].value)
    return out


_KEYWORDS = {"if", "for", "while", "switch", "catch", "function", "return"}
_ACCESSORS = {"get", "has", "json", "isMapping", "truthy", "text", "int", "ident"}


def data_reads(fn: Function, name: str, funcs: dict[str, Function],
               seen: frozenset[str] = frozenset()) -> dict[str, set[str]]:
    """Fields of `name` read in `fn`, and in every function `name` is passed to (by
    position), transitively: function name → the fields it reads itself."""
    out = {fn.name: reads_of(fn.body, name)}
    for callee, position in _passes(fn.body, name):
        target = funcs.get(callee)
        if callee in _ACCESSORS or target is None or callee in seen or \
                position >= len(target.params):
            continue
        for f, fields in data_reads(target, target.params[position], funcs,
                                    seen | {fn.name}).items():
            out.setdefault(f, set()).update(fields)
    return out


def _passes(body: list[Token], name: str) -> Iterable[tuple[str, int]]:
    """(callee, argument position) of each call in `body` given `name` as an argument."""
    for k, t in enumerate(body[:-1]):
        if t.kind == "name" and body[k + 1].value == "(" and (k == 0 or body[k - 1].value != "."):
            args = _split_args(body[k + 2 : braced(body, k + 1)])
            for position, arg in enumerate(args):
                if len(arg) == 1 and arg[0].value == name:
                    yield t.value, position


def arrow_param(body: list[Token], position: int) -> str:
    """The parameter at `position` of the first arrow function `(a, b, c) =>` in `body`."""
    for k, t in enumerate(body):
        if t.value == "(":
            close = braced(body, k)
            if close + 1 < len(body) and body[close + 1].value == "=>":
                return _split_args(body[k + 1 : close])[position][0].value
    raise ValueError("no arrow function")


def switch_groups(body: list[Token], subject: str) -> list[tuple[list[str], list[Token]]]:
    """The case groups of `switch (subject.type)`: the labels that share a body, and it."""
    for k in range(len(body) - 6):
        if (body[k].value == "switch" and body[k + 2].value == subject
                and body[k + 3].value == "." and body[k + 4].value == "type"):
            open_ = k + 6
            inner = body[open_ + 1 : braced(body, open_)]
            groups: list[tuple[list[str], list[Token]]] = []
            labels: list[str] = []
            stmts: list[Token] = []
            j = 0
            while j < len(inner):
                if inner[j].value in ("case", "default") and inner[j].kind == "name":
                    if stmts:
                        groups.append((labels, stmts))
                        labels, stmts = [], []
                    if inner[j].value == "case":
                        labels.append(inner[j + 1].value)
                        j += 3
                    else:
                        labels.append("")
                        j += 2
                    continue
                stmts.append(inner[j])
                j += 1
            if labels or stmts:
                groups.append((labels, stmts))
            return groups
    raise ValueError(f"no switch on {subject}.type")
