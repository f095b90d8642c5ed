"""``entrena.tune``: an Optuna search over config values, each trial a tracked run."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from entrena.config import Config, LoadedConfig, parse_overrides
from entrena.config.loading import apply_overrides
from entrena.core.files import write_atomic, write_json_atomic
from entrena.core.rundir import RunPaths, read_status, resolve_run_dir, write_status
from entrena.errors import ConfigError
from entrena.hardware.catalog import load_catalog
from entrena.hardware.cost import HourlyPrice, hourly_price, run_cost
from entrena.tasks.registry import get_task, load_config
from entrena.units import Budget, format_usd, parse_budget, parse_duration_s

__all__ = ["TuneResult", "study_cost", "tune"]

log = logging.getLogger("entrena")


@dataclass
class TuneResult:
    """What ``entrena tune`` produced.

    Attributes:
        study_dir: ``runs/<name>-tune/``: the study's SQLite store, ``tune.json``,
            ``best_config.yaml`` and one run directory per trial (``trial-0003/``).
        summary: The ``--json`` document: ``best`` (``trial``, ``value``, ``params``),
            ``trials``, ``pruned``, ``completed``, ``importances``, ``table`` …, and
            ``cost`` (``usd`` summed over the trials, pruned and failed ones included).
        best_config: ``best_config.yaml``, or ``None`` if no trial completed.
    """

    study_dir: Path
    summary: dict[str, Any]
    best_config: Path | None

    def as_dict(self) -> dict[str, Any]:
        return self.summary


def _budget(budget: str | float | None) -> Budget | None:
    if budget is None:
        return None
    try:
        return parse_budget(budget, bare="usd", what="--budget")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_space(config: Any, fixed: dict[str, Any], space: dict[str, Any]) -> None:
    """Refuse, before the study opens, a search space that draws values the config refuses:
    each choice, each bound and, for a range drawn as floats, a value just above its low (an
    integer key refuses it) is tried on the config as a trial would apply it."""
    for key, spec in space.items():
        if spec.choices is not None:
            values, what = list(spec.choices), "choice"
        else:
            values, what = [spec.low, spec.high], "range value"
            drawn_as_int = isinstance(spec.low, int) and isinstance(spec.high, int) and (
                spec.step is None or isinstance(spec.step, int))
            if not drawn_as_int and spec.low < spec.high:
                values.append(math.nextafter(float(spec.low), float(spec.high)))
        for value in values:
            try:
                load_config(config, {**fixed, key: value})
            except ConfigError as exc:
                reason = str(exc).split(" is invalid: ", 1)[-1].replace("\n", "; ")
                raise ConfigError(
                    f"tune.space.{key}: the {what} {value!r} is not a valid {key} ({reason}); "
                    f"change tune.space.{key}"
                    + ("" if spec.choices is not None or not isinstance(spec.low, float)
                       or not spec.low.is_integer() else
                       " (integer bounds such as low: 1, high: 4 search whole numbers)")
                ) from None


def _cost_per_trial_usd(config: Any, run_dir: Path, overrides: dict[str, Any]) -> float:
    """The planner's cost of one trial on this machine (the tuned run as configured)."""
    from entrena.api.planning import plan

    result = plan(config, run_dir=run_dir, overrides=overrides, local_only=True)
    local = result.options[0]
    if not local.cost_usd:
        raise ConfigError(
            "--budget in USD: the planner has no price for this machine (it counts it free), "
            "so a money budget cannot limit the search; set local_usd_per_hour in a catalog "
            "file (--catalog / ENTRENA_CATALOG) or give --budget as a duration (30m)")
    return float(local.cost_usd)


def _parent_run(study_dir: Path, cfg: Config, study: str) -> str | None:
    """The study's MLflow parent run id (created once, reused and set RUNNING again by later
    invocations; :func:`_close_parent_run` ends it)."""
    if not cfg.tracking.enabled:
        return None
    from entrena.tracking.mlflow_tracker import (
        default_tracking_uri,
        exception_summary,
        open_client,
        store_lock,
    )

    marker = study_dir / "mlflow_parent_run_id"
    if marker.is_file():
        run_id = marker.read_text().strip() or None
        if run_id is not None:  # a study run again: its parent runs again until it ends
            try:
                open_client(default_tracking_uri(study_dir, cfg.tracking.uri)).update_run(
                    run_id, status="RUNNING")
            except Exception as exc:  # noqa: BLE001 - tracking never stops the work
                log.debug("could not reopen the study's MLflow parent run: %s", exc)
        return run_id
    try:
        uri = default_tracking_uri(study_dir, cfg.tracking.uri)
        client = open_client(uri)  # a store that cannot open costs 5 s, not MLflow's retries
        with store_lock(uri):  # a new store's tables: created once, not raced
            found = client.get_experiment_by_name(cfg.tracking.experiment)
        if found is None:
            (study_dir / "mlartifacts").mkdir(parents=True, exist_ok=True)
            experiment = client.create_experiment(
                cfg.tracking.experiment,
                artifact_location=(study_dir / "mlartifacts").resolve().as_uri())
        else:
            experiment = found.experiment_id
        run = client.create_run(experiment, run_name=f"{study} (study)",
                                tags={"entrena.study": study})
        marker.write_text(run.info.run_id)
        return run.info.run_id
    except Exception as exc:  # noqa: BLE001 - tracking never stops the work
        log.warning("MLflow parent run not created (%s); trials are tracked unnested",
                    exception_summary(exc))
        return None


