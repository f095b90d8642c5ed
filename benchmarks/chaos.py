"""Kill `entrena train examples/tiny/config.yaml` again and again; check that it always resumes
exactly, and record the figures in docs/benchmarks-journal.md.

Usage: .venv/bin/python benchmarks/chaos.py [--kills 20] [--signals 5] [--phase-signals 3]
                                            [--random N] [--seed 0] [--no-write] [--json]

1. An uninterrupted reference run.
2. One run of the same config, disrupted ``--kills`` times with SIGKILL and ``--signals``
   times with SIGTERM, in a seeded random order, restarted after each. The disruptions aim at
   random steps spread over the whole run, in increasing order (each process is watched
   through its per-step records in events.jsonl); a SIGKILL lands up to two steps' time after
   its target step, or (every third one) the moment a checkpoint's temporary file appears
   after it, i.e. in the middle of a checkpoint write.
3. After each disruption: every complete checkpoint must verify (its SHA-256 and size match
   its marker) and load with ``torch.load``; the restart must say ``resuming from step S``
   with S the newest complete checkpoint's step (or start over when there is none). After a
   SIGTERM the process must exit 143 having saved the step it reports.
4. ``--phase-signals`` more SIGTERMs land outside the fit: all but one at a random moment
   between the start of a process and its fit (reading the config, preparing the data,
   planning and its probe), the last one right after the run's last training step (the final
   evaluation, testing, saving). Each must exit 143 with one ``stopped by SIGTERM …`` line (or
   the fit's own ``saved checkpoint`` line when it landed inside the fit); the next process
   must resume from the newest complete checkpoint, and after the last one train no step.
5. ``--random N`` replaces 2 and 4: N signals, each SIGKILL or SIGTERM (even odds) at a random
   phase (before the fit 3 : in it 5 : after its last step 2; an early one at one of
   EARLY_MARKS, a late one just after one of LATE_MARKS: the final checkpoint, evaluation and
   testing, saving). Every restart must then resume from the newest complete checkpoint, or,
   with none, delete an unfinished directory saying it starts over (or start a new run when
   there was none); once training was over, it must train no step. Its figures go to their
   own section of docs/benchmarks-journal.md (``chaos-phases``).
6. The last restart runs to the end; its ``model/`` files must equal the reference's, byte
   for byte.

Both runs use ``--set train.deterministic=true train.num_threads=1 tracking.enabled=false
train.checkpoint.every_steps=5 train.log_every_steps=1`` (MLflow is off to keep restarts
short; exactness on CPU needs the same thread count; the last two only change how often
files are written, not the weights). Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT, machine, today, write_section  # noqa: E402

CONFIG = ROOT / "examples" / "tiny" / "config.yaml"
SETTINGS = ["train.deterministic=true", "train.num_threads=1", "tracking.enabled=false",
            "train.checkpoint.every_steps=5", "train.log_every_steps=1"]
RESUMING = re.compile(r"^resuming from step (\d+), epoch (\d+); (.+) of training lost$", re.M)
SAVED = re.compile(r"saved checkpoint at step (\d+) \((SIG\w+)\), ([\d.]+)s after the signal")
STOPPED = re.compile(r"^stopped by SIGTERM (.+)$", re.M)


def command(run_dir: Path) -> list[str]:
    entrena = Path(sys.executable).with_name("entrena")
    sets = [arg for setting in SETTINGS for arg in ("--set", setting)]
    return [str(entrena), "train", str(CONFIG), "--run-dir", str(run_dir), *sets]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update({"COLUMNS": "200", "NO_COLOR": "1", "TOKENIZERS_PARALLELISM": "false"})
    return env


def fit_starts(run_dir: Path) -> list[float]:
    try:
        lines = (run_dir / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    starts = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by SIGKILL
        if record.get("type") == "fit_start":
            starts.append(record["time"])
    return starts


def step_records(run_dir: Path) -> list[tuple[float, int]]:
    """(time, step) of every ``step`` record in events.jsonl."""
    try:
        lines = (run_dir / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        if '"type": "step"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by SIGKILL
        found.append((record["time"], record["step"]))
    return found


def fit_ends(run_dir: Path) -> list[float]:
    """Times of the ``fit_end`` records (the loop is done; evaluation and testing follow)."""
    try:
        lines = (run_dir / "events.jsonl").read_text().splitlines()
    except OSError:
        return []
    ends = []
    for line in lines:
        if '"type": "fit_end"' in line:
            try:
                ends.append(json.loads(line)["time"])
            except ValueError:
                continue  # a line cut by SIGKILL
    return ends


def saving_since(run_dir: Path, since: float) -> bool:
    """A file of ``model/`` was written after ``since`` (Unix time): the model is being saved."""
    try:
        return any(p.stat().st_mtime >= since for p in (run_dir / "model").iterdir())
    except OSError:
        return False


def planning_since(run_dir: Path, since: float) -> bool:
    """``status.json`` was written after ``since`` (Unix time): the data are prepared and the
    process is planning (building the model and backend, the probe) or past it."""
    try:
        return (run_dir / "status.json").stat().st_mtime >= since
    except OSError:
        return False


def entry_time() -> float:
    """Seconds from launching ``entrena`` to its entry point installing the stop handlers:
    twice the slowest of three ``entrena --version`` (the interpreter's start and the
    command line's import). A SIGTERM before that meets Python's default action (exit -15,
    nothing written), which no program can change; the harness does not count it."""
    entrena = Path(sys.executable).with_name("entrena")
    times = []
    for _ in range(3):
        began = time.monotonic()
        subprocess.run([str(entrena), "--version"], env=environment(), capture_output=True,
                       check=True)
        times.append(time.monotonic() - began)
    return 2 * max(times)


EARLY_MARKS = ("start", "planning")
"""Where a signal before the fit lands, drawn at random: 2-30% of the reference's time from
start to fit after the process started, but not before its entry point (:func:`entry_time`)
(importing, reading the config, preparing the data),
or 0-1 s after the process wrote ``status.json`` (planning and its probe). Not a share of
the whole time to the fit: a resumed process reads the prepared data from the cache and
starts its fit sooner than the reference, and a signal meant for "before the fit" could
land after the run had finished."""

LATE_MARKS = ("last step", "fit end", "saving")
"""Where a late signal lands, drawn at random: right after the last training step (the final
checkpoint), after the loop's ``fit_end`` (the final evaluation, testing, baselines), or once
the model's files are being written (saving, metrics, report). A moment after a mark rather
than a random time: the time of that phase varies with the machine's load, and a signal
that came after the run finished would disrupt nothing."""


def writing(checkpoints: Path) -> bool:
    """A checkpoint write is under way (or was cut short): a temporary or marker-less file."""
    try:
        names = os.listdir(checkpoints)
    except OSError:
        return False
    return any((n.startswith(".step-") and n.endswith(".tmp"))
               or (n.startswith("step-") and n.endswith(".pt") and n[:-3] + ".json" not in names)
               for n in names)


def check_checkpoints(checkpoints: Path) -> tuple[int | None, int, int]:
    """(newest complete step, complete checkpoints, unreadable ones) without changing anything."""
    import torch

    from entrena.engine.checkpointing import CheckpointStore

    store = CheckpointStore(checkpoints)
    complete = store.complete()
    unreadable = 0
    for info in complete:
        try:
            if store.verify(info) is not None:
                raise ValueError(store.verify(info))
            torch.load(info.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any failure to read counts
            unreadable += 1
            print(f"  UNREADABLE {info.path.name}: {exc}", file=sys.stderr)
    return (complete[0].step if complete else None), len(complete), unreadable


class Process:
    def __init__(self, run_dir: Path, log: Path):
        self.run_dir, self.log = run_dir, log
        self.handle = log.open("w")
        self.started = time.monotonic()
        self.launched = time.time() - 0.01  # fit_start records carry Unix times (ms)
        self.popen = subprocess.Popen(command(run_dir), cwd=run_dir.parent.parent,
                                      env=environment(), stdout=subprocess.DEVNULL,
                                      stderr=self.handle)

    def wait_for_fit(self, timeout: float = 600) -> float | None:
        """Seconds from launch until this process's fit began (None: it exited first)."""
        while time.monotonic() - self.started < timeout:
            if any(t >= self.launched for t in fit_starts(self.run_dir)):
                return time.monotonic() - self.started
            if self.popen.poll() is not None:
                return None
            time.sleep(0.01)
        raise TimeoutError("the fit did not start")

    def last_step(self) -> int:
        """The highest step this process logged (``train.log_every_steps=1``)."""
        steps = [step for t, step in step_records(self.run_dir) if t >= self.launched]
        return max(steps, default=-1)

    def wait_for_step(self, target: float, timeout: float = 600) -> bool:
        """Wait until this process logged a step >= ``target`` (False: it exited first)."""
        while time.monotonic() - self.started < timeout:
            if self.last_step() >= target:
                return True
            if self.popen.poll() is not None:
                return False
            time.sleep(0.002)
        raise TimeoutError(f"step {target} was not reached")

    def finish(self) -> tuple[int, str]:
        code = self.popen.wait()
        self.handle.close()
        return code, self.log.read_text()


def reference_run(work: Path) -> tuple[dict[str, bytes], float, dict, float, float]:
    """(model files, fit s, metrics, process start to fit s, last step to exit s)."""
    run_dir = work / "runs" / "reference"
    run_dir.parent.mkdir(parents=True)
    process = Process(run_dir, work / "reference.log")
    start_s = process.wait_for_fit() or 0.0
    last_seen, last = time.monotonic(), -1
    while process.popen.poll() is None:  # when the last step was logged: the late phase
        step = process.last_step()
        if step > last:
            last_seen, last = time.monotonic(), step
        time.sleep(0.01)
    late_s = time.monotonic() - last_seen
    code, stderr = process.finish()
    if code != 0:
        sys.exit(f"the reference run failed ({code}):\n{stderr[-3000:]}")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    fit_s = events[-1]["time"] - events[0]["time"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return model_files(run_dir), fit_s, metrics, start_s, late_s


def model_files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "model").iterdir())}


