"""`arthex doctor`'s version, GPU, wandb and chat-template checks.

Versions: the ranges are read from arthex's installed metadata and compared with
pyproject.toml read by tomllib. wandb: a listening socket on loopback stands for the wandb
host, so the test sees whether the check connected (offline: never). Templates: the tiny
model's real tokenizer, and copies of it saved with a template that drops tool calls and one
whose turns end without the end token.
"""

from __future__ import annotations

import shutil
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from arthex.apps.doctor import exit_code
from arthex.apps.doctor.reporting import check_wandb
from arthex.apps.doctor.template import check_template, local_model_dir
from arthex.apps.doctor.versions import check_gpu, check_versions, supported
from arthex.core.errors import InvalidInputError

ROOT = Path(__file__).resolve().parents[2]
LINES = ['torch>=2.4; extra == "local"', 'torch<2.15,>=2.11; extra == "vllm"', "attrs>=23.2"]


def pyproject_spec(package: str, extra: str) -> SpecifierSet:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    found = [Requirement(line) for line in extras[extra] if not line.startswith("arthex[")]
    return next(r.specifier for r in found if r.name == package)


def test_the_ranges_are_the_extras_of_the_package() -> None:
    assert supported("torch", ["local"], LINES) == SpecifierSet(">=2.4")
    assert supported("torch", ["local", "vllm"], LINES) == SpecifierSet(">=2.4,>=2.11,<2.15")
    assert supported("attrs", ["local"], LINES) == SpecifierSet(">=23.2")
    for package, extra in (("torch", "local"), ("peft", "local"), ("wandb", "wandb")):
        assert supported(package, [extra]) == pyproject_spec(package, extra)


def test_the_installed_versions_here_are_in_range() -> None:
    checks = check_versions("local")
    assert {c.name for c in checks} >= {"torch", "transformers", "peft", "vllm", "tinker", "wandb"}
    torch = next(c for c in checks if c.name == "torch")
    assert (
        torch.status == "ok" and f"supported: {pyproject_spec('torch', 'local')}" in torch.message
    )


def versions(**found: str) -> dict[str, str]:
    return {"torch": "2.13.0", "transformers": "5.0.0", "peft": "0.17.0", **found}


def test_out_of_range_missing_and_untested_versions() -> None:
    old = {c.name: c for c in check_versions("local", versions(torch="2.3.1").get)}
    assert (
        old["torch"].status == "fail"
        and "outside the supported range >=2.4" in old["torch"].message
    )
    assert old["torch"].fix == "pip install 'arthex[local]'"
    assert (
        old["tinker"].status == "ok" and "only --backend tinker needs it" in old["tinker"].message
    )
    no_tinker = {c.name: c for c in check_versions("tinker", versions().get)}
    assert no_tinker["tinker"].status == "fail"
    assert no_tinker["tinker"].fix == "pip install 'arthex[tinker]'"
    nothing: dict[str, str] = {}
    serverless = check_versions("serverless", nothing.get)
    assert exit_code(serverless) == 0, [c.line() for c in serverless]
    untested = {c.name: c for c in check_versions("local", versions(vllm="0.30.0").get)}
    assert untested["vllm"].status == "ok"
    assert (
        untested["vllm tested"].status == "warn"
        and "0.26.0, 0.33.0" in untested["vllm tested"].message
    )
    mismatched = {c.name: c for c in check_versions("local", versions(vllm="0.33.0").get)}
    assert mismatched["vllm tested"].status == "fail"
    assert mismatched["vllm tested"].message == (
        "vLLM 0.33.0 pins torch 2.14.0, but torch 2.13.0 is installed"
    )
    # with vLLM installed, torch must also be in vLLM's range (>=2.11,<2.15)
    old_for_vllm = {
        c.name: c for c in check_versions("local", versions(torch="2.10.0", vllm="0.26.0").get)
    }
    assert old_for_vllm["torch"].status == "fail"


def test_the_gpu_line_says_what_torch_sees() -> None:
    torch = pytest.importorskip("torch")
    check = check_gpu()
    if torch.cuda.is_available():
        assert check.status == "ok" and "cuda:0" in check.message
    elif torch.version.cuda is None:
        assert check.status == "ok" and "CPU build" in check.message
    else:
        assert check.status == "warn" and "sees no GPU" in check.message


