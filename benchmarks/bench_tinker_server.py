"""Many LoRA training runs on one Tinker server against one server process per run.

    python -m benchmarks tinker_server                    # quick: the tiny model
    python -m benchmarks.bench_tinker_server --layers 2 --ks 1 2 4 --rank 8 --tokens 128

K clients (K = 1, 2, 4, 8 by default), each the tinker SDK's own `ServiceClient` on a thread
of its own with a LoRA training run of its own, make `--steps` steps (a forward_backward and
an optim_step) on the same small batch of datums:

- shared: the K runs on ONE server process (`arthex serve --protocol tinker`);
- separate: each run on a server process of its own (the same command), the K processes side
  by side.

Memory is the kernel's high-water mark of resident memory (`VmHWM`, /proc/PID/status), reset
once a server has loaded its model and answers (`/proc/PID/clear_refs`), so it is the peak
while the runs exist and train; for separate servers the sum of theirs. Throughput is the
tokens trained per second of wall time, from the moment all K runs exist (each has made one
untimed warm-up step) until the last step's answer; the clients' process collects its garbage
and freezes the survivors when the timed steps start (a full collection mid-way stalled every
client at once, which the K=4 rows of earlier invocations showed). Both are printed as ratios
against the shared K=1 baseline measured in the same invocation. The last line compares the
memory of a run beyond the first on the shared server, (peak(K) - peak(1)) / (K - 1) (the peak
holds the shared pass's activations for every run's datums at once) and the same difference of
resident memory once the steps are done (the runs' kept state), with the computed adapter +
gradient + AdamW moments: 16 bytes per LoRA parameter in float32, the parameters counted
from config.json (rank x (in + out) per adapted projection and the output head).

Every server gets `--threads` torch threads (1 by default, through OMP_NUM_THREADS), a keys
file with the one tenant the clients use, and no audit log; the clients run in this process.
`--cpus 0` pins every server to the same CPUs (here: core 0), so the shared server and the K
separate ones compute on one core budget; without it K separate single-thread servers may use
every core while the shared one computes on one thread.
`--layers N` uses a Qwen2.5-0.5B-shaped model of N layers (bench_memory.make_model, ~0.6 GB of
float32 embeddings per server process: mind the separate processes, or skip them with
`--no-separate`). Linux only.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from ._table import print_table

KEY = "tml-bench-0123456789abcdef"  # the server takes keys of 16 characters or more
MIB = 1024 * 1024
START_S = 300.0
TIMEOUT_S = 600.0
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def server_command(model: str, port: int, state: Path, keys: Path) -> list[str]:
    """`arthex serve --protocol tinker`; its torch threads come from OMP_NUM_THREADS."""
    return [
        sys.executable, "-m", "arthex.apps.cli", "serve", "--protocol", "tinker",
        "--base-model", model, "--port", str(port), "--state-dir", str(state),
        "--keys", str(keys), "--audit-log", "off",
    ]  # fmt: skip


def keys_file(root: Path) -> Path:
    """The keys file every server reads: one tenant, whose key the clients send."""
    path = root / "keys.txt"
    path.write_text(f"bench:{KEY}\n")
    return path


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Server:
    """One server process; `idle_mib` is its resident memory once it answers."""

    def __init__(self, model: str, root: Path, threads: int, cpus: set[int] | None) -> None:
        port = _free_port()
        state = Path(tempfile.mkdtemp(prefix="state-", dir=root))
        env = {
            **os.environ,
            "TINKER_TELEMETRY": "0",
            "OMP_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
        }
        self.url = f"http://127.0.0.1:{port}"
        self.log = state.with_suffix(".log")
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                server_command(model, port, state, keys_file(root)),
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
            )
        self.idle_mib = 0.0

    def ready(self) -> None:
        deadline = time.monotonic() + START_S
        while True:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"a server exited with {self.process.returncode}: {tail}")
            try:
                request = urllib.request.Request(
                    f"{self.url}/api/v1/healthz", headers={"X-API-Key": KEY}
                )
                with urllib.request.urlopen(request, timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("a server did not answer in time") from None
                time.sleep(0.2)
        self.idle_mib = _status_kib(self.process.pid, "VmRSS") / 1024
        try:  # "5" resets the peak to the current resident size (Linux 4.0+)
            Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")
        except OSError:
            pass  # then the peak includes loading the model

    def resident_mib(self) -> float:
        return _status_kib(self.process.pid, "VmRSS") / 1024

    def peak_mib(self) -> float:
        return _status_kib(self.process.pid, "VmHWM") / 1024

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def batch(vocab: int, datums: int, tokens: int) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(4, vocab) for _ in range(tokens + 1)] for _ in range(datums)]


def client(
    url: str, model: str, seed: int, args: argparse.Namespace, sequences: list[list[int]],
    start: threading.Barrier, ends: list[float],
) -> None:  # fmt: skip
    import tinker
    from tinker import types

    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints(s[:-1]),
            loss_fn_inputs={
                "target_tokens": types.TensorData(data=s[1:], dtype="int64"),
                "weights": types.TensorData(data=[1.0] * (len(s) - 1), dtype="float32"),
            },
        )
        for s in sequences
    ]
    adam = types.AdamParams(learning_rate=1e-4)
    service = tinker.ServiceClient(base_url=url, api_key=KEY)
    try:
        training = service.create_lora_training_client(model, rank=args.rank, seed=seed)
        trained = training.result(TIMEOUT_S)

        def step() -> None:
            forward = trained.forward_backward(data, "cross_entropy")
            optim = trained.optim_step(adam)
            forward.result(TIMEOUT_S)
            optim.result(TIMEOUT_S)

        step()  # warm-up, untimed
        start.wait(TIMEOUT_S)
        for _ in range(args.steps):
            step()
        ends.append(time.perf_counter())
    finally:
        service.close("success").result(TIMEOUT_S)


def measure(
    mode: str, k: int, model: str, args: argparse.Namespace, sequences: list[list[int]],
    root: Path,
) -> dict[str, float]:  # fmt: skip
    count = 1 if mode == "shared" else k
    servers = [Server(model, root, args.threads, args.cpus) for _ in range(count)]
    try:
        for server in servers:
            server.ready()
        began: list[float] = []

        def go() -> None:
            # The clients share this process's garbage collector: a full collection over the
            # earlier measures' clients stalls every client at once for ~0.2 s, as long as a
            # few timed steps. Collected and frozen here, it scans only what is new.
            gc.collect()
            gc.freeze()
            began.append(time.perf_counter())

        start = threading.Barrier(k + 1, action=go)
        ends: list[float] = []
        threads = [
            threading.Thread(
                target=client,
                args=(servers[i % len(servers)].url, model, i, args, sequences, start, ends),
            )
            for i in range(k)
        ]
        for thread in threads:
            thread.start()
        start.wait(TIMEOUT_S)
        for thread in threads:
            thread.join(TIMEOUT_S)
        if len(ends) != k:
            raise RuntimeError(f"{k - len(ends)} of {k} clients failed ({mode})")
        peak = sum(server.peak_mib() for server in servers)
        idle = sum(server.idle_mib for server in servers)
        settled = sum(server.resident_mib() for server in servers)
    finally:
        gc.unfreeze()
        for server in servers:
            server.stop()
    tokens = k * args.steps * sum(len(s) - 1 for s in sequences)
    return {
        "peak": peak,
        "idle": idle,
        "settled": settled,
        "tps": tokens / (max(ends) - began[0]),
    }


def lora_parameters(model: str, rank: int) -> int:
    """LoRA parameters the server trains on this model: rank x (in + out) per adapted
    projection of every layer, and the output head."""
    config = json.loads((Path(model) / "config.json").read_text())
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim
    per_layer = (hidden + q) * 2 + (hidden + kv) * 2 + (hidden + inter) * 3
    head = hidden + config["vocab_size"]
    return int(rank * (per_layer * config["num_hidden_layers"] + head))


def make_model(root: Path, layers: int | None) -> str:
    from arthex.testing.tiny_model import tiny_model

    tiny = tiny_model(root / "tiny")
    if layers is None:
        return tiny
    from .bench_memory import make_model as qwen_shaped

    target = root / f"qwen-{layers}"
    qwen_shaped(target, layers)
    for name in os.listdir(tiny):  # a tokenizer for the server (training never uses it)
        if name.startswith(("tokenizer", "chat_template")):
            shutil.copy(Path(tiny) / name, target / name)
    return str(target)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks tinker_server")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--datums", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per datum")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per server")
    parser.add_argument("--layers", type=int, default=None, help="a Qwen2.5-0.5B shape")
    parser.add_argument(
        "--cpus",
        type=lambda text: {int(cpu) for cpu in text.split(",")},
        default=None,
        help="pin every server to these CPUs (e.g. 0 or 0,1): one core budget for both modes",
    )
    parser.add_argument(
        "--no-separate", dest="separate", action="store_false", help="only the shared server"
    )
    args = parser.parse_args(argv if argv is not None else [])
    ks = sorted(set(args.ks) | {1})
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="arthex-bench-")))
        model = make_model(root, args.layers)
        vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
        sequences = batch(vocab, args.datums, args.tokens)
        results = {}
        for k in ks:
            for mode in ("shared", *(["separate"] if k > 1 and args.separate else [])):
                results[(mode, k)] = measure(mode, k, model, args, sequences, root)
                print(f"measured {mode} K={k}: {results[(mode, k)]}", file=sys.stderr, flush=True)
        parameters = lora_parameters(model, args.rank)
    base = results[("shared", 1)]
    rows = [
        [
            mode,
            k,
            r["peak"],
            r["peak"] - r["idle"],
            r["peak"] / base["peak"],
            r["tps"],
            r["tps"] / base["tps"],
        ]
        for (mode, k), r in results.items()
    ]
    shape = f"Qwen2.5-0.5B shape, {args.layers} layers" if args.layers else "tiny model"
    cpus = f", every server on CPUs {sorted(args.cpus)}" if args.cpus else ""
    print_table(
        f"Tinker server: K LoRA runs on one server vs K servers ({shape}, rank {args.rank}, "
        f"{args.datums}x{args.tokens} tokens, {args.steps} steps, {args.threads} thread(s) "
        f"per server{cpus})",
        ["mode", "K", "peak MiB", "peak - idle MiB", "peak / K=1", "tokens/s", "tokens/s / K=1"],
        rows,
    )
    top = max(ks)
    if top > 1:
        extra = (results[("shared", top)]["peak"] - base["peak"]) / (top - 1)
        kept = (results[("shared", top)]["settled"] - base["settled"]) / (top - 1)
        computed = 16 * parameters / MIB
        print(
            f"\nper run beyond the first on one server: {extra:.2f} MiB at the peak, "
            f"{kept:.2f} MiB resident after the steps (K=1 -> {top}); adapter + gradient + "
            f"AdamW computed: {computed:.2f} MiB ({parameters:,} LoRA parameters x 16 bytes)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
