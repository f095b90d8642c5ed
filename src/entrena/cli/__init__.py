"""The command line: parse → call the verb → print. The only place errors become exit codes.

Heavy libraries (torch, transformers, mlflow) are imported inside the commands, never at
module level, so ``entrena --help`` starts fast.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from entrena import __version__
from entrena.core.files import dumps_strict
from entrena.core.signals import StopSignal, stop_signals
from entrena.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_PREEMPTED,
    EntrenaError,
    Interrupted,
)
from entrena.units import format_bytes, format_usd

__all__ = ["app", "main"]

app = typer.Typer(
    name="entrena",
    help="Plan, train and ship PyTorch models efficiently on whatever hardware you have.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

ConfigArg = Annotated[Path, typer.Argument(help="The run's YAML config file.",
                                           show_default=False)]
RunDirOpt = Annotated[Path | None, typer.Option("--run-dir", help="Run directory "
                                                "(default: runs/<name>).")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="Override a config key: --set train.max_epochs=2 (value parsed as YAML).")]


def _stderr_console() -> Any:
    from entrena.core.console import stderr_console

    return stderr_console()


class _StderrHandler(logging.StreamHandler):
    """A stream handler writing to whatever ``sys.stderr`` is when a record is emitted: a
    caller that swaps stderr (a test runner invoking the CLI in process, a notebook) and
    closes its stream does not leave this process's later messages writing to a closed file."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always sys.stderr


def _setup_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    logger = logging.getLogger("entrena")
    if not any(getattr(h, "_entrena_console", False) for h in logger.handlers):
        console = _stderr_console()
        if console.is_terminal:
            handler: logging.Handler = RichHandler(console=console, show_time=False,
                                                   show_path=False, markup=False,
                                                   rich_tracebacks=False)
            handler.setFormatter(logging.Formatter("%(message)s"))
        else:  # CI logs and files: one unwrapped line per message
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        handler._entrena_console = True  # type: ignore[attr-defined]
        handler.setLevel(logging.DEBUG if verbose else logging.INFO)
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False


def _fail(message: str, code: int) -> None:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"entrena {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False
          ) -> None:
    """entrena: plan, train and ship PyTorch models efficiently."""


@app.command()
def train(config: ConfigArg, run_dir: RunDirOpt = None, set_: SetOpt = None,
          restart: Annotated[bool, typer.Option("--restart", help="Delete the run directory "
                                                "and train from scratch.")] = False,
          resume_with_changes: Annotated[bool, typer.Option(
              "--resume-with-changes", help="Resume an unfinished run even though the config "
              "changed since its checkpoint.")] = False,
          budget: Annotated[str | None, typer.Option(
              "--budget", help="Fit the whole run, launch to finish, to this wall time ('8m', "
              "'1h30m', seconds) or money ('$2.50'): train.budget.", show_default=False)
          ] = None,
          json_output: Annotated[bool, typer.Option("--json", help="Print metrics.json to "
                                                    "stdout.")] = False,
          verbose: Annotated[bool, typer.Option(
              "--verbose", "-v", help="Debug logs; tracebacks of internal errors.")] = False
          ) -> None:
    """Fine-tune a model as CONFIG says; writes runs/<name>/ (model, metrics, events, log).

    An unfinished run directory is resumed from its newest checkpoint; SIGTERM/SIGUSR1 save
    one and exit 143, Ctrl-C saves one and exits 130.
    """
    _setup_logging(verbose)
    if budget is not None:  # named as the user wrote it, before it becomes an override
        from entrena.units import parse_budget

        try:
            parse_budget(budget, bare="s", what="--budget")
        except ValueError as exc:
            _fail(str(exc), EXIT_BAD_INPUT)
    try:
        from entrena.api import train as train_fn
        from entrena.tracking.events import since_process_start_s

        overrides = [*(set_ or []), *([f"train.budget={budget}"] if budget is not None else [])]
        result = train_fn(config, run_dir=run_dir, overrides=overrides, restart=restart,
                          resume_with_changes=resume_with_changes,
                          launched_at=time.time() - since_process_start_s())
    except Interrupted as exc:  # a checkpoint was saved: not an error
        sys.stderr.write(f"{exc}\n")
        raise typer.Exit(exc.exit_code) from None
    except StopSignal as stop:  # while entrena.api imported, before train() took over
        sys.stderr.write(f"stopped by {stop.signal_name} while starting, before the config "
                         "was read; nothing was written; run the same command again\n")
        raise typer.Exit(EXIT_INTERRUPTED if stop.signal_name == "SIGINT"
                         else EXIT_PREEMPTED) from None
    except EntrenaError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted without saving; the next `entrena train` resumes from "
                         "the newest checkpoint\n")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001 - the one place internal errors become exit 1
        log_path = getattr(exc, "entrena_log", None) or "the run's train.log"
        _fail(f"internal error: {type(exc).__name__}: {exc}; traceback in {log_path}",
              EXIT_INTERNAL)
    if result.worker:  # rank > 0 of a distributed fit: rank 0 reports
        return
    if json_output:
        if result.already_finished:
            sys.stderr.write(f"{result.run_dir} is already finished; use --restart to train "
                             "again\n")
        typer.echo(dumps_strict(result.metrics, indent=2))
    else:
        _print_summary(result)