@pytest.fixture
def wandb_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A listening socket standing for the wandb host; WANDB_* cleared, then set to it."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("WANDB_PROJECT", "agents")
    try:
        yield server
    finally:
        server.close()


def connected(server: socket.socket) -> bool:
    try:
        peer, _ = server.accept()
    except TimeoutError:
        return False
    peer.close()
    return True


def test_offline_wandb_is_ok_without_touching_the_network(
    wandb_host: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_MODE", "offline")
    offline = check_wandb(installed=True)
    assert offline.status == "ok" and "offline (WANDB_MODE=offline)" in offline.message
    assert not connected(wandb_host)
    monkeypatch.setenv("WANDB_MODE", "online")
    online = check_wandb(installed=True)
    assert online.status == "ok", online.line()
    port = wandb_host.getsockname()[1]
    assert online.message == (
        f"online: credentials from WANDB_API_KEY, 127.0.0.1:{port} reachable (WANDB_PROJECT=agents)"
    )
    assert connected(wandb_host), "online, the check reached the host"


def test_wandb_online_unreachable_warns_and_without_credentials_reports_locally(
    wandb_host: socket.socket, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    plain = check_wandb(installed=True)
    assert plain.status == "ok" and "runs report to history.jsonl only" in plain.message
    port = wandb_host.getsockname()[1]
    # wandb's netrc machine for a base URL is its host:port
    netrc = f"machine 127.0.0.1:{port}\n  login user\n  password {'p' * 40}\n"
    (tmp_path / "netrc").write_text(netrc)
    (tmp_path / "netrc").chmod(0o600)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    wandb_host.close()  # nothing listens there now
    gone = check_wandb(installed=True)
    assert gone.status == "warn"
    assert (
        f"credentials from the netrc file, but 127.0.0.1:{port} cannot be reached" in gone.message
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from arthex.testing.tiny_model import tiny_model

    return Path(tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


def with_template(tiny: Path, folder: Path, edit: tuple[str, str]) -> Path:
    from transformers import AutoTokenizer

    from arthex.testing.tiny_model import CHAT_TEMPLATE

    shutil.copytree(tiny, folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    assert edit[0] in CHAT_TEMPLATE
    tokenizer.chat_template = CHAT_TEMPLATE.replace(*edit)
    tokenizer.save_pretrained(str(folder))
    return folder


def test_the_tiny_models_template_trains_what_was_sampled(tiny: Path) -> None:
    check = check_template(tiny)
    assert check.status == "ok", check.line()
    assert "system, tool call, tool result and answer render" in check.message
    assert "matching the sampled text" in check.message


def test_a_template_that_drops_tool_calls_fails(tiny: Path, tmp_path: Path) -> None:
    folder = with_template(
        tiny,
        tmp_path / "no-calls",
        ("{% for call in message.get('tool_calls') or [] %}", "{% for call in [] %}"),
    )
    check = check_template(folder)
    assert check.status == "fail" and "tool call renders as" in check.message
    assert check.fix == "use a chat template that renders tool_calls"


def test_turns_without_an_end_token_warn(tiny: Path, tmp_path: Path) -> None:
    folder = with_template(
        tiny,
        tmp_path / "no-end",
        ("{{ eos_token }}\n{% endfor %}{% if add", "\n{% endfor %}{% if add"),
    )
    check = check_template(folder)
    assert check.status == "warn" and "does not end in an end token" in check.message


def test_a_hub_id_outside_the_cache_is_refused_without_a_download(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InvalidInputError, match="doctor downloads nothing"):
        local_model_dir("someone/not-a-cached-model")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_a_cached_hub_id_is_its_snapshot_folder(
    tiny: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The Hugging Face cache's layout, built by hand: refs/main names the snapshot."""
    from huggingface_hub import constants

    repo = tmp_path / "cache" / "models--someone--tiny-chat"
    snapshot = repo / "snapshots" / ("ab" * 20)
    shutil.copytree(tiny, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("ab" * 20)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    assert local_model_dir("someone/tiny-chat") == snapshot
    assert check_template(snapshot).status == "ok"
