"""Reading the pipeline record back (pipeline_record.py): what a hand-written JSON document
reads as, and the CorruptDataError each kind of damage gets, naming what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from arthex.core.errors import CorruptDataError
from arthex.core.pipeline_record import InFlight, PipelineRecord


def document(**fields: Any) -> dict[str, Any]:
    """The smallest record a writer may leave: the optional keys absent."""
    return {
        "version": 1,
        "step": 0,
        "offset": 0,
        "pending": [],
        "discarded": {},
        "trained_groups": 0,
        **fields,
    }


def test_a_record_without_its_optional_keys_reads_as_the_empty_record() -> None:
    assert PipelineRecord.from_json(document()) == PipelineRecord()


def test_a_record_with_ranges_reads_as_the_indices_they_hold() -> None:
    data = document(
        step=3,
        offset=9,
        pending=[[0, 2], [7, 8]],
        discarded={"stale": [[2, 4]]},
        trained_groups=1,
        in_flight={"step": 3, "indices": [[4, 6]], "metrics": {"queue/depth": 1}},
        evaluations_due=[2],
        totals={"wall_s": 1.5},
    )
    assert PipelineRecord.from_json(data) == PipelineRecord(
        step=3,
        offset=9,
        pending=(0, 1, 7),
        discarded={"stale": (2, 3)},
        trained_groups=1,
        in_flight=InFlight(step=3, indices=(4, 5), metrics={"queue/depth": 1.0}),
        evaluations_due=(2,),
        totals={"wall_s": 1.5},
    )


def test_an_unreadable_record_is_named_with_its_reason_and_what_to_do() -> None:
    with pytest.raises(CorruptDataError) as caught:
        PipelineRecord.from_json(document(version=7))
    assert str(caught.value) == (
        "the pipeline record cannot be read (unknown version 7); it was not written by this "
        "version of arthex, or was edited. Move it aside to start the scenario stream over."
    )


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"step": -1}, "expected an integer >= 0, got -1"),
        ({"step": True}, "expected an integer >= 0, got True"),
        ({"step": 2.0}, "expected an integer >= 0, got 2.0"),
        ({"offset": 4, "pending": [[3, 3]]}, "empty range [3, 3)"),
        ({"offset": 4, "pending": [[3, 2]]}, "empty range [3, 2)"),
    ],
)
def test_a_step_or_range_that_is_not_a_count_is_corrupt_data_naming_the_value(
    fields: dict[str, Any], reason: str
) -> None:
    with pytest.raises(CorruptDataError) as caught:
        PipelineRecord.from_json(document(**fields), where="run/pipeline.json")
    assert str(caught.value).startswith(f"run/pipeline.json cannot be read ({reason});")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"offset": 3, "pending": [[3, 4]]}, "scenario 3 is pending but the stream offset is 3"),
        (
            {"offset": 5, "in_flight": {"step": 0, "indices": [[5, 6]], "metrics": {}}},
            "scenario 5 is in_flight but the stream offset is 5",
        ),
        (
            {"offset": 5, "pending": [[1, 3]], "discarded": {"errored": [[2, 3]]}},
            "scenario 2 is both pending and discarded/errored in the pipeline record",
        ),
        (
            {
                "offset": 5,
                "pending": [[1, 2]],
                "in_flight": {"step": 0, "indices": [[0, 2]], "metrics": {}},
            },
            "scenario 1 is both pending and in_flight in the pipeline record",
        ),
    ],
)
def test_a_scenario_at_the_offset_or_in_two_places_is_corrupt_data_naming_the_places(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(CorruptDataError) as caught:
        PipelineRecord.from_json(document(**fields))
    assert str(caught.value) == message