RunArg = Annotated[Path, typer.Argument(metavar="RUN", show_default=False,
                                        help="A finished run directory (runs/<name>).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as one JSON document "
                                       "on stdout (everything else goes to stderr).")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Debug logs; tracebacks of "
                                          "internal errors.")]


def _call_verb(call: Any, verbose: bool) -> Any:
    """Run a verb (prepare, export, predict); errors become exit codes as for ``train``; a
    stop signal (SIGTERM, SIGUSR1, SIGINT) ends it at once with one line (outputs are written
    whole or not at all: an unfinished one is removed on the way out)."""
    try:
        with stop_signals():
            return call()
    except StopSignal as stop:
        sys.stderr.write(f"stopped by {stop.signal_name}; nothing half-written is left (an "
                         "unfinished output is removed); run the same command again\n")
        raise typer.Exit(EXIT_INTERRUPTED if stop.signal_name == "SIGINT"
                         else EXIT_PREEMPTED) from None
    except EntrenaError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted; nothing was written\n")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001 - the one place internal errors become exit 1
        if verbose:
            import traceback

            traceback.print_exc(file=sys.stderr)
        _fail(f"internal error: {type(exc).__name__}: {exc}"
              + ("" if verbose else "; rerun with --verbose for the traceback"), EXIT_INTERNAL)


@app.command()
def prepare(config: ConfigArg, run_dir: RunDirOpt = None, set_: SetOpt = None,
            json_output: Annotated[bool, typer.Option(
                "--json", help="Print data_report.json as one JSON document on stdout (the "
                "table and logs go to stderr).")] = False,
            verbose: VerboseOpt = False) -> None:
    """Read, check, split and encode CONFIG's data into the shared cache; write
    runs/<name>/data_report.json and print it as a table. Exits 3 when a check set to `error`
    fails (the report is still written)."""
    _setup_logging(verbose)

    def call() -> Any:
        from entrena.api import DataCheckFailed
        from entrena.api import prepare as prepare_fn

        try:
            return prepare_fn(config, run_dir=run_dir, overrides=set_ or [])
        except DataCheckFailed as exc:
            if json_output:
                typer.echo(dumps_strict(exc.report, indent=2))
            raise

    result = _call_verb(call, verbose)
    if json_output:
        typer.echo(dumps_strict(result.report, indent=2))
    elif result.report_path is not None:
        _stderr_console().print(f"data report: {result.report_path}", highlight=False)


ThreadsOpt = Annotated[int | None, typer.Option(
    "--threads", help="CPU threads of llama.cpp (a GGUF model) and PyTorch (default: "
    "llama.cpp the cores other processes leave free, measured over 0.2 s; PyTorch its own).",
    show_default=False)]


