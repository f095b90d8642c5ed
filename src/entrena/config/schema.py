"""The configuration schema: pydantic models, one per section.

Each field's attribute docstring is its documentation: ``python -m entrena.cli.docs_reference``
renders it into ``docs/reference/config.md`` (a test keeps the two in step). Nothing here
imports torch.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from entrena.errors import closest_choice
from entrena.units import parse_budget, parse_duration_s

__all__ = [
    "StrictModel",
    "ParamSpec",
    "TuneConfig",
    "config_paths",
    "DataChecksConfig",
    "DataConfig",
    "ModelConfig",
    "EarlyStoppingConfig",
    "CLASSIFICATION_METRICS",
    "CheckpointConfig",
    "TrainConfig",
    "TrackingConfig",
    "Config",
]

MAX_EXPERIMENT_NAME_CHARS = 500
"""MLflow's longest experiment name (``mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH``)."""


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors, docstrings are descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True,
                              validate_assignment=True)


class DataChecksConfig(StrictModel):
    """What the data hygiene checks do with what they find (`entrena prepare`, and `entrena
    train` before it fits). Every finding is counted in `data_report.json` whatever the setting:
    `drop` removes the rows from the training data (validation and test rows are never dropped,
    so that scores stay comparable), `warn` keeps them and logs a warning, `error` stops with
    exit code 3 once the report is written."""

    exact_duplicates: Literal["drop", "warn", "error"] = "drop"
    """Training rows whose text and label repeat an earlier row's: `drop` keeps the first copy."""
    normalised_duplicates: Literal["drop", "warn", "error"] = "warn"
    """Training rows whose text repeats an earlier row's once lower-cased, stripped of
    punctuation and symbols and with whitespace collapsed (same label): `drop` keeps the first."""
    conflicting_labels: Literal["drop", "warn", "error"] = "warn"
    """Texts (compared normalised) that occur in the training data with different labels:
    `drop` removes every copy."""
    leakage: Literal["drop", "warn", "error"] = "drop"
    """Training rows whose text (compared normalised) also occurs in the validation or test data:
    `drop` removes them from training."""
    small_classes: Literal["warn", "error"] = "warn"
    """Classes with too few training rows to be split (fewer than 2, or fewer than
    1 / `validation_fraction` when validation is split off) or absent from a validation file:
    they stay in training and go unmeasured."""
    imbalance: Literal["warn", "error"] = "warn"
    """The ratio of the most to the least frequent class in training exceeds
    `max_imbalance_ratio`."""
    max_imbalance_ratio: Annotated[float, Field(ge=1.0)] = 10.0
    """Largest ratio of the most to the least frequent training class that passes `imbalance`."""
    truncation: Literal["warn", "error"] = "warn"
    """More than `max_truncated_fraction` of the training texts are longer than the chosen
    `model.max_length` (tokens) and get cut."""
    max_truncated_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = 0.1
    """Largest share of training texts cut at `model.max_length` that passes `truncation`."""


