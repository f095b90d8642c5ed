"""An Optuna study under a budget: TPE sampling, pruning, a storage shared by workers."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entrena.config.schema import ParamSpec
from entrena.errors import ConfigError, EntrenaError, NonFiniteError
from entrena.tuning.pruning import Reporter
from entrena.tuning.space import suggest

__all__ = ["JOURNAL_PREFIX", "StudyResult", "TrialFunction", "open_storage", "run_study",
           "running_trials"]

log = logging.getLogger("entrena")

TrialFunction = Callable[[int, dict[str, Any], Reporter, float], float]
"""``run(trial_number, params, report, max_time_s) -> objective value``: trains one trial
(``report`` feeds the pruner; raising ``optuna.TrialPruned`` marks the trial pruned)."""


class _NoTracebackOfEntrenaErrors(logging.Filter):
    """Optuna logs a failed trial with its traceback; an :class:`EntrenaError` says what and
    how in its message (the CLI's error line, or a ``NonFiniteError`` trial's failure), so its
    traceback is dropped; other exceptions keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], EntrenaError):
            record.exc_info, record.exc_text = None, None
        return True


@dataclass
class StudyResult:
    """What a study holds after this invocation (every worker's trials included).

    Attributes:
        best: ``{"trial": number, "value": …, "params": {…}}`` or ``None`` if no trial completed.
        trials: Trials in the study (all states).
        pruned: Pruned trials.
        completed: Completed trials.
        failed: Failed trials.
        ran: Trials this invocation ran.
        importances: Parameter importances (fANOVA), empty with fewer than 2 completed trials.
        table: One row per trial: number, state, value, params, duration_s.
    """

    study_name: str
    storage: str
    direction: str
    best: dict[str, Any] | None
    trials: int
    pruned: int
    completed: int
    failed: int
    ran: int
    stop_reason: str
    importances: dict[str, float] = field(default_factory=dict)
    table: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"study": self.study_name, "storage": self.storage, "direction": self.direction,
                "best": self.best, "trials": self.trials, "pruned": self.pruned,
                "completed": self.completed, "failed": self.failed, "ran": self.ran,
                "stop_reason": self.stop_reason, "importances": self.importances,
                "table": self.table}


JOURNAL_PREFIX = "journal:"
"""``--storage journal:PATH``: Optuna's journal storage, an append-only file under a file
lock; the storage Optuna recommends for several worker processes on one machine (or a shared
file system), with no database."""


def open_storage(url: str) -> Any:
    """An Optuna storage for ``url``: ``journal:PATH`` (a journal file), else an RDB URL
    (SQLite waits up to 60 s on a lock held by another worker).

    Raises:
        ConfigError: The URL cannot be opened (bad scheme, unreachable server, missing driver).
    """
    import optuna

    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url[len(JOURNAL_PREFIX):].removeprefix("//")).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        except OSError as exc:
            raise ConfigError(f"--storage {url!r}: cannot open the journal file {path} "
                              f"({exc.strerror or exc}); give a writable path") from None
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite:"):
        kwargs = {"connect_args": {"timeout": 60}}
    attempt = 0
    while True:
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except Exception as exc:  # noqa: BLE001 - sqlalchemy raises many kinds
            # Two workers opening a new storage at once both create its tables and stamp
            # its schema version; the slower one finds them made: open it again.
            attempt += 1
            racing = any(mark in str(exc) for mark in ("already exists", "alembic_version",
                                                      "database is locked"))
            if racing and attempt < 5:
                time.sleep(0.2 * attempt)
                continue
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(
                f"--storage {url!r}: cannot open the study storage ({type(exc).__name__}: "
                f"{first}); give a SQLite URL (sqlite:///runs/study.db), a journal file "
                f"(journal:runs/study.log), or a reachable postgresql:// or mysql:// URL with "
                f"its driver installed") from None