@app.command()
def export(run: RunArg,
           format_: Annotated[str | None, typer.Option(
               "--format", help="onnx or torchscript; a chat model (a language-model task): gguf "
               "(llama.cpp / Ollama) or hf (merged Hugging Face folder). Default: onnx; gguf "
               "for a chat model.")] = None,
           quantize: Annotated[str | None, typer.Option(
               "--quantize", help="int8: ONNX Runtime dynamic quantisation (ONNX only); "
               "gguf: f16, q8_0 (default) or q4_k_m (any case).")] = None,
           opset: Annotated[int | None, typer.Option(
               "--opset", help="ONNX opset (default 18).", show_default=False)] = None,
           output: Annotated[Path | None, typer.Option(
               "--output", "-o", help="Bundle folder (default: RUN/export/<format>[-int8]).",
               show_default=False)] = None,
           parity_data: Annotated[Path | None, typer.Option(
               "--parity-data", help="Check parity on this file instead of the run's test "
               "split.", show_default=False)] = None,
           atol: Annotated[float, typer.Option(
               "--atol", help="Full precision: largest allowed |exported - PyTorch| logit "
               "difference (classifiers; a regressor's values must agree within 1e-3 "
               "relative).")] = 1e-4,
           latency_calls: Annotated[int, typer.Option(
               "--latency-calls", help="Timed calls per engine and batch size.")] = 50,
           parity_prompts: Annotated[int, typer.Option(
               "--parity-prompts", help="Chat models: held-out prompts whose greedy answers "
               "are compared.")] = 100,
           ollama: Annotated[str | None, typer.Option(
               "--ollama", metavar="NAME", help="--format gguf: then run `ollama create NAME "
               "-f Modelfile` in the bundle when an ollama binary is on PATH (else print the "
               "command to run later); the outcome is in export.json.",
               show_default=False)] = None,
           threads: ThreadsOpt = None,
           json_output: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Export RUN's model as a bundle (model, tokenizer, labels, model card) and check parity
    and latency; exits 3 when the parity check fails (the bundle is still written)."""
    _setup_logging(verbose)

    def call() -> Any:
        from entrena.api import ParityFailed
        from entrena.api import export as export_fn

        try:
            return export_fn(run, format=format_, quantize=quantize, opset=opset, output=output,
                             parity_data=parity_data, atol=atol, latency_calls=latency_calls,
                             parity_prompts=parity_prompts, ollama=ollama, threads=threads)
        except ParityFailed as exc:
            _print_export(exc.result, json_output)
            raise

    result = _call_verb(call, verbose)
    _print_export(result, json_output)


def _print_export(result: Any, json_output: bool) -> None:
    if json_output:
        typer.echo(dumps_strict({"bundle": str(result.bundle_dir), **result.report}, indent=2))
        return
    from rich.table import Table

    report = result.report
    parity = report["parity"]
    made = report.get("ollama") or {}
    if "command" in made:  # --ollama: its outcome first, the parity line stays the last
        _stderr_console().print(
            f"ollama: created {made['name']} (ollama run {made['name']})" if made["created"]
            else f"ollama: not created ({made.get('reason') or made.get('output')}); run: "
                 f"{made['command']}", soft_wrap=True, markup=False, highlight=False)
    if "agreement" in parity:  # a chat model: one line (scripts read the bundle off its end)
        _stderr_console().print(_chat_parity_line(result), soft_wrap=True, markup=False,
                                highlight=False)
        return
    table = Table(title=f"bundle {result.bundle_dir}", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("format", f"{report['format']} ({report['program']}"
                  + (f", {report['quantize']}" if report.get("quantize") else "") + ")")
    table.add_row(f"parity ({parity['examples']} {parity['dataset']} examples)",
                  "passed" if parity["passed"] else "FAILED")
    table.add_row("parity.max_abs_diff", f"{parity['max_abs_diff']:.2e}")
    if "label_agreement" in parity:
        table.add_row("parity.label_agreement", f"{parity['label_agreement']:.4f}")
    if "max_rel_diff" in parity:
        table.add_row("parity.max_rel_diff", f"{parity['max_rel_diff']:.2e}")
    if "r2_exported" in parity:
        table.add_row("R² (PyTorch / exported)",
                      f"{parity['r2_pytorch']:.4f} / {parity['r2_exported']:.4f}")
    if "accuracy_exported" in parity:
        table.add_row("accuracy (PyTorch / exported)",
                      f"{parity['accuracy_pytorch']:.4f} / {parity['accuracy_exported']:.4f}")
    for engine, figures in report["latency"].items():
        if isinstance(figures, dict):
            for batch, stats in figures.items():
                table.add_row(f"latency {engine} {batch.replace('_', ' ')} p50 / p95 (ms)",
                              f"{stats['p50_ms']:.2f} / {stats['p95_ms']:.2f}")
    sizes = report["size_bytes"]
    table.add_row("size: model file / PyTorch weights",
                  f"{format_bytes(sizes['model_file'])} / "
                  f"{format_bytes(sizes['pytorch_weights'])}")
    _stderr_console().print(table)


def _chat_parity_line(result: Any) -> str:
    report = result.report
    parity, fmt = report["parity"], report["format"]
    speed = report["throughput"]
    what = f"{fmt} {report['quantize']}" if report.get("quantize") else fmt
    steps = ", ".join(f"{s['from']} → {s['to']} {s['agreement']:.3f}"
                      + ("" if s["passed"] else " FAILED")
                      for s in parity.get("steps", []))
    return (f"parity {what}: {'passed' if parity['passed'] else 'FAILED'} "
            f"({parity['criteria']}): agreement {steps or parity['agreement']} on "
            f"{parity['prompts']} prompts, exact match {parity['exact_match_pytorch']:.3f} "
            f"(PyTorch) / {parity[f'exact_match_{fmt}']:.3f} ({fmt}), "
            f"{speed['pytorch']['tokens_per_s']:.0f} / {speed[fmt]['tokens_per_s']:.0f} tokens/s, "
            f"model file {report['size_bytes']['model_file'] / 1e6:.1f} MB{_fallback(report)}: "
            f"{result.bundle_dir}")


def _fallback(report: dict[str, Any]) -> str:
    """What llama.cpp wrote instead of the asked quantisation (K-quants need rows that are
    multiples of 256 values), for the closing line."""
    quantization = report.get("quantization") or {}
    fallback = quantization.get("fallback") or []
    if not fallback:
        return ""
    types = quantization.get("tensor_types", {})
    return (f" (llama.cpp wrote {', '.join(f'{t} {types.get(t, 0)}' for t in fallback)} "
            f"where rows are not multiples of 256: quantization.tensor_types)")


@app.command()
def predict(source: Annotated[Path, typer.Argument(
                metavar="RUN_OR_BUNDLE", help="A finished run directory or an export bundle.",
                show_default=False)],
            input_: Annotated[Path, typer.Option("--input", "-i", help="CSV, TSV, JSONL or "
                                                 "Parquet file to predict (an image model: a "
                                                 "folder of images, or a CSV of paths).",
                                                 show_default=False)],
            output: Annotated[Path, typer.Option("--output", "-o", help="Output file; its "
                                                 "suffix picks the format.",
                                                 show_default=False)],
            backend: Annotated[str | None, typer.Option(
                "--backend", help="torch or onnx (default: what RUN_OR_BUNDLE holds; a run "
                "directory runs on torch).", show_default=False)] = None,
            text_column: Annotated[str | None, typer.Option(
                "--text-column", help="Input column with the texts, or an image model's "
                "CSV column of paths (default: the training data's).",
                show_default=False)] = None,
            batch_size: Annotated[int, typer.Option("--batch-size", help="Texts per model "
                                                    "call.")] = 32,
            on_bad_rows: Annotated[str | None, typer.Option(
                "--on-bad-rows", help="skip or error for empty texts (default: the run's "
                "data.on_bad_rows).", show_default=False)] = None,
            threads: ThreadsOpt = None,
            json_output: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Predict every row of --input; writes --output with every input column plus
    predicted_label, prob_<label> and status (a regressor: predicted_value and status)."""
    _setup_logging(verbose)

    def call() -> Any:
        from entrena.api import predict as predict_fn

        return predict_fn(source, input_, output=output, backend=backend,
                          text_column=text_column, batch_size=batch_size,
                          on_bad_rows=on_bad_rows, threads=threads,
                          console=_stderr_console())

    result = _call_verb(call, verbose)
    if json_output:
        typer.echo(dumps_strict(result.summary, indent=2))
    else:
        summary = result.summary
        reasons = ", ".join(summary["skipped"])  # an image model's summary names none
        # One unwrapped line (soft_wrap): scripts read the output path off its end.
        _stderr_console().print(
            f"{summary['rows']['predicted']} rows predicted, {summary['rows']['skipped']} "
            f"skipped{f' ({reasons})' if reasons else ''} with "
            f"{summary['backend']}: {result.output}", soft_wrap=True, markup=False,
            highlight=False)


@app.command()
def chat(source: Annotated[Path, typer.Argument(
             metavar="RUN_OR_BUNDLE", help="A chat model's run directory or export bundle.",
             show_default=False)],
         max_new_tokens: Annotated[int, typer.Option(
             "--max-new-tokens", help="The most tokens of one answer.")] = 256,
         threads: ThreadsOpt = None,
         verbose: VerboseOpt = False) -> None:
    """Talk with a chat model (a language-model run): one line per turn on stdin (a terminal or a
    pipe), answers on stdout; /reset forgets, /exit or end of input stops."""
    _setup_logging(verbose)

    def call() -> Any:
        from entrena.api import chat as chat_fn

        return chat_fn(source, input=sys.stdin, output=sys.stdout,
                       max_new_tokens=max_new_tokens, threads=threads)

    _call_verb(call, verbose)


@app.command()
def serve(source: Annotated[Path, typer.Argument(
              metavar="RUN_OR_BUNDLE", help="A finished run directory or an export bundle.",
              show_default=False)],
          host: Annotated[str, typer.Option(
              "--host", help="Address to listen on (0.0.0.0: other machines too).")
          ] = "127.0.0.1",
          port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 5000,
          workers: Annotated[int, typer.Option(
              "--workers", help="Server processes (MLflow), each with its own model copy.")
          ] = 1,
          threads: Annotated[int | None, typer.Option(
              "--threads", help="CPU threads of llama.cpp (a GGUF model; default: the "
              "cores other processes leave free, measured over 0.2 s).", show_default=False)
          ] = None,
          max_rows: Annotated[int | None, typer.Option(
              "--max-rows", help="Rows one request may hold (default 10000); a larger one "
              "is refused with HTTP 400.")] = None,
          engine: Annotated[str, typer.Option(
              "--engine", help="auto: llama.cpp for a GGUF model (or a run that has one), "
              "MLflow for the rest; mlflow or llama.cpp to choose.")] = "auto",
          dry_run: Annotated[bool, typer.Option(
              "--dry-run", help="Write the served model and print the command, URL and a "
              "curl line; start nothing.")] = False,
          json_output: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Serve a model over HTTP with the server that fits it: MLflow's scoring server for a
    classifier or regressor (POST /invocations) or an LLM run (its chat model, OpenAI's chat
    schema), llama.cpp's OpenAI-compatible server for a GGUF chat model (POST
    /v1/chat/completions). Prints the URL and a curl line that works."""
    _setup_logging(verbose)
    from entrena.api.serving import serve as serve_fn
    from entrena.api.serving import serve_plan

    def show(plan: Any) -> None:
        if json_output:
            typer.echo(dumps_strict(plan.as_dict(), indent=2))
            return
        console = _stderr_console()
        console.print(f"serving {plan.model} with {plan.engine} at {plan.url}", markup=False,
                      highlight=False)
        console.print(f"try: {plan.curl}", markup=False, highlight=False, soft_wrap=True)

    if dry_run:
        plan = _call_verb(lambda: serve_plan(source, host=host, port=port, workers=workers,
                                             threads=threads, max_rows=max_rows,
                                             engine=engine), verbose)
        show(plan)
        if not json_output:
            typer.echo(" ".join(plan.command))
        return
    code = _call_verb(lambda: serve_fn(source, host=host, port=port, workers=workers,
                                       threads=threads, max_rows=max_rows, engine=engine,
                                       announce=show), verbose)
    raise typer.Exit(code)


@app.command()
def doctor(run_dir: Annotated[Path, typer.Option(
               "--run-dir", help="Where runs are written (free disk is checked).")] = Path("runs"),
           json_output: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Describe this machine (CPU, RAM, GPUs, MPS, TPU, disk, torch build, libraries) and
    what is wrong with its set-up, each problem with a fix."""
    _setup_logging(verbose)

    def call() -> Any:
        from entrena.api import doctor as doctor_fn

        return doctor_fn(run_dir)

    report = _call_verb(call, verbose)
    if json_output:
        typer.echo(dumps_strict(report.as_dict(), indent=2))
    else:
        _stderr_console().print(report.render())


@app.command()
def plan(config: ConfigArg, run_dir: RunDirOpt = None, set_: SetOpt = None,
         deadline: Annotated[str | None, typer.Option(
             "--deadline", help="Latest acceptable total time: 30m, 2h, 1.5d.",
             show_default=False)] = None,
         budget: Annotated[str | None, typer.Option(
             "--budget", help="Money (20usd; a bare number is USD) or time (30m) to spend.",
             show_default=False)] = None,
         local_only: Annotated[bool, typer.Option(
             "--local-only", help="Plan this machine only.")] = False,
         hardware: Annotated[list[str] | None, typer.Option(
             "--hardware", help="Plan only this option (a catalog offer or accelerator, or "
             "local); repeat for more.", show_default=False)] = None,
         calibrate: Annotated[bool, typer.Option(
             "--calibrate", help="Time a few real training steps on this machine.")] = False,
         catalog: Annotated[Path | None, typer.Option(
             "--catalog", help="A catalog file merged over the shipped one (default: "
             "$ENTRENA_CATALOG).", show_default=False)] = None,
         llm: Annotated[bool, typer.Option(
             "--llm", help="CONFIG is a language model: a Hugging Face config.json (or its "
             "folder) or a known name (llama-3-8b, llama-3-70b, mistral-7b, qwen2.5-7b, "
             "smollm2-135m).")
                        ] = False,
         for_: Annotated[str, typer.Option(
             "--for", help="--llm: inference, lora, qlora or full.")] = "inference",
         context: Annotated[int, typer.Option("--context", help="--llm: tokens per "
                                              "sequence.")] = 4096,
         batch_size: Annotated[int, typer.Option("--batch-size", help="--llm: sequences at "
                                                 "once.")] = 1,
         quantization: Annotated[str, typer.Option(
             "--quantization", help="--llm: weights as fp16, int8 or int4.")] = "fp16",
         lora_rank: Annotated[int, typer.Option("--lora-rank", help="--llm: adapter "
                                                "rank.")] = 16,
         gradient_checkpointing: Annotated[bool, typer.Option(
             "--gradient-checkpointing/--no-gradient-checkpointing",
             help="--llm: training keeps each layer's input only and recomputes its "
             "activations in backward.")] = True,
         activation_bytes: Annotated[int, typer.Option(
             "--activation-bytes", help="--llm: bytes per activation, 2 (16-bit) or 4 "
             "(fp32).")] = 2,
         logits_positions: Annotated[int | None, typer.Option(
             "--logits-positions", help="--llm: positions whose logits are computed in "
             "training (default: every one; LLM fine-tuning computes its target tokens' only).",
             show_default=False)] = None,
         lora_dropout: Annotated[bool, typer.Option(
             "--lora-dropout/--no-lora-dropout", help="--llm: LoRA dropout is on (a dropped "
             "copy of each adapted input is kept).")] = False,
         lora_targets: Annotated[str, typer.Option(
             "--lora-targets", help="--llm: all-linear or projection names, comma-separated "
             "(q_proj,v_proj; Phi-3 fuses them: qkv_proj,gate_up_proj).")] = "all-linear",
         lora_layers: Annotated[int | None, typer.Option(
             "--lora-layers", help="--llm: LoRA on the last N decoder layers only (default: "
             "all); backward stops below them.", show_default=False)] = None,
         json_output: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Plan CONFIG: parameters, FLOPs, memory, time and cost on this machine and on catalog
    hardware (cloud GPUs, TPUs), and a recommendation. With --llm: a language model's memory
    (weights, KV cache, adapters, optimizer, activations) and the hardware that holds it."""
    _setup_logging(verbose)

    def call() -> Any:
        if llm:
            from entrena.api import plan_llm

            return plan_llm(str(config), mode=for_, context=context, batch_size=batch_size,
                            quantization=quantization, lora_rank=lora_rank, hardware=hardware,
                            catalog=catalog, gradient_checkpointing=gradient_checkpointing,
                            activation_bytes=activation_bytes,
                            logits_positions=logits_positions, lora_dropout=lora_dropout,
                            lora_targets=lora_targets if lora_targets == "all-linear"
                            else tuple(t.strip() for t in lora_targets.split(",")),
                            lora_layers=lora_layers)
        from entrena.api import plan as plan_fn

        return plan_fn(config, run_dir=run_dir, overrides=set_ or [], deadline=deadline,
                       budget=budget, local_only=local_only, hardware=hardware,
                       calibrate=calibrate, catalog=catalog)

    result = _call_verb(call, verbose)
    if json_output:
        typer.echo(dumps_strict(result.as_dict(), indent=2))
    else:
        _stderr_console().print(result.render())


@app.command()
def tune(config: ConfigArg, run_dir: Annotated[Path | None, typer.Option(
             "--run-dir", help="Study directory (default: runs/<name>-tune).")] = None,
         set_: SetOpt = None,
         trials: Annotated[int | None, typer.Option(
             "--trials", min=1, help="Trials this invocation runs at most (default 20 unless "
             "--budget is a duration).", show_default=False)] = None,
         budget: Annotated[str | None, typer.Option(
             "--budget", help="Wall time (30m) or money (5usd, the planner's cost per trial) "
             "this invocation may spend.", show_default=False)] = None,
         storage: Annotated[str | None, typer.Option(
             "--storage", help="Optuna storage shared by workers: an RDB URL (default: "
             "SQLite in runs/<name>-tune/study.db) or journal:PATH (a journal file, for "
             "several worker processes).", show_default=False)] = None,
         study: Annotated[str | None, typer.Option(
             "--study", help="Study name (default: the config's name).",
             show_default=False)] = None,
         json_output: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Search CONFIG's tune.space (TPE, median pruning on the validation metric); each trial
    is a run directory under runs/<name>-tune/ and a nested MLflow run; writes
    best_config.yaml. Re-running continues the study."""
    _setup_logging(verbose)

    def call() -> Any:
        from entrena.api import tune as tune_fn

        return tune_fn(config, trials=trials, budget=budget, storage=storage, study=study,
                       run_dir=run_dir, overrides=set_ or [], console=_stderr_console())

    result = _call_verb(call, verbose)
    if json_output:
        typer.echo(dumps_strict(result.summary, indent=2, default=str))
        return
    from rich.table import Table

    summary = result.summary
    table = Table(title=f"study {summary['study']} ({summary['metric']}, "
                  f"{summary['direction']})")
    for column in ("trial", "state", "value", "params"):
        table.add_column(column)
    for row in summary["table"]:
        value = "" if row["value"] is None else f"{row['value']:.4f}"
        params = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in row["params"].items())
        table.add_row(str(row["number"]), row["state"], value, params)
    console = _stderr_console()
    console.print(table)
    if summary["importances"]:
        console.print("importances: " + ", ".join(
            f"{k} {v:.2f}" for k, v in summary["importances"].items()))
    cost = summary.get("cost") or {}
    console.print(f"{summary['trials']} trials, {summary['pruned']} pruned; cost "
                  f"{format_usd(cost.get('usd'))} ({cost.get('source', 'unknown')}); best "
                  f"config: {result.best_config}", highlight=False)


@app.command()
def report(runs: Annotated[list[Path], typer.Argument(
                metavar="RUN...", show_default=False,
                help="A run directory (runs/<name>); with --compare, two or more.")],
           compare: Annotated[bool, typer.Option(
               "--compare", help="One page comparing the runs side by side (config "
               "differences, curves overlaid, final metrics, time and cost), written to "
               "compare.html in the folder that holds them, or --output.")] = False,
           output: Annotated[Path | None, typer.Option(
               "--output", "-o", help="With --compare: the HTML file to write.",
               show_default=False)] = None,
           open_: Annotated[bool, typer.Option("--open", help="Open the report in a "
                                               "browser.")] = False,
           verbose: VerboseOpt = False) -> None:
    """Rebuild RUN/report.html: a headline, curves, efficiency, errors, baseline, diagnosis,
    data report, plan vs actual (self-contained: no network needed); or, with --compare,
    one page comparing several runs."""
    _setup_logging(verbose)
    if not compare and (len(runs) != 1 or output is not None):
        _fail(f"report: got {len(runs)} run directories"
              + (" and --output" if output is not None else "")
              + "; give one RUN, or add --compare to compare several", 2)

    def call() -> Any:
        from entrena.api.reporting import compare as compare_fn
        from entrena.api.reporting import report as report_fn

        return compare_fn(runs, output) if compare else report_fn(runs[0])

    path = _call_verb(call, verbose)
    sys.stderr.write(f"{'comparison' if compare else 'report'}: {path}\n")
    if open_:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())