class DataConfig(StrictModel):
    """Where the examples come from, which columns hold what, and how the data is checked."""

    train: str
    """Training data: a CSV, TSV, JSONL or Parquet file, a glob pattern of shards
    (`data/part-*.csv`), or an fsspec URL (`https://…`, `s3://…`, `gs://…`; downloaded once
    into the cache). Relative paths resolve against the config file's folder."""
    validation: str | None = None
    """Validation data (same forms as `train`). When absent, `validation_fraction` of the
    training data is split off (stratified by label, seeded by `train.seed`; copies of one text,
    or rows of one `group_column` value, stay on one side)."""
    test: str | None = None
    """Test data (same forms as `train`), scored once with the best weights after training."""
    label_column: str = "label"
    """Column holding the class label (strings or integers, not a mix)."""
    group_column: str | None = None
    """Column whose rows must stay together when validation is split off (a user, a product,
    a document id); default: rows with the same normalised text stay together."""
    validation_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.1
    """Share of the training data held out for validation when no validation file is given."""
    max_train_samples: Annotated[int, Field(ge=1)] | None = None
    """Use at most this many training rows (a seeded, stratified subsample) for quick runs."""
    max_eval_samples: Annotated[int, Field(ge=1)] | None = None
    """Use at most this many validation and test rows each (seeded subsample)."""
    on_bad_rows: Literal["skip", "error"] = "skip"
    """Rows with an empty text or label: `skip` drops and counts them; `error` refuses the
    data (exit code 2) and names the rows."""
    label_map: dict[str, str] = {}
    """Rename labels before training, `{from: to}` (`{Billing: billing, Invoices: billing}`):
    several spellings or old names become one class. Names match as written (trimmed;
    numbers canonical, `1.0` is `1`); applied to every split, before `normalise_labels`. A
    `from` that occurs in no split is warned about. `metrics.json` `data.labels` lists the
    labels after the clean-up."""
    normalise_labels: Literal["case_and_space"] | None = None
    """Merge labels that differ only in case or spacing (`Billing`, `billing `): each merged
    class takes its most frequent training spelling. `null` keeps every spelling a class of
    its own (the `label_spelling` check warns about them)."""
    on_unseen_labels: Literal["error", "drop"] = "error"
    """Validation or test rows whose label never occurs in training: `error` refuses the data
    (exit code 2) and names the rows; `drop` removes and counts them."""
    encoding: str = "auto"
    """Text encoding of CSV/TSV/JSONL files: `auto` detects UTF-8 (with or without a
    byte-order mark), UTF-16 and Latin-1/Windows-1252; or a Python codec name (`cp1252`)."""
    delimiter: Literal["auto", ",", ";", "|", "tab"] = "auto"
    """Field separator of CSV/TSV files (`tab` for a tab): `auto` picks the one that splits the
    header and the first rows into the same number of fields (tab first for `.tsv`)."""
    cache_dir: str | None = None
    """Folder of the prepared-data cache (encoded examples and downloads), shared by runs;
    default: `$ENTRENA_CACHE_DIR`, else `~/.cache/entrena`."""
    checks: DataChecksConfig = DataChecksConfig()
    """Data hygiene checks."""

    @field_validator("label_map", mode="before")
    @classmethod
    def _label_names(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        return {_label_name(k): _label_name(v) for k, v in value.items()}

    @field_validator("delimiter", mode="before")
    @classmethod
    def _tab(cls, value: object) -> object:
        return "tab" if value == "\t" else value

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        if value == "auto":
            return value
        import codecs

        try:
            return codecs.lookup(value).name
        except LookupError:
            raise ValueError(f"unknown encoding {value!r}; use auto or a Python codec name "
                             "such as utf-8, utf-16, latin-1 or cp1252") from None


def _label_name(value: object) -> object:
    """A label as the data reader writes it: trimmed text, numbers canonical (``1.0`` → ``1``)."""
    if isinstance(value, bool) or value is None:
        return value  # refused by the str type, with pydantic's message
    if isinstance(value, int | float):
        number = float(value)
        return str(int(number)) if number.is_integer() else repr(number)
    return value.strip() if isinstance(value, str) else value


class ModelConfig(StrictModel):
    """Which network to train; each task adds its own keys."""

    name: str | None = None
    """The model: each task says which it takes (texts: an alias such as `minilm-l6`, a local
    Hugging Face model directory or a hub id; images: `small-cnn` or a timm model name; tables
    ignore it)."""
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1
    """Dropout before the classification head (and after each hidden layer of the
    tabular MLP)."""


CLASSIFICATION_METRICS = ("loss", "accuracy", "macro_f1")
"""The validation metrics of the classification tasks (what `train.early_stopping.monitor`
and `tune.metric` may name, as `validation.<metric>`)."""


def _known_metric(value: str, metrics: tuple[str, ...]) -> str:
    allowed = tuple(f"validation.{m}" for m in metrics)
    if value not in allowed:
        raise ValueError(f"must be one of {', '.join(allowed)}")
    return value


class EarlyStoppingConfig(StrictModel):
    """Stop when the monitored validation metric stops improving."""

    METRICS: ClassVar[tuple[str, ...]] = CLASSIFICATION_METRICS
    """The task's validation metrics (a task with other metrics subclasses this)."""

    enabled: bool = True
    """Turn early stopping on or off."""
    monitor: str = "validation.loss"
    """Metric to watch: `validation.loss`, `validation.accuracy` or `validation.macro_f1`
    (regression: `validation.rmse`, the default there, `.mae`, `.r2`,
    `.median_absolute_error`)."""
    mode: Literal["min", "max", "auto"] = "auto"
    """Whether lower (`min`) or higher (`max`) is better; `auto` infers it from the metric."""
    patience: Annotated[int, Field(ge=0)] = 2
    """Evaluations without improvement before training stops."""
    min_delta: Annotated[float, Field(ge=0.0)] = 0.0
    """Smallest change that counts as an improvement."""

    @field_validator("monitor")
    @classmethod
    def _known_monitor(cls, value: str) -> str:
        return _known_metric(value, cls.METRICS)


class CheckpointConfig(StrictModel):
    """When resumable checkpoints are written to `checkpoints/` (always at the end of each
    epoch, on a stop signal and when training ends; these keys add more)."""

    every_steps: Annotated[int, Field(ge=1)] | None = None
    """Also write one every this many optimizer steps; `null`: only by time and epoch."""
    every_minutes: Annotated[float, Field(gt=0.0)] | None = 10.0
    """Also write one when this many minutes passed since the last one; `null` turns it off."""
    keep_last: Annotated[int, Field(ge=1)] = 2
    """Resumable checkpoints kept; older ones are deleted, except the one at the best
    step. `best.pt` (the best weights) is never deleted."""


class TrainConfig(StrictModel):
    """How the fit runs."""

    max_epochs: Annotated[int, Field(ge=1)] = 3
    """Upper bound on passes over the training data (early stopping may end sooner)."""
    max_steps: Annotated[int, Field(ge=1)] | None = None
    """Upper bound on optimizer steps; overrides `max_epochs` when reached first."""
    batch_size: Annotated[int, Field(ge=1)] = 32
    """Examples per optimizer step per device (before gradient accumulation)."""
    eval_batch_size: Annotated[int, Field(ge=1)] | None = None
    """Examples per evaluation batch; defaults to twice `batch_size`."""
    learning_rate: Annotated[float, Field(gt=0.0)] = 1e-4
    """Peak learning rate of AdamW."""
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.01
    """AdamW weight decay (not applied to biases and LayerNorm weights)."""
    scheduler: Literal["linear", "cosine", "wsd", "plateau", "constant"] = "linear"
    """LR schedule: `linear` warmup then decay to 0, `cosine` warmup then cosine decay,
    `wsd` warmup-stable-decay (the peak held, then linear decay to 0 over the last 20% of the
    steps after warmup: Hägele et al., 2024, "Scaling Laws and Compute-Optimal Training Beyond
    Fixed Training Durations"), `plateau` = ReduceLROnPlateau on the early-stopping metric,
    `constant`."""
    warmup_fraction: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1
    """Share of the planned steps spent warming the learning rate up from 0 (linear, cosine,
    wsd)."""
    plateau_factor: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5
    """`plateau` scheduler: multiply the learning rate by this when the metric stalls."""
    plateau_patience: Annotated[int, Field(ge=0)] = 0
    """`plateau` scheduler: evaluations without improvement before the rate is cut."""
    precision: Literal["auto", "bf16-mixed", "16-mixed", "32-true", "bf16-true"] = "auto"
    """Numeric precision: `auto` picks bf16-mixed on GPUs that support it and on TPUs,
    16-mixed on older GPUs and Apple MPS; on a CPU bf16-mixed when it has native bf16 (AVX-512
    BF16 or AMX) and the model at least 1 M weights in linear layers (measured 1.5-1.7x faster
    there), else 32-true."""
    accelerator: Literal["auto", "cpu", "cuda", "mps", "tpu"] = "auto"
    """Device type; `auto` takes the best one present."""
    devices: Annotated[int, Field(ge=1)] | Literal["auto"] = 1
    """Devices (GPUs, or CPU processes) per node to train on; more than one starts one process
    each (DDP by default; on CPU over gloo). `auto`: every device present."""
    num_nodes: Annotated[int, Field(ge=1)] = 1
    """Machines taking part (launch them with `torchrun` or SLURM; see `entrena launch`)."""
    strategy: Literal["auto", "ddp", "fsdp", "deepspeed"] = "auto"
    """How several devices share the work (Lightning Fabric strategies): `auto` picks DDP for
    more than one device; `fsdp` shards parameters, gradients and optimizer state; `deepspeed`
    needs the deepspeed package. `batch_size` stays per device: the global batch is
    `batch_size` x devices x nodes."""
    seed: int = 42
    """Seed for splits, shuffling, dropout and initialisation."""
    deterministic: bool = False
    """Use deterministic algorithms (slower on GPU; same results run to run)."""
    early_stopping: EarlyStoppingConfig = EarlyStoppingConfig()
    """Early stopping settings."""
    restore_best_weights: bool = True
    """At the end of training, load back the weights of the best evaluation (by
    `early_stopping.monitor`), however training ended; `false` keeps the final weights
    (`checkpoints/best.pt` is still written). Turn it off when the validation split is too
    small to tell checkpoints apart (a few hundred rows: accuracy's standard error is ~2%)."""
    gradient_clip_norm: Annotated[float, Field(gt=0.0)] | None = 1.0
    """Clip the global gradient L2 norm to this; `null` turns clipping off."""
    gradient_accumulation_steps: Annotated[int, Field(ge=1)] = 1
    """Micro-batches whose gradients are summed before each optimizer step."""
    evals_per_epoch: Annotated[int, Field(ge=1)] = 1
    """Validation runs per epoch (early stopping and best weights see each of them)."""
    group_by_length: bool = True
    """Batch examples of similar token length together to cut padding."""
    num_threads: Annotated[int, Field(ge=1)] | None = None
    """CPU threads for torch; default: the cores this process may use (CPU affinity, cgroup
    quota, physical cores)."""
    compile: Literal["auto", True, False] = "auto"
    """`torch.compile` the model (inductor; the first steps of each new shape pay the
    compilation): `auto` compiles when the measured speed-up on this kind of device and
    precision (a CPU with AMX in bf16, another CPU in bf16 and a CPU in fp32 are measured
    apart, and on a CPU a model under 2 M parameters by the small models' measurement: no
    speed-up) repays the measured compile time within the planned training time, twice over
    (`entrena.engine.compiling.compile_decision`); `true` always, `false` never."""
    log_every_steps: Annotated[int, Field(ge=1)] = 10
    """Write a step record to events.jsonl every this many optimizer steps."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpoint settings."""
    callbacks: list[str] = []
    """Extra callbacks by registered name (`entrena.callbacks.registry.register_callback`, or
    a package's `entrena.callbacks` entry point), called after the built-in ones in this
    order; their state goes into every checkpoint."""
    max_time: str | None = None
    """Stop training after this much time (`90m`, `2h`, `1.5d`; summed over resumed
    sessions): a checkpoint is written, the best weights restored and the model tested.
    The schedule is not fitted to it (the learning rate is still high when it stops): to
    finish by a deadline, use `budget`."""
    budget: str | None = None
    """Fit the whole run to this much wall time, launch to finished run (`8m`, `1h30m`, a
    bare number of seconds), or to money (`$2.50`, through this machine's price per hour,
    `cost.usd_per_hour`: `ENTRENA_INSTANCE` or `local_usd_per_hour` in a catalog file).
    Before the first step the run says what it buys (optimizer steps, epochs, evaluations,
    fixed costs); the learning-rate schedule (`scheduler` linear or cosine, `warmup_fraction`)
    is laid over those steps and decays to 0 at the deadline; the plan is re-fitted from the
    fit's own measured times (after its first steps, at each evaluation and every tenth of
    the run) without the rate jumping; evaluations come at least 3 times. A budget longer
    than `max_epochs` needs changes nothing; one too small for a minimum of training is
    refused, naming the smallest that works. Not together with `max_time`."""
    on_nonfinite: Literal["stop", "skip_batch"] = "stop"
    """A NaN or infinite loss or gradient norm, or a diverged loss (see `divergence_factor`),
    caught before the weights change: `stop` saves the last good state (the last one whose
    loss was sane) and the batch's example ids and exits 1; `skip_batch` drops that batch's
    gradients, logs it and goes on, until `max_skipped_fraction` is passed."""
    divergence_factor: Annotated[float, Field(gt=1.0)] | None = 10.0
    """A step whose loss is above this many times the largest of its running median (last 20
    steps), the median of the fit's first 20 steps and, for a regression, the loss of
    predicting the training mean on that step's rows (so one batch holding a large,
    legitimate target is not diverged) counts as diverged and is handled as
    `on_nonfinite` says. Keeps one copy of the weights and optimizer state from before the
    latest step (memory), so that a stop goes back to the last sane state; `null` turns both
    off."""
    max_skipped_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = 0.05
    """`skip_batch` gives up, and stops as `stop` does, when more than this share of the steps
    attempted so far were skipped (and at least 3 were)."""

    @field_validator("budget", "max_time", mode="before")
    @classmethod
    def _time_limit(cls, value: object, info: ValidationInfo) -> object:
        """A bare number is seconds (`--set train.budget=480`); `max_time` is a positive
        duration, `budget` a positive duration or an amount of money."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = f"{value}s"
        if not isinstance(value, str):
            return value  # None, or a type error pydantic reports
        if info.field_name == "max_time":
            seconds = parse_duration_s(value)  # ValueError names the accepted units
            if seconds <= 0:
                raise ValueError(f"must be a positive duration, got {value!r}")
            return value
        try:
            parse_budget(value, bare="s", what="budget")
        except ValueError as exc:  # the loader already says "train.budget = … is invalid"
            raise ValueError(str(exc).removeprefix(f"invalid budget {value!r}: ")) from None
        return value.strip()


class TrackingConfig(StrictModel):
    """Experiment tracking (MLflow by default)."""

    enabled: bool = True
    """Log params, metrics and artifacts to the trackers of `backends`; `false` turns every
    tracker off. Failures warn and never stop training."""
    backends: Annotated[list[str], Field(min_length=1)] = ["mlflow"]
    """Trackers a run logs to, by name: `mlflow` (the store of `uri`), `tensorboard` (event
    files under `RUN/tensorboard/`), `wandb` (Weights & Biases, the `wandb` extra; offline
    under `RUN/wandb/` without `WANDB_MODE` or a key). More are registered with
    `entrena.tracking.base.register_tracker`; an unknown name lists the known ones. A tracker
    that fails warns once and is turned off; training goes on."""
    log_model: bool = True
    """With the `mlflow` backend: after `train` (and `export`), log the model as an MLflow
    `pyfunc` model (signature, input example, the same pre- and postprocessing as `entrena
    predict`) and register it in the model registry under the run's name, for `mlflow models
    serve` and `mlflow models build-docker`."""
    uri: str | None = None
    """MLflow tracking URI; default: a SQLite store `runs/mlflow.db` beside the run directory.
    The `MLFLOW_TRACKING_URI` environment variable wins when set."""
    experiment: str = "entrena"
    """MLflow experiment name (and W&B project): 1 to 500 characters (MLflow's limit,
    checked when the config loads rather than when tracking starts)."""

    @field_validator("experiment")
    @classmethod
    def _experiment_length(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; name the experiment (default: entrena)")
        if len(value) > MAX_EXPERIMENT_NAME_CHARS:
            raise ValueError(f"is {len(value)} characters; MLflow allows at most "
                             f"{MAX_EXPERIMENT_NAME_CHARS}: shorten it")
        return value


class ParamSpec(StrictModel):
    """One search dimension: a range (`low`, `high`, optional `log` or `step`) or `choices`.
    Integer bounds search integers; Optuna's rules apply (`low <= high`, `log` needs
    `low > 0`, `log` and `step` exclude each other)."""

    low: int | float | None = None
    """Smallest value."""
    high: int | float | None = None
    """Largest value."""
    log: bool = False
    """Sample on a log scale (learning rates)."""
    step: int | float | None = None
    """Spacing of the values searched (a grid within the range)."""
    choices: list[Any] | None = None
    """The values to choose from, instead of a range."""

    @model_validator(mode="after")
    def _optuna_rules(self) -> ParamSpec:
        if self.choices is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("give either choices or low/high, not both")
            if not self.choices:
                raise ValueError("choices must not be empty")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give low and high (a range) or choices (a list)")
        if self.low > self.high:
            raise ValueError(f"`low <= high` must hold, but got low={self.low} and "
                             f"high={self.high}; swap them")
        if self.log and self.low <= 0:
            raise ValueError(f"`low > 0` must hold for log: true, but got low={self.low}; "
                             "use a positive low or log: false")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be used together; drop one")
        if self.step is not None and self.step <= 0:
            raise ValueError(f"step must be positive, got {self.step}")
        return self


class TuneConfig(StrictModel):
    """Hyperparameter search (`entrena tune`; `entrena train` ignores this section)."""

    space: dict[str, ParamSpec] | None = None
    """Search space keyed by config paths (`train.learning_rate: {low: 1e-5, high: 1e-3,
    log: true}`, `train.batch_size: {choices: [16, 32]}`). Default: `train.learning_rate`
    1e-5 to 1e-3 (log), `train.batch_size` 16 or 32, `train.weight_decay` 0 to 0.1,
    `model.dropout` 0 to 0.3."""
    METRICS: ClassVar[tuple[str, ...]] = CLASSIFICATION_METRICS
    """The task's validation metrics (a task with other metrics subclasses this)."""

    metric: str = "validation.loss"
    """Validation metric optimised, reported to the pruner at every evaluation:
    `validation.loss`, `validation.accuracy` or `validation.macro_f1` (regression:
    `validation.rmse`, `.mae`, `.r2`, `.median_absolute_error`)."""
    direction: Literal["auto", "minimize", "maximize"] = "auto"
    """`auto`: as the task declares for the metric (minimise a loss, an error; maximise
    accuracy, macro-F1, R²)."""

    @field_validator("metric")
    @classmethod
    def _metric_of_task(cls, value: str) -> str:
        return _known_metric(value, cls.METRICS)
    pruner: Literal["median", "hyperband", "none"] = "median"
    """Stop unpromising trials early: `median` (below the median of earlier trials at the
    same step), `hyperband`, or `none`."""
    startup_trials: Annotated[int, Field(ge=0)] = 2
    """Trials run to the end before the pruner and TPE sampler take over from random search."""
    trial_max_time: str | None = "15m"
    """Time limit of one trial (`90s`, `15m`); the trial's `train.max_time`."""

    @field_validator("trial_max_time", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = f"{value}s"
        if isinstance(value, str) and parse_duration_s(value) <= 0:
            raise ValueError(f"must be a positive duration, got {value!r}")
        return value


def config_paths(schema: type[BaseModel] | None = None) -> set[str]:
    """Dotted paths of every searchable value of a config class (default :class:`Config`;
    a task's config adds its own keys): `train.learning_rate` …; not `name`, `task`,
    `tune.*`, nor sections themselves."""
    paths: set[str] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            candidates = [info.annotation, *getattr(info.annotation, "__args__", ())]
            sub = next((c for c in candidates
                        if isinstance(c, type) and issubclass(c, BaseModel)), None)
            if sub is not None and sub is not ParamSpec:
                walk(sub, f"{prefix}{name}.")
            else:
                paths.add(f"{prefix}{name}")

    walk(schema or Config, "")
    return {p for p in paths if p not in ("name", "task") and not p.startswith("tune.")}


class Config(StrictModel):
    """A whole entrena run."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    """Run name: the run directory is `runs/<name>` (letters, digits, `.`, `_`, `-`)."""
    task: str | None = None
    """What is learned: a registered task (`entrena.tasks.registry`; each task's page in the
    config reference lists its own keys). Absent: the default task."""
    data: DataConfig
    """Data section."""
    model: ModelConfig = ModelConfig()
    """Model section."""
    train: TrainConfig = TrainConfig()
    """Training section."""
    tracking: TrackingConfig = TrackingConfig()
    """Tracking section."""
    tune: TuneConfig = TuneConfig()
    """Search section (`entrena tune`)."""

    @model_validator(mode="after")
    def _budget_or_max_time(self) -> Config:
        """Not both `train.budget` and `train.max_time`. A whole-config rule (not
        TrainConfig's): its message starts with the key, so the loader names that key's line
        or `--set`, rather than printing the whole `train` section as the value."""
        train = self.train
        if train.budget is not None and train.max_time is not None:
            raise ValueError(f"train.max_time: {train.max_time!r} and train.budget "
                             f"{train.budget!r} are both set; a budget already ends the run in "
                             f"time, with the learning-rate schedule fitted to it: remove "
                             f"train.max_time")
        return self

    @model_validator(mode="after")
    def _searchable_space(self) -> Config:
        """`tune.space` keys must be config paths of this config's class (its task's keys
        included)."""
        space = self.tune.space
        if not space:
            return self
        paths = config_paths(type(self))
        problems = []
        for key in space:
            if key not in paths:
                close = closest_choice(key, sorted(paths), fragments=True)
                hint = f"did you mean '{close}'?" if close else \
                    "keys are config paths such as train.learning_rate"
                problems.append(f"tune.space: '{key}' is not a config key to search; {hint}")
        if problems:
            raise ValueError("\n".join(problems))
        return self