def study_cost(study_dir: Path, price: HourlyPrice) -> dict[str, Any]:
    """The cost of every trial of a study, summed: each finished trial's ``cost`` in its
    ``metrics.json``, each pruned or failed one's in its ``status.json``.

    Args:
        study_dir: ``runs/<name>-tune/`` with its ``trial-NNNN/`` run directories.
        price: This machine's price (its source is reported; each trial's own is summed).

    Returns:
        ``{"usd", "wall_time_s", "trials" (trials with a cost), "usd_per_hour", "source"}``.
    """
    usd = wall = 0.0
    counted = 0
    for trial in sorted(study_dir.glob("trial-*")):
        paths = RunPaths(trial)
        cost = None
        try:
            cost = json.loads(paths.metrics.read_text(encoding="utf-8")).get("cost")
        except (OSError, ValueError, AttributeError):
            cost = (read_status(paths) or {}).get("cost")
        if isinstance(cost, dict) and isinstance(cost.get("usd"), int | float):
            usd += float(cost["usd"])
            wall += float(cost.get("wall_time_s") or 0.0)
            counted += 1
    return {"usd": usd, "wall_time_s": wall, "trials": counted,
            "usd_per_hour": price.usd_per_hour, "source": price.source}


def _close_pruned_run(study_dir: Path, cfg: Config, trial_dir: Path) -> None:
    """Mark a pruned trial's MLflow run KILLED (the loop left it RUNNING)."""
    if not cfg.tracking.enabled:
        return
    try:
        from entrena.tracking.mlflow_tracker import default_tracking_uri, open_client

        client = open_client(default_tracking_uri(study_dir, cfg.tracking.uri))
        experiment = client.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is None:
            return
        for run in client.search_runs([experiment.experiment_id],
                                      filter_string=f"tags.`entrena.run_dir` = "
                                                    f"'{trial_dir.resolve()}'"):
            client.set_tag(run.info.run_id, "entrena.pruned", "true")
            client.set_terminated(run.info.run_id, status="KILLED")
    except Exception as exc:  # noqa: BLE001 - tracking never stops the search
        log.debug("could not close the pruned trial's MLflow run: %s", exc)


def _close_parent_run(study_dir: Path, cfg: Config, parent: str | None, status: str,
                      summary: dict[str, Any] | None = None, *, study: str,
                      storage: str) -> None:
    """End the study's MLflow parent run with ``status`` (FINISHED, FAILED or KILLED), its
    best value and trial counts logged, if this worker is the study's last: while a trial of
    the study is RUNNING (another worker's) the parent is left RUNNING for that worker to end.
    A later ``tune`` of the same study reopens it (:func:`_parent_run`). Tracking never
    stops the study: errors are logged at debug.

    A worker killed outright (SIGKILL) leaves its trial RUNNING in the Optuna storage for
    good (no heartbeats), so the parent then stays RUNNING after every later worker too;
    mark that trial failed (``study.tell(number, state=TrialState.FAIL)``) and the next
    worker to finish ends it.
    """
    if parent is None:
        return
    from entrena.tuning import running_trials

    try:
        running = running_trials(study, storage)
    except Exception as exc:  # noqa: BLE001 - unknown: end it, as a lone worker would
        log.debug("could not count the study's running trials: %s", exc)
        running = 0
    if running:
        log.debug("study %s: other workers still running %d trials; the last to finish "
                  "ends the MLflow parent run", study, running)
        return
    try:
        from entrena.tracking.mlflow_tracker import default_tracking_uri, open_client

        client = open_client(default_tracking_uri(study_dir, cfg.tracking.uri))
        if summary is not None:
            for key in ("trials", "pruned", "completed"):
                if isinstance(summary.get(key), int):
                    client.log_metric(parent, f"study.{key}", summary[key])
            best = summary.get("best") or {}
            if isinstance(best.get("value"), int | float):
                client.log_metric(parent, f"best.{summary['metric']}", float(best["value"]))
                client.set_tag(parent, "entrena.best_trial", str(best.get("trial")))
        client.set_terminated(parent, status=status)
    except Exception as exc:  # noqa: BLE001 - tracking never stops the search
        log.debug("could not end the study's MLflow parent run: %s", exc)


