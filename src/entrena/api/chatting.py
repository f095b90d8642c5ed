"""``entrena.chat``: a small terminal conversation with a chat model, for a quick look."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

from entrena.errors import ConfigError

__all__ = ["chat", "open_session"]

EXIT_WORDS = ("/exit", "/quit")
RESET_WORD = "/reset"


def open_session(source: str | Path, *, max_new_tokens: int = 256,
                 threads: int | None = None) -> tuple[Any, Any]:
    """The chat session of a chat model (a run or a bundle; what ``entrena chat`` and the
    MLflow chat model talk through) and the model's location.

    Raises:
        ConfigError: The model's task does not chat.
        DataError: ``source`` is neither a finished run nor a bundle, or its model records a
            task that is not installed.
        ResourceError: A GGUF bundle without llama-cpp-python installed.
    """
    from entrena.exporting.prediction import locate_model, model_meta_file, model_task_name
    from entrena.tasks.registry import get_task, model_files, recorded_task, task_names

    task = recorded_task(model_task_name(source), model_meta_file(source))
    session_class = getattr(task, "chat_session", None)
    if session_class is None:
        chat_tasks = [name for name in task_names()
                      if getattr(get_task(name), "chat_session", None) is not None]
        raise ConfigError(f"{source}: a {task.name} model does not chat; entrena chat takes a "
                          f"run (or bundle) of a chat model (a task with a chat session: "
                          f"{', '.join(chat_tasks) or 'none installed'})")
    location = locate_model(source, None, model_files=model_files, formats=task.export_formats)
    return session_class(location, max_new_tokens=max_new_tokens, threads=threads), location


def chat(source: str | Path, *, input: IO[str], output: IO[str], max_new_tokens: int = 256,
         threads: int | None = None, prompt: str = "you> ") -> dict[str, Any]:
    """Talk with a chat model: each line read from ``input`` is a user turn; the answer is
    written to ``output`` (``model> ...``). ``/reset`` forgets the conversation; ``/exit``,
    ``/quit`` or the end of the input stops.

    Args:
        source: A finished run of a chat task or one of its export bundles (GGUF runs in
            llama.cpp).
        input: Where user lines come from (a terminal, or a pipe).
        output: Where answers go.
        max_new_tokens: The most tokens of one answer.
        threads: CPU threads.
        prompt: Written before reading each line when ``input`` is a terminal.

    Returns:
        ``{"turns": answers given, "engine": "pytorch" | "gguf", "model": path}``.

    Raises:
        ConfigError: The model's task does not chat, or ``max_new_tokens`` < 1.
        DataError: ``source`` is neither a finished run nor a bundle, or its model records a
            task that is not installed.
        ResourceError: A GGUF bundle without llama-cpp-python installed.
    """
    if max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens {max_new_tokens}: give at least 1")
    session, location = open_session(source, max_new_tokens=max_new_tokens, threads=threads)
    interactive = input.isatty()
    messages: list[dict[str, str]] = []
    turns = 0
    while True:
        if interactive:
            output.write(prompt)
            output.flush()
        line = input.readline()
        text = line.strip()
        if not line or text in EXIT_WORDS:
            break
        if not text:
            continue
        if text == RESET_WORD:
            messages = []
            output.write("(conversation reset)\n")
            continue
        messages.append({"role": "user", "content": text})
        answer = session.reply(messages)
        messages.append({"role": "assistant", "content": answer})
        output.write(f"model> {answer}\n")
        output.flush()
        turns += 1
    return {"turns": turns, "engine": session.engine, "model": str(location.path)}