PHASES = {"kill": ("fit", "SIGKILL"), "term": ("fit", "SIGTERM"),
          "early": ("early", "SIGTERM"), "early-kill": ("early", "SIGKILL"),
          "late": ("late", "SIGTERM"), "late-kill": ("late", "SIGKILL")}
"""Each kind of disruption: (phase, signal). Early: between a process's start and its fit
(reading the config, preparing the data, planning, the probe); fit: at a random step; late:
after the last training step (the final evaluation, testing, saving the model)."""


def random_plan(rng: random.Random, count: int) -> list[str]:
    """``count`` disruptions, each a random signal (SIGKILL or SIGTERM, even odds) at a random
    phase (early 3 : fit 5 : late 2); the late ones come last, as a run has one end."""
    kinds = []
    for phase in rng.choices(["early", "fit", "late"], weights=[3, 5, 2], k=count):
        kill = rng.random() < 0.5
        kinds.append({"early": ("early-kill", "early"), "fit": ("kill", "term"),
                      "late": ("late-kill", "late")}[phase][0 if kill else 1])
    return [k for k in kinds if PHASES[k][0] != "late"] + \
        [k for k in kinds if PHASES[k][0] == "late"]


def fixed_plan(rng: random.Random, kills: int, signals: int, phase_signals: int) -> list[str]:
    """``kills`` SIGKILLs and ``signals`` SIGTERMs in the fit, ``phase_signals`` SIGTERMs
    outside it (the last one after the last step), in a seeded random order."""
    plan = ["kill"] * kills + ["term"] * signals + ["early"] * max(0, phase_signals - 1)
    rng.shuffle(plan)
    return plan + ["late"] * min(1, phase_signals)