def _direction(cfg: Config, metric: str) -> str:
    """``tune.direction``, or under ``auto`` what the task declares for the metric
    (``higher_is_better``), else ``minimize`` for a loss and ``maximize`` for the rest."""
    if cfg.tune.direction != "auto":
        return cfg.tune.direction
    declared = getattr(get_task(cfg.task), "higher_is_better", {}).get(metric.split(".", 1)[-1])
    higher = declared if declared is not None else not metric.endswith("loss")
    return "maximize" if higher else "minimize"


def _trial_count(trials: int | None, limit: Any, budget: Any, config: Any, study_dir: Path,
                 fixed: dict[str, Any]) -> int | None:
    """Trials this invocation runs at most: ``trials``, 20 without a time budget, and no more
    than a money budget buys at the planner's cost per trial on this machine.

    Raises:
        ConfigError: The money budget does not buy one trial.
    """
    if trials is None and (limit is None or limit.usd is not None):
        trials = 20
    if limit is None or limit.usd is None:
        return trials
    per_trial = _cost_per_trial_usd(config, study_dir / "plan", fixed)
    affordable = math.floor(limit.usd / per_trial)
    log.info("budget %s at %s a trial (planner, this machine): %d trials", limit,
             format_usd(per_trial), affordable)
    if affordable < 1:
        raise ConfigError(f"--budget {budget}: one trial costs about {format_usd(per_trial)} "
                          f"on this machine (planner); raise the budget")
    return min(trials or affordable, affordable)


def _trial_runner(config: Any, cfg: Config, study_dir: Path, fixed: dict[str, Any],
                  space: dict[str, Any], metric: str, price: Any,
                  trial_budget_s: float | None, tags: dict[str, str], console: Any) -> Any:
    """``run_trial(number, params, report, max_time_s) -> metric value``: one trial trained
    into ``study_dir/trial-NNNN`` with the pruning callback; a pruned or failed trial's
    status gets its cost before the exception goes on."""
    from entrena.tuning.pruning import DATA_POSITION_KEYS

    # Trials whose steps hold different numbers of samples are compared at equal data seen.
    by_data = any(key in space for key in DATA_POSITION_KEYS)
    if by_data:
        log.info("pruning compares trials at equal data seen (thousandths of an epoch), not "
                 "at equal optimizer steps: the space varies %s",
                 ", ".join(k for k in DATA_POSITION_KEYS if k in space))

    def run_trial(number: int, params: dict[str, Any], report: Any, max_time_s: float) -> float:
        from entrena.api.training import train
        from entrena.tuning import PruningCallback

        trial_dir = study_dir / f"trial-{number:04d}"
        limit_key, limit_s = ("train.max_time", max_time_s) if trial_budget_s is None \
            else ("train.budget", min(trial_budget_s, max_time_s))
        values = {**fixed, **params, limit_key: f"{max(1, int(limit_s))}s",
                  "tracking.log_model": False}  # trials are tracked; no registry version each
        pruning = PruningCallback(
            report, metric, by_data=by_data,
            evals_per_epoch=int(params.get("train.evals_per_epoch",
                                           cfg.train.evals_per_epoch)))
        started = time.perf_counter()
        try:
            result = train(config, run_dir=trial_dir, overrides=values, restart=True,
                           callbacks=[pruning], console=console, tracking_tags=tags)
        except Exception as exc:
            import optuna

            cost = run_cost(time.perf_counter() - started, price)  # metrics.json has none
            if isinstance(exc, optuna.TrialPruned):
                write_status(RunPaths(trial_dir), "pruned", message=str(exc), cost=cost)
                _close_pruned_run(study_dir, cfg, trial_dir)
            elif (status := read_status(RunPaths(trial_dir))) is not None:
                write_status(RunPaths(trial_dir), status.pop("status"),
                             **{k: v for k, v in status.items() if k != "time"}, cost=cost)
            raise
        section, key = metric.split(".", 1)
        return float(result.metrics[section][key])

    return run_trial


def _write_best_config(loaded: LoadedConfig, best: dict[str, Any] | None, study_dir: Path,
                       name: str, metric: str) -> Path | None:
    """``best_config.yaml``: the config with the best trial's parameters (``None`` when no
    trial completed)."""
    if best is None:
        return None
    config = loaded.portable_dump()
    config.pop("tune", None)
    config = apply_overrides(config, best["params"])
    path = study_dir / "best_config.yaml"
    text = (f"# best of study {name}: trial {best['trial']}, {metric} = "
            f"{best['value']:.6g}\n" + yaml.safe_dump(config, sort_keys=False))
    # Workers finishing together each write it: whole files only, never a mix.
    write_atomic(path, lambda handle: handle.write(text.encode("utf-8")), durable=False)
    return path


