"""Which request URLs a capture scope records (`core.capture.endpoints`): the chat-completions
route of a watched base URL, however the base URL was spelled, and nothing that is not an
http(s) URL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from arthex.core.capture import endpoints as endpoints_module
from arthex.core.capture.endpoints import EndpointFilter, register_endpoint
from arthex.core.errors import InvalidInputError


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    """No endpoint registered yet, as in a new process; the registry is put back afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(endpoints_module, "_registered", set())
        yield


@pytest.mark.parametrize("url", ["ftp://agent.test/v1/chat/completions", "not a url", ""])
def test_a_url_that_is_not_http_is_never_watched_even_when_any_url_is(url: str) -> None:
    assert not EndpointFilter("any").watches(url)


def test_only_the_chat_completions_route_of_a_watched_endpoint_is_recorded() -> None:
    watched = EndpointFilter(["http://agent.test/v1"])
    assert watched.watches("http://agent.test/v1/chat/completions")
    assert not watched.watches("http://agent.test/v1/embeddings")
    assert not watched.watches("http://agent.test/v1/models")


@pytest.mark.parametrize(
    ("base", "call"),
    [
        ("http://agent.test/v1/", "http://agent.test/v1/chat/completions"),
        ("http://agent.test/v1", "http://agent.test:80/v1/chat/completions"),
        ("https://gateway.test/team/BOX/", "https://gateway.test/team/BOX/chat/completions"),
    ],
)
def test_a_base_url_is_watched_however_its_trailing_slash_and_port_are_spelled(
    base: str, call: str
) -> None:
    assert EndpointFilter([base]).watches(call)


def test_a_base_url_with_a_bad_port_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInputError, match=r"'http://agent.test:99999/v1' has a bad port"):
        EndpointFilter(["http://agent.test:99999/v1"])


def test_a_registered_base_url_is_watched_by_every_scope_that_names_none(
    fresh_registry: None,
) -> None:
    call = "http://agent.test:8000/v1/chat/completions"
    assert not EndpointFilter(None).watches(call)
    register_endpoint("http://agent.test:8000/v1/")
    assert EndpointFilter(None).watches(call)
    assert not EndpointFilter(None).watches("http://agent.test:8001/v1/chat/completions")


def test_registering_a_url_that_is_not_http_is_refused(fresh_registry: None) -> None:
    with pytest.raises(InvalidInputError, match=r"http\(s\) URL with a host, got 'agent.test/v1'"):
        register_endpoint("agent.test/v1")


def test_a_host_named_loopback_is_not_taken_for_localhost(fresh_registry: None) -> None:
    """`localhost`, `127.0.0.1` and `::1` are one host; a machine that happens to be called
    `loopback` is another."""
    register_endpoint("http://localhost:8000/v1")
    assert EndpointFilter(None).watches("http://[::1]:8000/v1/chat/completions")
    assert not EndpointFilter(None).watches("http://loopback:8000/v1/chat/completions")