STARTING_OVER = "holds an unfinished run without a complete checkpoint; starting it over"
ALREADY_FINISHED = "is already finished; use --restart"


def run_chaos(kills: int, signals: int, seed: int, work: Path, phase_signals: int = 0,
              random_signals: int = 0) -> dict:
    rng = random.Random(seed)
    expected, fit_s, ref_metrics, start_s, late_s = reference_run(work)
    entry_s = entry_time()
    total_steps = ref_metrics["fit"]["steps"]
    print(f"reference: {total_steps} steps, fit {fit_s:.1f}s, start to fit {start_s:.1f}s, "
          f"last step to exit {late_s:.1f}s", file=sys.stderr)
    plan = (random_plan(rng, random_signals) if random_signals
            else fixed_plan(rng, kills, signals, phase_signals))
    # Where each disruption in the fit lands: steps spread over the whole run, in order, so
    # that kills meet every phase (mid-epoch, evaluations, epoch ends, checkpoint writes).
    in_fit = [i for i, kind in enumerate(plan) if PHASES[kind][0] == "fit"]
    targets = dict(zip(in_fit, sorted(rng.uniform(0.03, 0.97) * total_steps for _ in in_fit),
                       strict=True))
    step_s = fit_s / total_steps
    run_dir = work / "runs" / "chaos"
    checkpoints = run_dir / "checkpoints"
    records: list[dict] = []
    failures: list[str] = []
    expected_resume: int | None = None
    kill_count = 0
    for index, kind in enumerate(plan + ["finish"]):
        phase, signal_name = PHASES.get(kind, ("", ""))
        existed = run_dir.is_dir() and any(p.name != "data_report.json"
                                           for p in run_dir.iterdir())
        process = Process(run_dir, work / f"attempt-{index:02d}.log")
        record: dict = {"attempt": index, "kind": kind, "phase": phase, "signal": signal_name}
        sig = signal.SIGKILL if signal_name == "SIGKILL" else signal.SIGTERM
        if phase == "early":  # before the fit: reading, preparing, planning, the probe
            mark = rng.choice(EARLY_MARKS)
            record["early_mark"] = mark
            if mark == "start":
                time.sleep(rng.uniform(max(0.02 * start_s, entry_s), 0.3 * start_s))
            else:  # this process wrote status.json: the model, the backend, the probe
                while process.popen.poll() is None and not planning_since(run_dir,
                                                                          process.launched):
                    time.sleep(0.002)
                time.sleep(rng.uniform(0, 1.0))
            record["landed"] = ("after the fit began" if any(
                t >= process.launched for t in fit_starts(run_dir)) else
                "planning or its probe" if planning_since(run_dir, process.launched) else
                "reading the config or preparing the data")
            process.popen.send_signal(sig)
        began = process.wait_for_fit() if phase != "early" else None
        record["start_to_fit_s"] = began
        mode = ""
        if phase == "late" and began is not None:  # after the last step: test and save
            mark = rng.choice(LATE_MARKS)
            record["late_mark"] = mark
            if expected_resume != total_steps:
                process.wait_for_step(total_steps)
            while process.popen.poll() is None and not (
                    mark == "last step"
                    or (mark == "fit end" and any(t >= process.launched
                                                  for t in fit_ends(run_dir)))
                    or (mark == "saving" and saving_since(run_dir, process.launched))):
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.05))
            process.popen.send_signal(sig)
        elif kind in ("kill", "term") and began is not None:
            record["target_step"] = round(targets[index], 1)
            reached = process.wait_for_step(targets[index])
            if kind == "kill":
                kill_count += 1
                mode = "write" if kill_count % 3 == 0 else "random"
                if mode == "write":  # wait for a checkpoint write to begin, then kill at once
                    deadline = time.monotonic() + 4 * fit_s
                    while not writing(checkpoints) and time.monotonic() < deadline:
                        if process.popen.poll() is not None:
                            break
                        time.sleep(0.0005)
                elif reached:
                    time.sleep(rng.uniform(0, 2 * step_s))
                record["during_write"] = writing(checkpoints)
                record["killed_after_step"] = process.last_step()
                process.popen.send_signal(signal.SIGKILL)
            else:
                if reached:
                    time.sleep(rng.uniform(0, 2 * step_s))
                record["signal_sent"] = time.monotonic()
                process.popen.send_signal(signal.SIGTERM)
        code, stderr = process.finish()
        if "signal_sent" in record:
            record["signal_to_exit_s"] = time.monotonic() - record.pop("signal_sent")
        record.update(mode=mode, exit_code=code)
        # Did this process resume where it should have, or say why it started over?
        said = RESUMING.search(stderr)
        record["resumed_from"] = int(said.group(1)) if said else None
        record["lost"] = said.group(3) if said else None
        record["start"] = ("resumed" if said else "started over" if STARTING_OVER in stderr
                           else "already finished" if ALREADY_FINISHED in stderr else "fresh")
        if record["start"] == "already finished" and not (
                records and records[-1].get("status_after") == "finished"):
            failures.append(f"attempt {index}: said already finished, but the run was not")
        if expected_resume is not None and record["resumed_from"] != expected_resume \
                and record["start"] != "already finished" \
                and not (phase == "early" and code != 0 and not said):
            failures.append(f"attempt {index}: expected to resume from step {expected_resume}, "
                            f"stderr said {said.group(0) if said else 'nothing'}")
        if expected_resume is None and existed and index and record["start"] != "started over" \
                and not (phase == "early" and code != 0):
            failures.append(f"attempt {index}: an unfinished run without a checkpoint was not "
                            f"started over with its line; stderr: {stderr[-500:]}")
        if said and not stderr.lstrip().startswith("resuming from step"):
            failures.append(f"attempt {index}: the resume notice was not the first line")
        if expected_resume == total_steps:
            record["steps_trained"] = max(0, process.last_step() + 1)
            if process.last_step() >= 0:
                failures.append(f"attempt {index}: trained again (step {process.last_step()}) "
                                "after training was over")
        # What the disruption left behind.
        try:
            record["status_after"] = json.loads((run_dir / "status.json").read_text())["status"]
        except (OSError, ValueError, KeyError):
            record["status_after"] = None
        newest, complete, unreadable = check_checkpoints(checkpoints)
        record.update(newest_checkpoint=newest, complete=complete, unreadable=unreadable)
        if unreadable:
            failures.append(f"attempt {index}: {unreadable} unreadable checkpoint(s)")
        if kind == "term" and began is not None:
            saved = SAVED.search(stderr)
            if code == 0:
                record["note"] = "finished before the signal"
            elif code != 143 or not saved:
                failures.append(f"attempt {index}: SIGTERM gave exit {code}, "
                                f"stderr: {stderr[-500:]}")
            else:
                record["signal_to_saved_s"] = float(saved.group(3))
                if int(saved.group(1)) != newest:
                    failures.append(f"attempt {index}: saved step {saved.group(1)} but the "
                                    f"newest checkpoint is {newest}")
        if kind in ("early", "late"):
            stopped = STOPPED.search(stderr)
            record["stopped"] = stopped.group(1) if stopped else None
            if code == 0 and kind == "late":
                record["note"] = "finished before the signal"
            elif code != 143 or not (stopped or SAVED.search(stderr)):
                failures.append(f"attempt {index}: SIGTERM outside the fit gave exit {code} "
                                f"without its line, stderr: {stderr[-500:]}")
        if signal_name == "SIGKILL" and code not in (-9, 0):
            failures.append(f"attempt {index}: SIGKILL gave exit {code}: {stderr[-500:]}")
        if kind == "finish" and code != 0:
            failures.append(f"the final run failed ({code}): {stderr[-2000:]}")
        if code == 0 and kind != "finish":
            record["note"] = "finished before the disruption"
        expected_resume = newest
        records.append(record)
        print(f"  {index:2d} {kind:10s} {mode:6s} target {record.get('target_step', '-')!s:>5s} "
              f"exit {code:4d} {record['start']:12s} from "
              f"{record['resumed_from']!s:>4s} newest {newest!s:>4s}"
              f"{' (during a write)' if record.get('during_write') else ''}"
              f"{' ' + record['landed'] if 'landed' in record else ''}", file=sys.stderr)
        if code == 0:
            break
    same = (run_dir / "model").is_dir() and model_files(run_dir) == expected
    if not same:
        failures.append("the final model files differ from the uninterrupted run's")
    return {"records": records, "failures": failures, "identical": same,
            "reference_fit_s": fit_s, "total_steps": total_steps,
            "steps_per_epoch": total_steps // ref_metrics["fit"]["epochs"],
            "kills": sum(r["signal"] == "SIGKILL" and r["exit_code"] == -9 for r in records),
            "fit_kills": sum(r["kind"] == "kill" and r["exit_code"] == -9 for r in records),
            "signals": sum("signal_to_saved_s" in r for r in records),
            "phase_signals": sum(r["kind"] in ("early", "late") and r["exit_code"] == 143
                                 for r in records),
            "disruptions": sum(r["kind"] != "finish" and r["exit_code"] != 0 for r in records),
            "clean_restarts": sum(not any(f.startswith(f"attempt {r['attempt']}:")
                                          for f in failures) for r in records[1:])}


