"""`ProbeApp`: the command line's probe and metrics servers as plain WSGI (no Flask).
Served over HTTP by the real servers in tests/unit/test_cli.py and
tests/cluster/test_cli_cluster.py; here, what it answers for each request."""

from __future__ import annotations

from typing import Any

import pytest

from operator_kit.probes import ProbeApp


def call(app: ProbeApp, path: str, method: str = "GET",
         **headers: str) -> tuple[str, dict[str, str], bytes]:
    said: dict[str, Any] = {}

    def start_response(status: str, header_list: list[tuple[str, str]]) -> None:
        said["status"], said["headers"] = status, dict(header_list)

    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": method, **headers},
                        start_response))
    return said["status"], said["headers"], body


def test_probes_answer_as_live_and_ready_say() -> None:
    state = {"live": True, "ready": False}
    app = ProbeApp(["livez", "readyz"], live=lambda: state["live"],
                   ready=lambda: state["ready"])
    assert call(app, "/livez")[::2] == ("200 OK", b"ok\n")
    assert call(app, "/readyz")[::2] == ("503 Service Unavailable", b"not ready\n")
    state["live"] = False
    assert call(app, "/livez")[::2] == ("503 Service Unavailable", b"stopping\n")
    assert call(app, "/livez")[1]["Content-Type"] == "text/plain; charset=utf-8"


def test_readyz_says_the_sharding_mode_in_use_after_its_first_line() -> None:
    from operator_kit.election.range_keeper import readiness

    mode: dict[str, str | None] = {"mode": "labels"}
    app = ProbeApp(["readyz"], live=lambda: True, ready=lambda: True,
                   detail=lambda: readiness(mode["mode"], None))
    assert call(app, "/readyz")[::2] == ("200 OK", b"ok\nsharding: mode=labels\n")
    mode["mode"] = None  # not sharded: nothing more
    assert call(app, "/readyz")[::2] == ("200 OK", b"ok\n")


def test_a_path_it_does_not_serve_is_404_and_a_write_405() -> None:
    app = ProbeApp(["metrics"], live=lambda: True, ready=lambda: True)
    assert call(app, "/livez")[0] == "404 Not Found"
    assert call(app, "/")[0] == "404 Not Found"
    status, headers, _ = call(app, "/metrics", "POST")
    assert (status, headers["Allow"]) == ("405 Method Not Allowed", "GET, HEAD")


def test_metrics_are_the_exposition_and_head_has_no_body() -> None:
    app = ProbeApp(["metrics"], live=lambda: True, ready=lambda: True)
    status, headers, body = call(app, "/metrics")
    assert status == "200 OK" and b"# TYPE" in body
    assert headers["Content-Type"].startswith("text/plain; version=")
    head_status, head_headers, head_body = call(app, "/metrics", "HEAD")
    assert (head_status, head_body) == ("200 OK", b"")
    assert int(head_headers["Content-Length"]) > 0


def test_an_unknown_view_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="ProbeApp serves livez, readyz, metrics, not "
                       "healthz"):
        ProbeApp(["healthz"], live=lambda: True, ready=lambda: True)