def tune(config: str | Path | dict[str, Any] | Config, *, trials: int | None = None,
         budget: str | float | None = None, storage: str | None = None,
         study: str | None = None, run_dir: str | Path | None = None,
         overrides: list[str] | dict[str, Any] | None = None, console: Any = None) -> TuneResult:
    """Search ``tune.space`` with TPE and median pruning; each trial is a run directory and
    an MLflow run nested under the study's.

    Args:
        config: A YAML file, a dict or a :class:`~entrena.config.Config`.
        trials: Trials this invocation runs at most (default 20 unless a time budget is given).
        budget: ``"30m"`` caps this invocation's wall time (a running trial stops at it);
            ``"5usd"`` caps its cost at the planner's cost per trial on this machine.
        storage: An Optuna storage URL; default ``sqlite:///<study dir>/study.db``, so a study
            re-run continues; ``journal:PATH`` (Optuna's journal file) for several worker
            processes on one machine; a PostgreSQL/MySQL URL lets workers on several
            machines share it.
        study: The study name (default: the config's ``name``).
        run_dir: The study directory (default ``runs/<name>-tune``).
        overrides: ``--set`` style overrides applied to every trial.

    Returns:
        The :class:`TuneResult`.

    Raises:
        ConfigError: Invalid config or search space (a choice or bound the config refuses,
            before the study opens), budget in an unknown unit, a storage
            URL that cannot be opened, or a money budget without a price for this machine.
    """
    from entrena.tuning import DEFAULT_SPACE, run_study

    limit = _budget(budget)
    fixed = overrides if isinstance(overrides, dict) else parse_overrides(overrides or [])
    loaded = load_config(config, fixed)
    cfg = loaded.config
    name = study or cfg.name
    study_dir = Path(run_dir) if run_dir is not None else resolve_run_dir(cfg.name, None).with_name(
        f"{cfg.name}-tune")
    space = cfg.tune.space or DEFAULT_SPACE
    _check_space(config, fixed, space)
    study_dir.mkdir(parents=True, exist_ok=True)
    storage_url = storage or f"sqlite:///{(study_dir / 'study.db').resolve()}"
    metric = cfg.tune.metric
    direction = _direction(cfg, metric)
    trial_limit_s = parse_duration_s(cfg.tune.trial_max_time) if cfg.tune.trial_max_time else None
    trials = _trial_count(trials, limit, budget, config, study_dir, fixed)
    price = hourly_price(load_catalog())
    # A budget in the config fits each trial's whole run to it (and to what the study has
    # left) instead of cutting it off at train.max_time.
    trial_budget_s = None
    if cfg.train.budget:
        from entrena.planning.budget import budget_seconds

        trial_budget_s = budget_seconds(cfg.train.budget, price.usd_per_hour, price.source)
    parent = _parent_run(study_dir, cfg, name)
    tags = {"mlflow.parentRunId": parent, "entrena.study": name} if parent else {}
    run_trial = _trial_runner(config, cfg, study_dir, fixed, space, metric, price,
                              trial_budget_s, tags, console)
    log.info("study %s in %s: %s trials, budget %s, space %s", name, storage_url,
             trials if trials is not None else "unlimited", limit or "none", ", ".join(space))
    try:
        result = run_study(run_trial, space=space, study_name=name, storage=storage_url,
                           direction=direction, pruner=cfg.tune.pruner,
                           startup_trials=cfg.tune.startup_trials, n_trials=trials,
                           timeout_s=limit.seconds if limit is not None else None,
                           trial_max_time_s=trial_limit_s, seed=cfg.train.seed)
    except BaseException as exc:
        _close_parent_run(study_dir, cfg, parent,
                          "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED",
                          study=name, storage=storage_url)
        raise
    summary = {"metric": metric, **result.as_dict(), "study_dir": str(study_dir),
               "cost": study_cost(study_dir, price)}
    best_path = _write_best_config(loaded, result.best, study_dir, name, metric)
    if best_path is not None:
        summary["best_config"] = str(best_path)
    write_json_atomic(study_dir / "tune.json", summary, durable=False)
    _close_parent_run(study_dir, cfg, parent, "FINISHED", summary, study=name,
                      storage=storage_url)
    log.info("study %s: %d trials (%d pruned, %d completed); %s; cost %s", name,
             result.trials, result.pruned, result.completed,
             f"best trial {result.best['trial']}" if result.best else "no trial completed",
             format_usd(summary["cost"]["usd"]))
    return TuneResult(study_dir, summary, best_path)