def summary_markdown(result: dict, args: argparse.Namespace) -> str:
    records = result["records"]
    killed = [r for r in records if r["kind"] == "kill" and r["exit_code"] == -9]
    during_write = sum(bool(r.get("during_write")) for r in killed)
    resumed = [r for r in records if r["resumed_from"] is not None]
    fresh = sum(r["resumed_from"] is None for r in records[1:])
    saved = [r["signal_to_saved_s"] for r in records if "signal_to_saved_s" in r]
    exit_s = [r["signal_to_exit_s"] for r in records if "signal_to_saved_s" in r]
    startup = [r["start_to_fit_s"] for r in records if r.get("start_to_fit_s") is not None]

    def stat(values: list[float], fmt: str = "{:.2f}") -> str:
        if not values:
            return "–"
        return (f"{fmt.format(statistics.median(values))} (median; "
                f"{fmt.format(min(values))}–{fmt.format(max(values))})")

    outside = [r for r in records if r["kind"] in ("early", "late") and r["exit_code"] == 143]
    with_line = sum(r.get("stopped") is not None for r in outside)
    restarts = len(records) - 1
    landed = ", ".join(str(r["killed_after_step"]) for r in killed)
    epochs = (f"of {result['total_steps']}; epochs end at multiples of "
              f"{result['steps_per_epoch']}")
    unreadable = sum(r["unreadable"] for r in records)
    identical = "yes" if result["identical"] else "NO"
    verdict = "passed" if not result["failures"] else "FAILED: " + "; ".join(result["failures"])
    return f"""## Chaos: SIGKILL and SIGTERM during `entrena train examples/tiny/config.yaml`

- Date: {today()}; machine: {machine()}
- Command: `.venv/bin/python benchmarks/chaos.py --kills {args.kills} --signals {args.signals}
  --phase-signals {args.phase_signals} --seed {args.seed}`; every run with
  `--set {' --set '.join(SETTINGS)}`
- Reference: one uninterrupted run, {result['total_steps']} optimizer steps, fit
  {result['reference_fit_s']:.1f} s (evaluation and checkpoints included)
- Result: {verdict}

| figure | value |
|---|---|
| SIGKILLs / of them while a checkpoint was being written | {len(killed)} / {during_write} |
| steps the SIGKILLs landed after ({epochs}) | {landed} |
| SIGTERMs (exit 143 with a checkpoint of the step reported) | {len(saved)} |
| SIGTERMs outside the fit (exit 143) / with a `stopped by SIGTERM …` line | {len(outside)} / \
{with_line} |
| restarts that resumed from the newest complete checkpoint | {len(resumed)} of {restarts} |
| restarts with nothing to resume (killed before the first checkpoint) | {fresh} |
| checkpoints found unreadable after a disruption | {unreadable} |
| final `model/` files equal to the uninterrupted run's, byte for byte | {identical} |
| SIGTERM to checkpoint on disk (s, as the process reports it) | {stat(saved)} |
| SIGTERM to process exit (s, measured outside) | {stat(exit_s)} |
| restart to training again: process start to `fit_start` (s) | {stat(startup, "{:.1f}")} |

A SIGKILL cannot be caught; what it tests is that every file a reader may trust is whole:
checkpoints are written to a temporary file, fsynced and renamed, and count only once their
marker (SHA-256 and size) is written after them. The time from SIGTERM to saved is the rest
of the current step plus one checkpoint write (about 12 MB here).
"""


