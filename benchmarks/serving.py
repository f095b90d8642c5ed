"""A request answered by the model loaded once against today's-before per-request reload.

The MLflow ``pyfunc`` model used to run ``entrena predict`` per request: write the rows to a
temporary CSV, load the model, tokenizer and config from disk, predict, write Parquet, read it
back (the "reload" path, reproduced here as it was). It now loads the model once
(``entrena.api.predicting.load_predictor``) and answers each DataFrame in memory ("loaded").
Both answer 1-, 32- and 512-row requests of the run's own test texts in turn, in one process,
``--repeats`` times each (alternating, so a busy spell hits both); the table gives the median
latency of each and their ratio pair by pair, and checks the two answer alike.

Usage::

    .venv/bin/python benchmarks/serving.py --run runs/reviews [--repeats 7] [--write]
    .venv/bin/python benchmarks/serving.py --http --run runs/reviews runs/credit
        [--requests 10000] [--clients 8] [--write]
    .venv/bin/python benchmarks/serving.py --chat --run runs/reviews-chat [--requests 40]
        [--clients 4] [--write]

``--http``: the load test through ``entrena serve`` on loopback instead (section
``bench:serving-load``): 1-row requests from 1 client (200) and from ``--clients`` at once
(``--requests`` in all), 32- and 512-row requests; p50/p95/p99, throughput, errors, the
server's resident memory before and after, and the in-process call for comparison.

``--chat``: an LLM run's GGUF bundle behind llama.cpp's server (``entrena serve``; section
``bench:serving-chat``): time to first token and whole-answer latency of streamed answers to
the run's test conversations from 1 client and from ``--clients``, and the decoding speed
(tokens/s) of 64-token answers.

``--run``: a finished run directory (the demo's MiniLM run: ``make demo``). Prints a JSON line
per size; ``--write`` puts the table in docs/benchmarks-journal.md (section ``bench:serving``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, today, write_section  # noqa: E402
from budget import cpu_kind  # noqa: E402

SIZES = (1, 32, 512)


def reload_predict(run: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """The per-request path the pyfunc model had before: a temporary CSV through
    ``entrena predict`` (model loaded from disk), Parquet read back."""
    import entrena

    with tempfile.TemporaryDirectory(prefix="bench-serving-") as folder:
        data, output = Path(folder) / "input.csv", Path(folder) / "output.parquet"
        frame.reset_index(drop=True).to_csv(data, index=False, quoting=csv.QUOTE_ALL)
        result = entrena.predict(run, data, output=output, progress=False)
        return pd.read_parquet(output, columns=result.summary["columns_added"])


def rows_of(run: Path, n: int) -> pd.DataFrame:
    """``n`` input rows (the run's test file, repeated when shorter), input columns only."""
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text())
    data = config["data"]
    frame = pd.read_csv(data["test"] or data["train"])
    frame = frame.drop(columns=[data["label_column"]], errors="ignore")
    return pd.concat([frame] * (n // len(frame) + 1), ignore_index=True).head(n)


def measure(run: Path, repeats: int) -> list[dict[str, Any]]:
    from entrena.api.predicting import load_predictor

    started = time.perf_counter()
    predictor = load_predictor(run)
    load_s = time.perf_counter() - started
    out = []
    for size in SIZES:
        frame = rows_of(run, size)
        loaded, reload = [], []
        a = predictor.predict(frame)
        b = reload_predict(run, frame)  # warm both once
        same = bool((a["predicted_label"].to_numpy() == b["predicted_label"].to_numpy()).all())
        for _ in range(repeats):
            t = time.perf_counter()
            predictor.predict(frame)
            loaded.append(time.perf_counter() - t)
            t = time.perf_counter()
            reload_predict(run, frame)
            reload.append(time.perf_counter() - t)
        ratios = [r / max(x, 1e-9) for r, x in zip(reload, loaded, strict=True)]
        row = {"rows": size, "loaded_ms": 1000 * statistics.median(loaded),
               "reload_ms": 1000 * statistics.median(reload),
               "ratio_median": statistics.median(ratios),
               "ratio_range": [min(ratios), max(ratios)], "same_labels": same,
               "repeats": repeats, "load_s": load_s, "cpu": cpu_kind()}
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def _percentiles(values: list[float], prefix: str = "") -> dict[str, float]:
    ms = np.asarray(values) * 1000
    return {f"{prefix}{name}_ms": float(np.percentile(ms, q))
            for name, q in (("p50", 50), ("p95", 95), ("p99", 99))}


def _server_rss(pid: int) -> int:
    """Resident bytes of the server process and its children (uvicorn's workers)."""
    import psutil

    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])


