"""`arthex.art.trajectories.compact_dump` and `compact_validate` write and read ART 0.5.23's
compact envelope: the same trajectories, groups and tokenized values (sampled on the tiny
model's tokenizer, as in test_art_tokenized_trajectories.py) go through ART's functions in ART's
venv and arthex's here (art/compact_script.py, one script for both); each library reads back
its own envelopes and the other's, and every reading gives the same trajectories, token ids,
flags and logprobs. One ART-venv run; arthex then reads ART's envelopes in this process. Where
the two dump the same JSON (a tokenized legacy history), the envelopes are equal byte for byte;
elsewhere arthex's trajectory JSON differs from ART's (empty `exchanges` written, ...) but the
string tables still agree."""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path
from typing import Any

from arthex.testing.tiny_model import tiny_model

from .art_env import SCRIPTS, both_outcomes
from .test_art_tokenize import Sampler
from .test_art_tokenized_trajectories import cases


def test_each_library_reads_the_others_compact_envelopes(tmp_path: Path) -> None:
    from arthex.art.tokenizer import get_tokenizer
    from arthex.art.trajectories import compact_dump, tokenize

    model = tiny_model(tmp_path / "model")
    groups = cases(Sampler(get_tokenizer(model)))[0]
    [single, _] = asyncio.run(tokenize(groups, model="tiny"))
    ours_payload = {"trajectory_group": compact_dump(groups[0]),
                    "tokenized_trajectory_group": compact_dump(single)}  # fmt: skip
    payload: dict[str, Any] = {
        "groups": [g.model_dump(mode="json") for g in groups],
        "payloads": ours_payload,
    }
    art, ours = both_outcomes("compact_script", payload)
    assert ours["own"] == art["own"]
    assert ours["own_json"] == art["own_json"]
    assert art["theirs"] == {name: art["own"][name] for name in ours_payload}  # ART reads ours
    sys.path.insert(0, str(SCRIPTS))
    try:
        run = importlib.import_module("compact_script").run
    finally:
        sys.path.remove(str(SCRIPTS))
    reread = run("arthex.art", {**payload, "payloads": art["payloads"]})
    assert reread["theirs"] == art["own"]  # arthex reads every one of ART's
    assert {p["kind"] for p in art["payloads"].values()} == set(art["payloads"])
    assert all(p["strings"] for p in art["payloads"].values())  # the table was worth it
    assert art["own"]["tokenized_trajectory"]["histories"][0]["tokens"]
    # the same JSON gives the same envelope: ART's string table, byte for byte
    assert ours["payloads"]["tokenized_history"] == art["payloads"]["tokenized_history"]
    for name in ("trajectory", "tokenized_trajectory", "tokenized_multi_history_trajectory"):
        assert ours["payloads"][name]["strings"] == art["payloads"][name]["strings"], name