def random_summary_markdown(result: dict, args: argparse.Namespace) -> str:
    """The section of a ``--random N`` run: signals at random phases, and how each restart
    began."""
    records = result["records"]
    disrupted = [r for r in records if r["kind"] != "finish" and r["exit_code"] != 0]
    table = []
    for phase, what in (("early", "before the fit (config, data, planning, probe)"),
                        ("fit", "in the fit, at a random step"),
                        ("late", "after the last step (evaluation, test, save)")):
        for name in ("SIGKILL", "SIGTERM"):
            count = sum(r["phase"] == phase and r["signal"] == name for r in disrupted)
            table.append(f"| {name} {what} | {count} |")
    restarts = records[1:]
    resumed = sum(r["start"] == "resumed" for r in restarts)
    over = sum(r["start"] == "started over" for r in restarts)
    fresh = sum(r["start"] == "fresh" for r in restarts)
    finished = sum(r["start"] == "already finished" for r in restarts)
    marks = ", ".join(f"{sum(r.get('late_mark') == m for r in disrupted)} {m}"
                      for m in LATE_MARKS)
    landed = ", ".join(f"{sum(r.get('landed') == w for r in disrupted)} {w}"
                       for w in ("reading the config or preparing the data",
                                 "planning or its probe", "after the fit began"))
    during_write = sum(bool(r.get("during_write")) for r in disrupted)
    no_step = [r for r in records if "steps_trained" in r]
    untrained = sum(r["steps_trained"] == 0 for r in no_step)
    saved = [r["signal_to_saved_s"] for r in records if "signal_to_saved_s" in r]
    stopped = sum(r.get("stopped") is not None for r in disrupted)
    identical = "yes" if result["identical"] else "NO"
    verdict = "passed" if not result["failures"] else "FAILED: " + "; ".join(result["failures"])
    rows = "\n".join(table)
    return f"""## Chaos at random phases: SIGKILL or SIGTERM before, in and after the fit

- Date: {today()}; machine: {machine()}
- Command: `.venv/bin/python benchmarks/chaos.py --random {args.random} --seed {args.seed}`
  (`entrena train examples/tiny/config.yaml`, every run with `--set {' --set '.join(SETTINGS)}`)
- Reference: one uninterrupted run, {result['total_steps']} optimizer steps, fit
  {result['reference_fit_s']:.1f} s
- Result: {verdict}

| disruption | count |
|---|---|
{rows}
| of the SIGKILLs in the fit: while a checkpoint was being written | {during_write} |
| signals that ended a process (exit -9 or 143) | {len(disrupted)} of {args.random} |
| signals before the fit landed while | {landed} |
| SIGTERMs answered by their one line (`stopped by SIGTERM …` or `saved checkpoint …`) | \
{stopped + len(saved)} |
| restarts that resumed from the newest complete checkpoint (`resuming from step N`) | \
{resumed} of {len(restarts)} |
| restarts with nothing to resume: an unfinished directory, `… starting it over` | {over} |
| restarts with nothing to resume: no run directory yet (a new run) | {fresh} |
| restarts with nothing to resume: the run had been marked finished, `… is already finished` \
| {finished} |
| signals after the last step landed after (a mark, then 0-50 ms) | {marks} |
| restarts after training was over that trained no step again | {untrained} of {len(no_step)} |
| restarts with a check failed | {len(restarts) - result['clean_restarts']} |
| checkpoints found unreadable after a disruption | {sum(r['unreadable'] for r in records)} |
| final `model/` files equal to the uninterrupted run's, byte for byte | {identical} |

Each restart is checked: it resumes from the newest complete checkpoint and says so first;
with no complete checkpoint it deletes an unfinished directory saying `starting it over`, or
starts a new run; once training was over it trains no step and only tests and saves; it says
`already finished` only when the process before was stopped after `status.json` said so.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--signals", type=int, default=5)
    parser.add_argument("--phase-signals", type=int, default=3,
                        help="SIGTERMs outside the fit: before it, and one after its last step")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="instead: N signals, each SIGKILL or SIGTERM at a random phase "
                             "(before the fit, in it, after its last step)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="do not update "
                        "docs/benchmarks-journal.md")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    args = parser.parse_args()
    if not (ROOT / "examples" / "reviews" / "data" / "train.csv").is_file():
        sys.exit("run `make demo-data` first")
    with tempfile.TemporaryDirectory(prefix="entrena-chaos-") as tmp:
        result = run_chaos(args.kills, args.signals, args.seed, Path(tmp),
                           phase_signals=args.phase_signals, random_signals=args.random)
    if args.json:
        print(json.dumps(result, indent=2))
    if not args.no_write:
        if args.random:
            write_section("chaos-phases", random_summary_markdown(result, args))
        else:
            write_section("chaos", summary_markdown(result, args))
        print(f"wrote the chaos section of {ROOT / 'docs' / 'benchmarks-journal.md'}",
              file=sys.stderr)
    for failure in result["failures"]:
        print(f"FAILED: {failure}", file=sys.stderr)
    sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
