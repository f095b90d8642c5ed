"""The command line: parse → call the verb → print. The only place errors become exit codes.

Heavy libraries (torch, transformers, mlflow) are imported inside the commands, never at
module level, so ``entrena --help`` starts fast.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from entrena import __version__
from entrena.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EntrenaError

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
    from rich.console import Console

    return Console(stderr=True)


def _setup_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    logger = logging.getLogger("entrena")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        handler = RichHandler(console=_stderr_console(), show_time=False, show_path=False,
                              markup=False, rich_tracebacks=False)
        handler.setLevel(logging.DEBUG if verbose else logging.INFO)
        handler.setFormatter(logging.Formatter("%(message)s"))
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
          json_output: Annotated[bool, typer.Option("--json", help="Print metrics.json to "
                                                    "stdout.")] = False,
          verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False) -> None:
    """Fine-tune a model as CONFIG says; writes runs/<name>/ (model, metrics, events, log)."""
    _setup_logging(verbose)
    try:
        from entrena.api import train as train_fn

        result = train_fn(config, run_dir=run_dir, overrides=set_ or [], restart=restart)
    except EntrenaError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001 - the one place internal errors become exit 1
        log_path = getattr(exc, "entrena_log", None) or "the run's train.log"
        _fail(f"internal error: {type(exc).__name__}: {exc}; traceback in {log_path}",
              EXIT_INTERNAL)
    if json_output:
        typer.echo(json.dumps(result.metrics, indent=2))
    else:
        _print_summary(result)


def _print_summary(result: Any) -> None:
    from rich.table import Table

    console = _stderr_console()
    metrics = result.metrics
    if result.already_finished:
        console.print(f"[bold]{result.run_dir}[/] is already finished; "
                      "use --restart to train again.")
    table = Table(title=f"run {result.run_dir}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for section in ("validation", "test"):
        for key in ("accuracy", "macro_f1", "loss"):
            value = metrics.get(section, {}).get(key)
            if value is not None:
                table.add_row(f"{section}.{key}", f"{value:.4f}")
    fit = metrics.get("fit", {})
    for key, fmt in (("epochs", "{}"), ("steps", "{}"), ("stop_reason", "{}"),
                     ("train_time_s", "{:.1f}"), ("throughput_samples_per_s", "{:.1f}"),
                     ("padding_fraction", "{:.3f}")):
        if fit.get(key) is not None:
            table.add_row(f"fit.{key}", fmt.format(fit[key]))
    console.print(table)
    console.print(f"model: {result.model_dir}")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