def run_study(run_trial: TrialFunction, *, space: dict[str, ParamSpec], study_name: str,
              storage: str, direction: str, pruner: str = "median", startup_trials: int = 2,
              n_trials: int | None = None, timeout_s: float | None = None,
              trial_max_time_s: float | None = None, seed: int = 0,
              importances: bool = True,
              clock: Callable[[], float] = time.monotonic) -> StudyResult:
    """Create or continue the study ``study_name`` in ``storage`` and run trials.

    Args:
        run_trial: Trains one trial (injected by the api layer).
        space: The search space.
        direction: ``"minimize"`` or ``"maximize"``.
        pruner: ``"median"``, ``"hyperband"`` or ``"none"``.
        startup_trials: Trials before the pruner and TPE take over.
        n_trials: Trials this invocation runs at most (``None``: until the time budget).
        timeout_s: Wall-time budget of this invocation: no trial starts after it, and a
            running trial's time limit ends at it.
        trial_max_time_s: Time limit of one trial.
        seed: The sampler's seed, offset by each trial's number (so that workers sharing
            the study draw differently, and a study run alone is reproducible).
        importances: Compute parameter importances (fANOVA: a random forest, seconds).

    Returns:
        The :class:`StudyResult`.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trial_log = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, _NoTracebackOfEntrenaErrors) for f in trial_log.filters):
        trial_log.addFilter(_NoTracebackOfEntrenaErrors())
    if n_trials is None and timeout_s is None:
        raise ConfigError("give --trials N or a time budget (--budget 30m); otherwise the "
                          "search would never end")
    started = clock()
    pruners = {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=startup_trials),
               "hyperband": lambda: optuna.pruners.HyperbandPruner(),
               "none": lambda: optuna.pruners.NopPruner()}
    store = open_storage(storage)
    study = optuna.create_study(study_name=study_name, storage=store, direction=direction,
                                load_if_exists=True, pruner=pruners[pruner]())

    def seeded(number: int) -> optuna.samplers.TPESampler:
        return optuna.samplers.TPESampler(n_startup_trials=startup_trials, seed=seed + number)

    study.sampler = seeded(len(study.get_trials(deepcopy=False)))
    ran = 0
    current: optuna.Trial | None = None

    def objective(trial: optuna.Trial) -> float:
        nonlocal ran, current
        ran += 1
        current = trial
        # Seeded by the trial's number, which the storage hands out once: workers sharing
        # the study (started together, with one config's seed) draw different points, and a
        # study run alone draws the same points every time. TPE keeps no state but its
        # random generator (it reads the history from the storage), so a new one loses
        # nothing; its relative search space is empty (independent sampling), so the one
        # the trial was created with has decided nothing yet.
        study.sampler = seeded(trial.number)
        params = suggest(trial, space)
        limit = trial_max_time_s or math.inf
        if timeout_s is not None:
            limit = min(limit, max(1.0, timeout_s - (clock() - started)))

        def report(value: float, step: int) -> bool:
            trial.report(value, step)
            return trial.should_prune()

        log.info("trial %d: %s", trial.number,
                 ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in params.items()))
        return run_trial(trial.number, params, report, limit)

    def out_of_time() -> bool:
        return timeout_s is not None and clock() - started >= timeout_s

    def stop_at_budget(study: optuna.Study, trial: Any) -> None:
        if out_of_time():
            study.stop()  # no trial starts after the budget

    if not out_of_time():
        try:
            study.optimize(objective, n_trials=n_trials, catch=(NonFiniteError,),
                           callbacks=[stop_at_budget], gc_after_trial=True)
        except BaseException:
            _fail_if_running(study, current)
            raise
    stop_reason = "budget" if out_of_time() else "trials"
    return _summary(study, storage, ran, stop_reason, importances)


def _fail_if_running(study: Any, trial: Any) -> None:
    """Mark this worker's last trial FAIL if it is still RUNNING: Optuna fails a trial on an
    ``Exception`` or ``KeyboardInterrupt``, but a ``BaseException`` it does not catch (a stop
    signal between the trial's training and its end, ``SystemExit``) would leave it RUNNING
    for good, taken for another worker's (:func:`running_trials`)."""
    if trial is None:
        return
    import optuna

    try:
        study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    except Exception as exc:  # noqa: BLE001 - the worker's own error is the one to raise
        log.debug("could not mark trial %d failed: %s", trial.number, exc)


def running_trials(study_name: str, storage: str) -> int:
    """Trials of the study that are RUNNING now: other workers' trials once a worker's
    :func:`run_study` has returned or raised (it ends its own).

    A worker killed outright (SIGKILL, a lost machine) leaves its trial RUNNING for good:
    Optuna fails such trials only from heartbeats, which the storages of
    :func:`open_storage` do not record.

    Args:
        study_name: The study in ``storage``.
        storage: Its storage URL (as for :func:`run_study`).

    Returns:
        The number of RUNNING trials.

    Raises:
        ConfigError: The storage cannot be opened.
        KeyError: No study ``study_name`` in it.
    """
    import optuna

    store = open_storage(storage)
    study_id = store.get_study_id_from_name(study_name)
    return len(store.get_all_trials(study_id, deepcopy=False,
                                    states=(optuna.trial.TrialState.RUNNING,)))


def _summary(study: Any, storage: str, ran: int, stop_reason: str,
             with_importances: bool) -> StudyResult:
    import optuna

    states = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False)
    completed = [t for t in trials if t.state == states.COMPLETE]
    best = None
    if completed:
        bt = study.best_trial
        best = {"trial": bt.number, "value": bt.value, "params": bt.params}
    importances: dict[str, float] = {}
    if with_importances and len(completed) >= 2 and len(study.best_trial.params) > 1:
        try:
            importances = {k: float(v) for k, v in
                           optuna.importance.get_param_importances(study).items()}
        except Exception as exc:  # noqa: BLE001 - a summary must not fail the study
            log.debug("parameter importances unavailable: %s", exc)
    table = [{"number": t.number, "state": t.state.name.lower(), "value": t.value,
              "params": t.params,
              "duration_s": t.duration.total_seconds() if t.duration else None,
              "last_step": t.last_step} for t in trials]
    return StudyResult(
        study_name=study.study_name, storage=storage, direction=study.direction.name.lower(),
        best=best, trials=len(trials), completed=len(completed),
        pruned=sum(t.state == states.PRUNED for t in trials),
        failed=sum(t.state == states.FAIL for t in trials), ran=ran, stop_reason=stop_reason,
        importances=importances, table=table)