@contextlib.contextmanager
def _served(run: Path, port: int, ready: str, *options: str) -> Iterator[Any]:
    """``entrena serve RUN --port PORT OPTIONS`` running until the block ends (its process
    group stopped with SIGTERM); entered once ``GET ready`` answers (``SystemExit`` when the
    server dies or 300 s pass first)."""
    import os
    import signal
    import subprocess
    import urllib.request

    entrena = Path(sys.executable).with_name("entrena")
    server = subprocess.Popen([str(entrena), "serve", str(run), "--port", str(port), *options],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{ready}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("entrena serve did not start") from None
                time.sleep(0.5)
        yield server
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def load_test(run: Path, requests: int, clients: int, port: int,
              workers: int = 1) -> dict[str, Any]:
    """``entrena serve RUN`` on loopback, then: 1-row requests from 1 client and from
    ``clients`` at once (``requests`` in all, the server's resident memory before and
    after), and 32- and 512-row requests; every answer checked for 200 and its row count."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from entrena.api.predicting import load_predictor

    url = f"http://127.0.0.1:{port}/invocations"
    bodies = {n: json.dumps({"dataframe_split": rows_of(run, n).to_dict(orient="split")})
              .encode() for n in (1, 32, 512)}
    errors: list[int] = []  # list.append is atomic across the client threads

    def call(n: int) -> float:
        started = time.perf_counter()
        request = urllib.request.Request(url, data=bodies[n], method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                if len(json.loads(response.read())["predictions"]) != n:
                    errors.append(n)
        except OSError:
            errors.append(n)
        return time.perf_counter() - started

    with _served(run, port, "/ping", "--workers", str(workers)) as server:
        for _ in range(20):
            call(1)  # warm
        rss_before = _server_rss(server.pid)
        one = [call(1) for _ in range(200)]
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            many = list(pool.map(lambda _: call(1), range(requests)))
        many_s = time.perf_counter() - started
        rss_after = _server_rss(server.pid)
        sizes = {n: [call(n) for _ in range(10 if n == 512 else 30)] for n in (32, 512)}
    predictor = load_predictor(run)
    frame = rows_of(run, 1)
    predictor.predict(frame)
    local = []
    for _ in range(200):
        t = time.perf_counter()
        predictor.predict(frame)
        local.append(time.perf_counter() - t)
    one_rps = len(one) / sum(one)
    result = {
        "run": str(run), "cpu": cpu_kind(), "clients": clients, "requests": requests,
        "workers": workers,
        "errors": len(errors),
        "one_client": {**_percentiles(one), "requests_per_s": one_rps},
        "many_clients": {**_percentiles(many), "requests_per_s": requests / many_s},
        "throughput_ratio": (requests / many_s) / one_rps,
        "in_process_p50_ms": float(np.median(local) * 1000),
        "rows_32": _percentiles(sizes[32]), "rows_512": _percentiles(sizes[512]),
        "rss_before_mib": rss_before / 2**20, "rss_after_mib": rss_after / 2**20,
    }
    print(json.dumps(result), flush=True)
    return result


def publish_load(results: list[dict[str, Any]], command: str) -> None:
    lines = [f"Measured {today()} on {machine()} ({results[0]['cpu']}); `{command}`: `entrena "
             f"serve RUN --workers {results[0]['workers']}` (MLflow's scoring server) on "
             "loopback, the load generator on the same 2 cores."]
    for result in results:
        lines += ["", *_load_table(result)]
    write_section("serving-load", "\n".join(lines))


def _load_table(result: dict[str, Any]) -> list[str]:
    one, many = result["one_client"], result["many_clients"]
    return [
        f"`{result['run']}`:", "",
        "| load | p50 ms | p95 ms | p99 ms | requests/s |", "|---|---:|---:|---:|---:|",
        f"| 1-row requests, 1 client (200) | {one['p50_ms']:.1f} | {one['p95_ms']:.1f} | "
        f"{one['p99_ms']:.1f} | {one['requests_per_s']:.1f} |",
        f"| 1-row requests, {result['clients']} clients ({result['requests']}) | "
        f"{many['p50_ms']:.1f} | {many['p95_ms']:.1f} | {many['p99_ms']:.1f} | "
        f"{many['requests_per_s']:.1f} |",
        f"| 32-row requests, 1 client (30) | {result['rows_32']['p50_ms']:.1f} | "
        f"{result['rows_32']['p95_ms']:.1f} | {result['rows_32']['p99_ms']:.1f} | |",
        f"| 512-row requests, 1 client (10) | {result['rows_512']['p50_ms']:.1f} | "
        f"{result['rows_512']['p95_ms']:.1f} | {result['rows_512']['p99_ms']:.1f} | |", "",
        f"Errors: {result['errors']}. {result['clients']} clients' throughput "
        f"{result['throughput_ratio']:.1f}x one client's. In process, the same 1-row call "
        f"takes {result['in_process_p50_ms']:.1f} ms (p50): the server's 1-row p50 is "
        f"{one['p50_ms'] / result['in_process_p50_ms']:.1f}x it. Server resident memory "
        f"{result['rss_before_mib']:.0f} MiB before the {result['clients']}-client requests, "
        f"{result['rss_after_mib']:.0f} MiB after "
        f"({(result['rss_after_mib'] / result['rss_before_mib'] - 1) * 100:+.1f}%)."]


def chat_prompts(run: Path, n: int) -> list[list[dict[str, str]]]:
    """The first ``n`` conversations of the run's test chats (else training), each without
    its last assistant turn: what a client asks."""
    import yaml

    data = yaml.safe_load((run / "config.yaml").read_text())["data"]
    path = Path(data.get("test") or data["train"])
    if data.get("prompt_template"):  # a table's rows through the run's template
        frame = pd.read_csv(path).head(n)
        return [[{"role": "user", "content": data["prompt_template"].format(**row)}]
                for row in frame.to_dict(orient="records")]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]
    out = []
    for row in rows[:n]:
        messages = row["messages"]
        out.append(messages[:-1] if messages[-1]["role"] == "assistant" else messages)
    return out


def chat_test(run: Path, requests: int, clients: int, port: int) -> dict[str, Any]:
    """``entrena serve RUN`` (llama.cpp's server on the run's GGUF bundle) on loopback:
    ``requests`` of the run's test conversations streamed one client at a time and then from
    ``clients`` at once (time to first token, whole answer), and 64-token answers with the
    end-of-sequence token banned (``logit_bias``) for the decoding speed."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    from entrena.exporting.bundle import find_run_bundle, read_manifest

    bundle = find_run_bundle(run, "gguf")
    if bundle is None:
        raise SystemExit(f"{run}: no GGUF bundle; entrena export {run} --format gguf")
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    prompts = chat_prompts(run, requests)
    errors: list[str] = []

    def stream(messages: list[dict[str, str]], extra: dict[str, Any]) -> dict[str, float]:
        body = json.dumps({"messages": messages, "temperature": 0, "stream": True,
                           "max_tokens": 64, **extra}).encode()
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        started, first, pieces = time.perf_counter(), None, 0
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                for raw in response:
                    line = raw.decode().strip()
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    delta = json.loads(line[6:])["choices"][0].get("delta", {})
                    if delta.get("content"):
                        first = first if first is not None else time.perf_counter()
                        pieces += 1
        except OSError as exc:
            errors.append(str(exc))
        else:
            if not pieces:  # HTTP 200 with no answer (an interrupted stream) is an error
                errors.append("empty answer")
        end = time.perf_counter()
        first = end if first is None else first
        return {"ttft": first - started, "total": end - started, "pieces": pieces,
                "decode_s": end - first}

    with _served(run, port, "/v1/models"):
        for messages in prompts[:3]:
            stream(messages, {})  # warm
        one = [stream(m, {}) for m in prompts]
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            many = list(pool.map(lambda m: stream(m, {}), prompts))
        many_s = time.perf_counter() - started
        from entrena.tasks.llm_sft.tokenizer import build_tokenizer

        eos = build_tokenizer(str(bundle)).eos_token_id
        long = [stream(m, {"logit_bias": {str(eos): -100}}) for m in prompts[:10]]
    result = {
        "run": str(run), "bundle": str(bundle), "cpu": cpu_kind(),
        "quantisation": read_manifest(bundle).get("quantize"),
        "requests": len(prompts), "clients": clients, "errors": len(errors),
        "one_client": {**_percentiles([r["ttft"] for r in one], "ttft_"),
                       **_percentiles([r["total"] for r in one]),
                       "requests_per_s": len(one) / sum(r["total"] for r in one)},
        "many_clients": {**_percentiles([r["ttft"] for r in many], "ttft_"),
                         **_percentiles([r["total"] for r in many]),
                         "requests_per_s": len(many) / many_s},
        "decode_tokens": float(np.median([r["pieces"] for r in long])),
        "decode_tokens_per_s": float(np.median([(r["pieces"] - 1) / r["decode_s"]
                                                for r in long if r["pieces"] > 1])),
    }
    print(json.dumps(result), flush=True)
    return result


def publish_chat(result: dict[str, Any], command: str) -> None:
    one, many = result["one_client"], result["many_clients"]
    lines = [
        f"Measured {today()} on {machine()} ({result['cpu']}); `{command}`: `entrena serve "
        f"{result['run']}` (llama.cpp's OpenAI-compatible server on `{result['bundle']}`, "
        f"{result['quantisation']}) on loopback, streamed answers (`stream: true`, "
        "temperature 0), the client on the same 2 cores.", "",
        "| load | time to first token p50 / p95 ms | whole answer p50 / p95 ms | requests/s |",
        "|---|---:|---:|---:|",
        f"| the test conversations, 1 client ({result['requests']}) | "
        f"{one['ttft_p50_ms']:.0f} / {one['ttft_p95_ms']:.0f} | {one['p50_ms']:.0f} / "
        f"{one['p95_ms']:.0f} | {one['requests_per_s']:.2f} |",
        f"| the same, {result['clients']} clients at once | {many['ttft_p50_ms']:.0f} / "
        f"{many['ttft_p95_ms']:.0f} | {many['p50_ms']:.0f} / {many['p95_ms']:.0f} | "
        f"{many['requests_per_s']:.2f} |", "",
        f"Errors (failed or empty answers): {result['errors']}. Decoding speed, 64-token "
        f"answers with the end-of-sequence token banned (`logit_bias`), 10 requests, 1 client: "
        f"**{result['decode_tokens_per_s']:.1f} tokens/s** after the first token (median; "
        f"{result['decode_tokens']:.0f} streamed pieces per answer). llama.cpp's server "
        "answers one request at a time per model (its requests queue), so more clients "
        "raise the time to first token, not the throughput."]
    write_section("serving-chat", "\n".join(lines))


def publish(rows: list[dict[str, Any]], run: Path, command: str) -> None:
    lines = [f"Measured {today()} on {machine()} ({rows[0]['cpu']}); `{command}`; the model "
             f"of `{run}` loaded once in {rows[0]['load_s']:.1f} s.", "",
             "| rows per request | loaded once (median ms) | reload per request (median ms) "
             "| reload / loaded, pair by pair (median, range) | same labels |",
             "|---:|---:|---:|---:|:---:|"]
    for r in rows:
        lo, hi = r["ratio_range"]
        lines.append(f"| {r['rows']} | {r['loaded_ms']:.1f} | {r['reload_ms']:.1f} | "
                     f"{r['ratio_median']:.1f}x ({lo:.1f}–{hi:.1f}) | "
                     f"{'yes' if r['same_labels'] else 'NO'} |")
    write_section("serving", "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, nargs="+",
                        help="a finished run (with --http: one or more, served in turn)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--http", action="store_true",
                        help="the load test through entrena serve instead")
    parser.add_argument("--chat", action="store_true",
                        help="the GGUF chat server (llama.cpp) of an LLM run instead")
    parser.add_argument("--requests", type=int, default=10_000,
                        help="requests of the load test (--chat: conversations, default 40)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--port", type=int, default=5391)
    parser.add_argument("--workers", type=int, default=1, help="server workers (--http)")
    args = parser.parse_args()
    np.random.seed(0)
    command = "python benchmarks/serving.py " + " ".join(sys.argv[1:])
    if args.chat:
        requests = 40 if args.requests == 10_000 else args.requests
        result = chat_test(args.run[0], requests, args.clients, args.port)
        if args.write:
            publish_chat(result, command)
        return
    if args.http:
        results = [load_test(run, args.requests, args.clients, args.port, args.workers)
                   for run in args.run]
        if args.write:
            publish_load(results, command)
        return
    if len(args.run) != 1:
        parser.error("--run takes one run without --http")
    rows = measure(args.run[0], args.repeats)
    if args.write:
        publish(rows, args.run[0], command)


if __name__ == "__main__":
    main()
