"""history.jsonl at the byte level: the line format, torn-tail repair, corrupt lines, ART rows."""

from __future__ import annotations

import asyncio
import json
import math
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arthex.adapters.jsonl_history import JsonlHistory, encode_row
from arthex.core.errors import CorruptDataError, InvalidInputError
from arthex.core.identity import RunRef
from arthex.core.metrics import MetricsRow

RUN = RunRef("proj", "agent-001")
T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def row(step: int, index: int = 0, /, **values: float | None) -> MetricsRow:
    return MetricsRow(step=step, values=values, recorded_at=T0 + timedelta(seconds=index))


def report(history: JsonlHistory, *rows: MetricsRow, run: RunRef = RUN) -> None:
    async def go() -> None:
        for r in rows:
            await history.report(run, r)

    asyncio.run(go())


def read(history: JsonlHistory, run: RunRef = RUN) -> list[MetricsRow]:
    return list(asyncio.run(history.rows(run)))


def key(r: MetricsRow) -> tuple[int, dict[str, float | None], datetime]:
    return (r.step, dict(r.values), r.recorded_at)


def test_the_file_lives_where_art_puts_it(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    report(history, row(0, **{"train/reward": 1.0}))
    path = tmp_path / "proj" / "models" / "agent-001" / "history.jsonl"
    assert history.path(RUN) == path
    assert path.read_bytes().count(b"\n") == 1


def test_line_format_is_compact_art_json_with_null_for_non_finite(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    report(
        history,
        MetricsRow(
            step=3,
            values={
                "train/reward": 1.0,
                "train/nan": math.nan,
                "train/inf": math.inf,
                "train/ninf": -math.inf,
                "train/int": 2,
                "val/ü": 0.5,
            },
            recorded_at=T0,
        ),
    )
    data = history.path(RUN).read_bytes()
    assert (
        data
        == (
            '{"train/reward":1.0,"train/nan":null,"train/inf":null,"train/ninf":null,'
            '"train/int":2.0,"val/ü":0.5,"step":3,"training_step":3,'
            '"recorded_at":"2024-05-01T12:00:00.123456+00:00"}\n'
        ).encode()
    )
    obj = json.loads(data)
    assert type(obj["train/int"]) is float
    assert type(obj["step"]) is int
    assert datetime.fromisoformat(obj["recorded_at"]).utcoffset() == timedelta(0)


def test_each_row_is_one_line_even_with_a_newline_in_a_key(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    report(history, row(0, 0, **{"a\nb": 1.0}), row(1, 1, **{"c": 2.0}))
    lines = history.path(RUN).read_bytes().split(b"\n")
    assert len(lines) == 3
    assert lines[-1] == b""
    assert [dict(r.values) for r in read(history)] == [{"a\nb": 1.0}, {"c": 2.0}]


def test_a_key_utf8_cannot_store_is_refused_before_writing(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    with pytest.raises(InvalidInputError, match="surrogate"):
        report(history, row(0, 0, **{"bad\ud800": 1.0}))
    assert not history.path(RUN).exists()


def test_a_second_instance_reads_what_the_first_wrote(tmp_path: Path) -> None:
    report(JsonlHistory(str(tmp_path)), row(0, 0, x=1.0), row(1, 1, x=2.0))
    assert [r.values["x"] for r in read(JsonlHistory(str(tmp_path)))] == [1.0, 2.0]


def test_torn_last_line_is_moved_aside_before_the_next_append(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    first = [row(i, i, **{"train/reward": float(i)}) for i in range(3)]
    report(history, *first)
    path = history.path(RUN)
    whole = path.read_bytes()
    fragment = encode_row(row(3, 3, **{"train/reward": 3.0}))[:25]
    path.write_bytes(whole + fragment)  # a crash in the middle of the fourth append

    assert [key(r) for r in read(history)] == [key(r) for r in first]
    later = row(4, 4, **{"train/reward": 4.0})
    report(history, later)

    assert path.read_bytes() == whole + encode_row(later)
    assert [key(r) for r in read(history)] == [key(r) for r in [*first, later]]
    torn = path.with_name("history.jsonl.torn")
    assert torn.read_bytes() == fragment + b"\n"


def test_a_complete_last_row_without_its_newline_is_kept(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    path = history.path(RUN)
    path.parent.mkdir(parents=True)
    rows = [row(i, i, x=float(i)) for i in range(2)]
    path.write_bytes(encode_row(rows[0]) + encode_row(rows[1])[:-1])
    assert [key(r) for r in read(history)] == [key(r) for r in rows]
    report(history, row(2, 2, x=2.0))
    assert [r.values["x"] for r in read(history)] == [0.0, 1.0, 2.0]
    assert not path.with_name("history.jsonl.torn").exists()


def test_corrupt_middle_line_raises_with_its_line_number_and_path(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    report(history, *(row(i, i, x=float(i)) for i in range(4)))
    path = history.path(RUN)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][:20]  # a torn line that another writer appended after
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptDataError, match=r"line 3 of .*history\.jsonl"):
        read(history)


@pytest.mark.parametrize(
    "line",
    [
        b"[1,2,3]",
        b'{"no_step":1.0}',
        b"\xff\xfe{}",
        b'{"step":1,"":2.0}',
        b'{"step":1,"x":1' + b"0" * 400 + b"}",
    ],
    ids=["not-an-object", "no-step", "not-utf8", "empty-key", "int-too-big-for-float"],
)
def test_a_complete_line_that_is_no_row_is_corrupt(tmp_path: Path, line: bytes) -> None:
    history = JsonlHistory(str(tmp_path))
    report(history, row(0, x=1.0))
    path = history.path(RUN)
    path.write_bytes(path.read_bytes() + line + b"\n" + encode_row(row(1, x=2.0)))
    with pytest.raises(CorruptDataError, match="line 2 of"):
        read(history)


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    path = history.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\n" + encode_row(row(0, x=1.0)) + b"  \n\n" + encode_row(row(1, x=2.0)))
    assert [r.step for r in read(history)] == [0, 1]


def test_art_written_rows_read_fine(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    path = history.path(RUN)
    path.parent.mkdir(parents=True)
    path.write_text(
        '{"train/reward":0.5,"train/reward_std_dev":0,"train/exception_rate":0.0,'
        '"training_step":0,"step":0,"recorded_at":"2024-05-01T12:00:00.123456"}\n'
        '{"loss/train":Infinity,"loss/grad_norm":-Infinity,"loss/entropy":NaN,'
        '"training_step":1,"step":1,"recorded_at":"2024-05-01T12:00:01"}\n'
        '{"checkpoint/saved":1.0,"checkpoint/created_at_unix":1714564800.5,'
        '"training_step":1,"step":1,"recorded_at":"2024-05-01T12:00:02"}\n',
        encoding="utf-8",
    )
    first, second, third = read(history)
    assert dict(first.values) == {
        "train/reward": 0.5,
        "train/reward_std_dev": 0.0,
        "train/exception_rate": 0.0,
    }
    assert type(first.values["train/reward_std_dev"]) is float
    assert first.recorded_at == datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert dict(second.values) == {"loss/train": None, "loss/grad_norm": None, "loss/entropy": None}
    assert (third.step, third.values["checkpoint/saved"]) == (1, 1.0)


def test_a_missing_file_reads_as_empty(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path / "does-not-exist"))
    assert read(history) == []
    assert asyncio.run(history.rows_since(RUN, 0)) == ([], 0)


def test_rows_since_reads_only_new_rows_and_skips_a_torn_tail(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    report(history, row(0, 0, x=0.0), row(1, 1, x=1.0))
    got, offset = asyncio.run(history.rows_since(RUN, 0))
    path = history.path(RUN)
    assert [r.step for r in got] == [0, 1]
    assert offset == path.stat().st_size

    torn = encode_row(row(2, 2, x=2.0))[:-9]
    path.write_bytes(path.read_bytes() + torn)
    assert asyncio.run(history.rows_since(RUN, offset)) == ([], offset)

    report(history, row(3, 3, x=3.0))
    got, offset = asyncio.run(history.rows_since(RUN, offset))
    assert [r.step for r in got] == [3]
    assert offset == path.stat().st_size


def test_rows_since_rejects_a_bad_offset(tmp_path: Path) -> None:
    history = JsonlHistory(str(tmp_path))
    report(history, row(0, x=0.0))
    with pytest.raises(InvalidInputError):
        asyncio.run(history.rows_since(RUN, -1))
    size = history.path(RUN).stat().st_size
    with pytest.raises(CorruptDataError, match="shorter than the offset"):
        asyncio.run(history.rows_since(RUN, size + 1))
    with pytest.raises(CorruptDataError, match="byte 3 of"):
        asyncio.run(history.rows_since(RUN, 3))


# -- truncation at every byte of the last line -------------------------------------------------

_keys = st.text(alphabet='abü报/_\n"', min_size=1, max_size=6).filter(
    lambda k: k not in {"step", "training_step", "recorded_at"}
)
_values = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**6), 10**6)
)
_rows = st.lists(
    st.builds(
        MetricsRow,
        step=st.integers(0, 10**6),
        values=st.dictionaries(_keys, _values, max_size=3),
        recorded_at=st.datetimes(timezones=st.just(UTC)),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=12, deadline=None)
@given(rows=_rows)
def test_truncating_the_last_line_anywhere_loses_only_that_line(rows: list[MetricsRow]) -> None:
    extra = MetricsRow(step=1, values={"after": 1.0}, recorded_at=T0)
    want = [key(r) for r in rows]

    async def check(history: JsonlHistory) -> None:
        for r in rows:
            await history.report(RUN, r)
        path = history.path(RUN)
        torn_path = path.with_name("history.jsonl.torn")
        whole = path.read_bytes()
        start = len(whole) - len(encode_row(rows[-1]))
        for cut in range(start, len(whole)):
            path.write_bytes(whole[:cut])
            torn_path.unlink(missing_ok=True)
            kept = len(rows) if cut == len(whole) - 1 else len(rows) - 1

            assert [key(r) for r in await history.rows(RUN)] == want[:kept], cut
            await history.report(RUN, extra)
            assert [key(r) for r in await history.rows(RUN)] == [*want[:kept], key(extra)], cut
            assert path.read_bytes().endswith(b"\n")
            if start < cut < len(whole) - 1:
                assert torn_path.read_bytes() == whole[start:cut] + b"\n", cut
            else:
                assert not torn_path.exists(), cut

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(check(JsonlHistory(root)))