@app.command()
def launch(config: ConfigArg,
           target: Annotated[str, typer.Option(
               "--target", help="torchrun, slurm, skypilot or docker.", show_default=False)],
           run_dir: RunDirOpt = None, set_: SetOpt = None,
           nodes: Annotated[int, typer.Option("--nodes", help="Machines.")] = 1,
           gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs (processes) "
                                                      "per machine.")] = 1,
           accelerator: Annotated[str, typer.Option(
               "--accelerator", help="skypilot: the GPU to ask for.")] = "A100",
           bucket: Annotated[str | None, typer.Option(
               "--bucket", help="skypilot: bucket holding the run directory (default "
               "entrena-<name>).", show_default=False)] = None,
           json_output: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Write what scaling CONFIG out needs into runs/<name>/launch/: a torchrun command, an
    sbatch script that requeues on preemption, a SkyPilot task whose restarts resume, or a
    Dockerfile pinned to the current versions. Nothing is started."""
    _setup_logging(verbose)

    def call() -> Any:
        from entrena.api import launch as launch_fn

        return launch_fn(config, target=target, nodes=nodes, gpus_per_node=gpus_per_node,
                         accelerator=accelerator, bucket=bucket, run_dir=run_dir,
                         overrides=set_ or [])

    result = _call_verb(call, verbose)
    if json_output:
        typer.echo(dumps_strict(result.as_dict(), indent=2))
    else:
        for path in result.files:
            _stderr_console().print(f"wrote {path}", highlight=False)


def _print_summary(result: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from entrena.core.metrics import split_scores
    from entrena.reporting.headline import headline_findings

    console = _stderr_console()
    metrics = result.metrics
    if result.already_finished:
        console.print(f"[bold]{result.run_dir}[/] is already finished; "
                      "use --restart to train again.")
    table = Table(title=f"run {result.run_dir}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for section in ("validation", "test"):
        for key, value in split_scores(metrics.get(section)):
            table.add_row(f"{section}.{key}", f"{value:.4g}" if abs(value) >= 10
                          else f"{value:.4f}")
    fit = metrics.get("fit", {})
    for key, fmt in (("epochs", "{}"), ("steps", "{}"), ("stop_reason", "{}"),
                     ("train_time_s", "{:.1f}"), ("throughput_samples_per_s", "{:.1f}"),
                     ("padding_fraction", "{:.3f}")):
        if fit.get(key) is not None:
            table.add_row(f"fit.{key}", fmt.format(fit[key]))
    budget = metrics.get("budget")
    if budget:
        table.add_row("budget", _budget_line(budget))
    findings = headline_findings(metrics)  # one class or one answer for nearly every row
    for found in findings:  # the figure quotes the model's answer: no markup in it
        table.add_row(f"[bold red]finding: {escape(str(found.get('code')))}[/]",
                      escape(str(found.get("figure"))))
    console.print(table)
    for found in findings:
        console.print(f"[bold red]{escape(str(found.get('message')))}[/]; "
                      f"{escape(str(found.get('change')))}", highlight=False)
    console.print(f"model: {result.model_dir}")


def _budget_line(budget: dict[str, Any]) -> str:
    """``"1.30 epochs in 7m 42s of 8m 00s"`` (and the overshoot when there was one)."""
    from entrena.units import format_duration

    line = (f"{budget.get('trained_epochs', 0):.2f} epochs in "
            f"{format_duration(budget.get('used_s') or 0)} of "
            f"{format_duration(budget.get('requested_s') or 0)}")
    if (budget.get("overshoot_s") or 0) > 0:
        line += f" (over by {format_duration(budget['overshoot_s'])})"
    return line


def main() -> None:
    """Console-script entry point. SIGTERM and SIGUSR1 stop it with one line and exit 143
    from here on, even before a verb installs its own handling (while its libraries import);
    Ctrl-C stays ``KeyboardInterrupt`` until then (exit 130)."""
    try:
        with stop_signals(("SIGTERM", "SIGUSR1")):
            app()
    except StopSignal as stop:
        sys.stderr.write(f"stopped by {stop.signal_name} while starting; nothing was written; "
                         "run the same command again\n")
        _exit_now(EXIT_PREEMPTED)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        _exit_now(EXIT_INTERRUPTED)
    except SystemExit as exc:
        if exc.code in (EXIT_INTERRUPTED, EXIT_PREEMPTED):
            _exit_now(exc.code)
        raise


def _exit_now(code: int) -> None:
    """Exit without unloading modules: after a preemption notice the checkpoint is on disk
    and seconds count, and tearing down the ~3,600 modules Lightning imports (torchmetrics,
    torchvision, sympy) takes about 5 s. Files are closed and streams flushed first."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
